"""The daemon's loop: ticks the parts compose.py built, handles signals, and cleans up on every exit path.

Each tick: sample every GPU into one Snapshot, let the rungs act on that same snapshot (ladder.py), then
publish the result (memory for HTTP, an atomic JSON file for the CLI): the ``PublishedState`` built from every
part's state (``published_state``: the thermal limits in force, the read errors counted across ticks). A consumer
that raises is logged and reported as a daemon failure; it never stops the loop. At the start, the GPUs found
are logged (``log_discovery``).

systemd (docs/systemd.md): READY=1 after the first full tick (every GPU read or reported missing),
STATUS= with a one-line summary when it changes, WATCHDOG=1 from this loop only (a stuck tick stops the
pings and systemd restarts us), STOPPING=1 when shutdown starts. SIGHUP reloads the config file from
the same path between ticks, never adding one (bursts coalesced): RELOADING=1, the new configuration
(its live keys, gpuwatch.daemon.reload) replaces the loop's one Config, which every tick passes to every
part, then READY=1; an invalid file is logged and the running config stays.

Signal handlers only set a flag and poke a self-pipe (wakeup.py); the loop logs what arrived.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import Counter
from collections.abc import Callable
from functools import partial
from pathlib import Path
from types import FrameType

from gpuwatch import __version__
from gpuwatch.config.base import ConfigError
from gpuwatch.config.cooling import ThermalConfig
from gpuwatch.config.file import Config, load_config
from gpuwatch.daemon import compose, sense
from gpuwatch.daemon.compose import Parts
from gpuwatch.daemon.control import ControlServer
from gpuwatch.daemon.health import NodeWatch
from gpuwatch.daemon.ladder import Guard, act, hand_back
from gpuwatch.daemon.reload import plan_reload
from gpuwatch.daemon.sdnotify import Notifier
from gpuwatch.daemon.servers import http_server, start_control
from gpuwatch.daemon.wakeup import Flag, Signals, Wakeup
from gpuwatch.limits import LimitsInForce, limits_in_force
from gpuwatch.model import Acted, DaemonInfo, PublishedState, SensorLimit, Snapshot, replaced
from gpuwatch.publish.document import to_document
from gpuwatch.publish.history_store import HistoryStore
from gpuwatch.publish.http import HttpServer
from gpuwatch.publish.live import ladder_rungs
from gpuwatch.publish.live_feed import LiveFeed
from gpuwatch.publish.receipt_store import keep_last_state
from gpuwatch.publish.state import StateHolder, write_state_file
from gpuwatch.publish.summary import status_line

log = logging.getLogger("gpuwatch")
# SIGHUPs closer together than this share one reload (a burst of 20 is two reloads, not 21).
RELOAD_GAP_S = 1.0


class Daemon:
    def __init__(
        self,
        config: Config,
        parts: Parts | None = None,
        config_path: Path | None = None,
        load: Callable[[], Config] | None = None,
        notifier: Notifier | None = None,
    ) -> None:
        """``parts`` default to what ``compose.build(config)`` makes for the config (tests may pass their
        own). ``load`` re-reads the config for SIGHUP (the CLI passes one that keeps its command-line
        overrides); by default it is ``load_config(config_path)``. Without either, SIGHUP is refused."""
        if parts is None:
            config, parts = compose.build(config)
        self.config = config
        self.config_path = config_path
        self._load = load or ((lambda: load_config(config_path)) if config_path is not None else None)
        self.notifier = notifier or Notifier(None)
        self.parts = parts
        # A longer gap between two readings (a stuck tick) adds no energy or time throttled.
        self.sampler = sense.sampler(self.parts.sources, config.interval_s)
        self.holder = StateHolder()
        self.live = LiveFeed(config.interval_s)  # the live page's summary, history and events (docs/page.md)
        # The history ring on disk (its own writer thread), fed by the live feed's points and events.
        self.history = HistoryStore(config.history_dir) if config.history.enabled else None
        if self.history is not None:
            self.live.record = self.history.add
        self.started_unix = time.time()
        self.ticks_total = 0
        # Set by signal handlers: plain flags and a self-pipe, never a lock (see Wakeup).
        self.stop_requested = Flag()
        self.reload_requested = Flag()
        self._wakeup = Wakeup()  # interrupts the wait between ticks (stop or reload)
        self._signals = Signals()  # installs the handlers; the stop signals received, logged by the loop
        self._next_reload = 0.0  # monotonic time before which a requested reload waits (coalescing)
        self._guard = Guard()  # each part of the daemon run in a guard of its own (ladder.py)
        self.failures = self._guard.failures  # published with every tick while they last
        self.control: ControlServer | None = None
        self.read_errors: Counter[tuple[str, str]] = Counter()
        self._limits = LimitsInForce()  # the tick's limits, the same tuple while crits and [thermal] are
        self.http: HttpServer | None = None
        self.node = NodeWatch()  # mapped jobs, job receipts and the health verdict (daemon/health.py)

    def tick(self) -> PublishedState:
        snapshot = self.sampler.sample()
        usage, config = self.parts.gpu_use, self.config  # this tick's configuration, reloads in between
        if usage is not None:
            trainer_trees = self.parts.trainers.trees if self.parts.trainers is not None else dict
            # Each stage (reset detection, the process scan, reset recovery) in a guard of its own.
            snapshot = self._guard("processes and resets", lambda: usage.observe(snapshot, trainer_trees, self._guard),
                                   snapshot)
        acted = act(self.parts, snapshot, config, self._guard)
        self.ticks_total += 1
        count_read_errors(self.read_errors, snapshot)
        failures = tuple(f"{part}: {why}" for part, why in self.failures.items())
        absent = config.slots_not_present({gpu.gpu_id for gpu in snapshot.gpus}, tables=False)  # trainers' only
        daemon = DaemonInfo(pid=os.getpid(), version=__version__, started_unix=self.started_unix,
                            ticks_total=self.ticks_total, interval_s=config.interval_s,
                            taken_boottime_s=time.clock_gettime(time.CLOCK_BOOTTIME),
                            failures=failures + (("config: " + "; ".join(absent),) if absent else ()))
        state = published_state(snapshot, daemon, acted, self.read_errors, config, self._limits)
        state = self._guard("health verdict", partial(self.node.observe, state, config), state)
        document = to_document(state, source="daemon")
        if self.http is not None or self.history is not None:
            self._guard("live page", lambda: self.live.publish(state, config), None)
        self._guard("state file", lambda: write_state_file(self.config.state_file, document), None)
        # Last of the tick's own work: it wakes the /metrics render (http.MetricsCache.prerender), which ran
        # beside the live page and the state file's write and fought this thread for the GIL at every syscall.
        self.holder.publish(state, document)
        for hook in self.parts.on_tick:
            self._guard("tick hook", partial(hook, state), None)
        return state

    def run(self) -> int:
        """Tick until SIGTERM/SIGINT; always stop trainers, restore fans and caps, remove the state file."""
        self._install_signals()
        if self.parts.trainers is not None:
            # A trainer's double-forked setsid worker comes back to us, not to init (supervise/orphans.py).
            self.parts.trainers.start()
        self.control = start_control(self.parts, lambda: self.config, self.holder, self._guard)
        try:
            first = self.sampler.sample()
            log_discovery(self.config, first)
            # The previous daemon's job receipts, before the first tick overwrites its state file (daemon/health.py).
            self._guard("job receipts", partial(self.node.take_back, self.config), None)
            deadline = time.monotonic()
            ready = False
            if self.history is not None:
                self.history.start()
            self.start_http()
            while not self.stop_requested.is_set():
                self._signals.log_new(log)
                state = self.tick()
                self._notify_tick(state, first_tick=not ready)
                ready = True
                deadline += self.config.interval_s
                delay = deadline - time.monotonic()
                if delay < 0:
                    # Overran a tick: start the schedule again rather than firing a burst to catch up.
                    deadline, delay = time.monotonic(), 0.0
                self._wait(delay)
        finally:
            self._signals.log_new(log)
            self.shutdown()
            self._signals.uninstall()
            self._signals.log_new(log)
            self._wakeup.close()
        return 0

    def _notify_tick(self, state: PublishedState, first_tick: bool) -> None:
        summary = status_line(state)
        if first_tick:
            self.notifier.ready(summary)  # every GPU was read (or reported missing) in this tick
        else:
            self.notifier.status(summary)
        self.notifier.watchdog()

    def _wait(self, delay_s: float) -> None:
        """Sleep until the next tick; wake early for stop, for reloads and for watchdog pings that fall
        due in between (interval_s may be longer than half of WatchdogSec).

        Reloads are done here, between ticks, and never add one: the schedule stays where it was. A
        burst of SIGHUPs is coalesced: at most one reload per RELOAD_GAP_S, the last one after the
        burst, so the file the last signal meant is the one in force.
        """
        end = time.monotonic() + delay_s
        while not self.stop_requested.is_set():
            self._signals.log_new(log)
            now = time.monotonic()
            if self.reload_requested.is_set() and now >= self._next_reload:
                self.reload()
                self._next_reload = time.monotonic() + RELOAD_GAP_S
                continue
            wake_in = [end - now]
            if wake_in[0] <= 0:
                return
            if self.reload_requested.is_set():
                wake_in.append(self._next_reload - now)
            ping_in = self.notifier.next_ping_in_s()
            if ping_in is not None:
                wake_in.append(ping_in)
            self._wakeup.wait(max(0.0, min(wake_in)))
            self.notifier.watchdog()

    def reload(self) -> bool:
        """Re-read the config file; swap in what can change live, keep the rest; False if rejected."""
        self.reload_requested.clear()
        if self._load is None:
            log.error("reload requested but the daemon was started without a config file: nothing to reload")
            return False
        self.notifier.reloading()
        try:
            # The running config is the effective one (compose.build: simulating, the simulator's tree is the
            # sysfs root); the new file is compared in the same form, so only what the file changed is listed.
            new = self._load().with_effective_sysfs()
        except Exception as exc:  # besides ConfigError, a loader's bug must not end the daemon at a reload
            why = f"\n{exc}" if isinstance(exc, ConfigError) else f" {type(exc).__name__}: {exc}"
            log.error("config reload rejected, still running the previous configuration:%s", why)
            self.notifier.ready()
            return False
        plan = plan_reload(self.config, new)
        self.config = plan.config
        self._apply_live(plan.applied)
        if self.http is not None:  # the web config and its certificates, read again (docs/security.md)
            self._guard("http reload", self.http.reload, None)
        log.info(
            "config reloaded from %s: %s",
            self.config_path or "its source",
            "applied " + plan.describe_applied() if plan.applied else "no live setting changed",
        )
        if plan.needs_restart:
            log.warning(
                "changed in the config but kept until a restart (systemctl restart gpuwatch): %s",
                ", ".join(plan.needs_restart),
            )
        self.notifier.ready()
        return True

    def _apply_live(self, applied: tuple[str, ...]) -> None:
        """What a new ``self.config`` does not reach by itself: every part reads the live settings from the
        config each tick passes it (reload.LIVE_KEYS), only the process-wide log level is set here."""
        if "log_level" in applied:
            logging.getLogger().setLevel(getattr(logging, self.config.log_level.upper()))

    def shutdown(self) -> None:
        """The servers stop, then every rung is handed back (ladder.hand_back), then the state file goes."""
        self.notifier.stopping()
        if self.http is not None:
            self._guard("http stop", self.http.stop, None)
            self.http = None
        if self.control is not None:
            self._guard("control socket stop", self.control.stop, None)
            self.control = None
        hand_back(self.parts, self._guard)
        if self.history is not None:  # the open buckets written, before the state file goes
            self._guard("history stop", self.history.stop, None)
        if self.parts.gpu_use is not None:
            self._guard("uevent socket close", self.parts.gpu_use.close, None)
        try:  # renamed, not removed: the next daemon takes the job receipts back from it (publish/receipt_store.py)
            keep_last_state(Path(self.config.state_file))
        except OSError as exc:  # a read-only runtime directory: fans and caps went back, so still exit 0
            log.warning("cannot remove the state file %s: %s", self.config.state_file, exc.strerror or exc)
        log.info("gpuwatch stopped")
        self.notifier.close()

    @property
    def http_port(self) -> int | None:
        """The bound HTTP port (the real one when the config asked for port 0), None when not serving."""
        return None if self.http is None else self.http.port

    def start_http(self) -> None:
        """Serve /metrics, /healthz and /status as ``[http]`` says (``run`` calls it before the first tick).

        A port already in use is logged and the daemon goes on: fans and supervision matter more.
        """
        self.http = http_server(self.config, self.holder, self.live, self.failures, self.history)
        if self.http is not None:
            self.http.start()

    def request_stop(self, signum: int | None = None, frame: FrameType | None = None) -> None:
        """SIGTERM/SIGINT (or any thread): a flag and a byte on the self-pipe, no lock (wakeup.py)."""
        if signum is not None:
            self._signals.received(signum)
        self.stop_requested.set()
        self._wakeup.poke()

    def request_reload(self, signum: int | None = None, frame: FrameType | None = None) -> None:
        # Only a flag: the loop reloads between ticks, never inside a signal handler mid-tick.
        self.reload_requested.set()
        self._wakeup.poke()

    def _install_signals(self) -> None:
        if threading.current_thread() is threading.main_thread():
            self._signals.install(self.request_stop, self.request_reload)


def published_state(snapshot: Snapshot, daemon: DaemonInfo, acted: Acted, read_errors: Counter[tuple[str, str]],
                    config: Config, limits: Callable[[Snapshot, ThermalConfig], tuple[SensorLimit, ...]]
                    = limits_in_force) -> PublishedState:
    """The tick's state as /metrics, /status and the state file read it; the limits from ``config`` (the
    tick's own configuration: a reload shows from the next tick on) by ``limits`` (``limits_in_force``, or the
    daemon's ``LimitsInForce``)."""
    state = PublishedState(
        snapshot=snapshot, daemon=daemon, fans=acted.fans, trainers=acted.trainers, powers=acted.powers,
        read_errors_total=tuple((gpu, sensor, n) for (gpu, sensor), n in sorted(read_errors.items())),
        limits_c=limits(snapshot, config.thermal), clocks=acted.clocks, unmanaged=acted.unmanaged,
    )
    rungs = ladder_rungs(state, config.fan.for_gpu, (gpu.gpu_id for gpu in snapshot.gpus if gpu.up))
    return replaced(state, ladder_rungs=tuple(rungs))


def count_read_errors(totals: Counter[tuple[str, str]], snapshot: Snapshot) -> None:
    """Cumulative per-sensor read failures for the exporter's counter; a GPU that is gone counts as down, not
    as errors."""
    for gpu in snapshot.gpus:
        if gpu.up:
            totals.update((gpu.gpu_id, error.sensor) for error in gpu.errors)


def log_discovery(config: Config, snapshot: Snapshot) -> None:
    """The first sample, for the journal: each GPU, each card not read, each slot the config names that is not here."""
    for gpu in snapshot.gpus:
        log.info("GPU %s (%s, %s): %s", gpu.gpu_id, gpu.card, gpu.backend, gpu.name or gpu.device_id)
    for card in snapshot.unsupported:
        log.info("card %s uses driver %s: not supported, not read", card.card, card.driver)
    for line in config.slots_not_present({gpu.gpu_id for gpu in snapshot.gpus}):
        log.warning("%s", line)
    if not snapshot.gpus:
        log.warning(
            "no GPU found (backend %s; amdgpu under %s/class/drm). Point gpuwatch at another sysfs tree with "
            "--sysfs-root DIR (or sysfs_root in the config), or run the simulator: gpuwatch run --simulate",
            config.backend,
            config.sysfs_root,
        )
