"""Composition root: config -> objects, the tick loop, signals, and cleanup on every exit path.

Each tick: sample every GPU into one Snapshot, let the consumers act on that same snapshot, then
publish the result (memory for HTTP, an atomic JSON file for the CLI). A consumer that raises is
logged and reported as a daemon failure; it never stops the loop.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Callable, Protocol

from gpuwatch import __version__
from gpuwatch.amdgpu import AmdgpuBackend
from gpuwatch.backend import GpuBackend
from gpuwatch.config import Config, ConfigError
from gpuwatch.control import ControlServer
from gpuwatch.document import to_document
from gpuwatch.http import HttpServer
from gpuwatch.nvml import NvmlBackend, NvmlUnavailable
from gpuwatch.model import DaemonInfo, FanState, PublishedState, Snapshot, TrainerState
from gpuwatch.sampler import Sampler
from gpuwatch.simulated import SimulatedBackend, start_simulator
from gpuwatch.state import StateHolder, write_state_file
from gpuwatch.sysfs import Sysfs

log = logging.getLogger("gpuwatch")


class FanConsumer(Protocol):
    def tick(self, snapshot: Snapshot) -> tuple[FanState, ...]: ...
    def restore(self) -> None: ...


class TrainerConsumer(Protocol):
    def tick(self, snapshot: Snapshot, fans: tuple[FanState, ...]) -> tuple[TrainerState, ...]: ...
    def stop(self) -> None: ...


@dataclass
class Parts:
    """What the composition root built; tests may pass their own."""

    backends: list[GpuBackend]
    fans: FanConsumer | None = None
    trainers: TrainerConsumer | None = None
    on_tick: list[Callable[[PublishedState], None]] = field(default_factory=list)


def build_backends(config: Config, nvml: object | None = None) -> list[GpuBackend]:
    """The backends ``config.backend`` names; ``nvml`` injects a pynvml-like module (tests).

    auto never fails: NVML that is absent or cannot initialise is logged and skipped. An explicit
    ``backend = "nvml"`` without a working NVML is a configuration error (exit 2), said plainly.
    """
    backends: list[GpuBackend] = []
    if config.backend in ("auto", "amdgpu"):
        backends.append(AmdgpuBackend(Sysfs(config.sysfs_root)))
    if config.backend in ("auto", "nvml"):
        try:
            backends.append(NvmlBackend(nvml))
        except NvmlUnavailable as exc:
            if config.backend == "nvml":
                raise ConfigError(f"backend = \"nvml\": {exc}") from None
            log.debug("NVIDIA backend not used: %s", exc)
    return backends


def build_fans(config: Config) -> FanConsumer | None:
    if config.fan.mode == "off":
        return None
    from gpuwatch.fancontrol import FanController

    return FanController(config.fan, Sysfs(config.sysfs_root), config.resolved_runtime_dir)


def build_supervisor(config: Config) -> TrainerConsumer | None:
    """The training supervisor for the configured `[[trainer]]`s, or None when there are none."""
    if not config.trainer:
        return None
    from gpuwatch.supervisor import Supervisor

    return Supervisor(list(config.trainer), config.thermal, config.resolved_runtime_dir / "trainers")


def build_parts(config: Config) -> Parts:
    return Parts(backends=build_backends(config), fans=build_fans(config), trainers=build_supervisor(config))


class Daemon:
    def __init__(self, config: Config, parts: Parts | None = None) -> None:
        # The simulator's tree must exist before any part probes it: it becomes the sysfs root.
        self.simulator = start_simulator(config) if parts is None and config.simulating else None
        if self.simulator is not None:
            # The simulated cards are amdgpu cards in a tree: read them like real ones, and only them.
            config = config.model_copy(update={"sysfs_root": self.simulator.root, "backend": "amdgpu"})
            log.info("simulating %d RX 5600 XT card(s) in %s (time x%g)", config.simulate.gpus,
                     self.simulator.root, config.simulate.time_scale)
        self.config = config
        self.parts = parts or build_parts(config)
        if self.simulator is not None:
            self.parts.backends = [SimulatedBackend(self.simulator, b) for b in self.parts.backends]
            self.parts.on_tick.append(self.simulator.observe)
        self.sampler = Sampler(self.parts.backends)
        self.holder = StateHolder()
        self.started_unix = time.time()
        self.ticks_total = 0
        self.stop_requested = threading.Event()
        self.failures: dict[str, str] = {}
        self.control: ControlServer | None = None
        self.read_errors: Counter[tuple[str, str]] = Counter()
        self.http: HttpServer | None = None

    def _start_control(self) -> None:
        """`gpuwatch pause|resume|restart` reach the supervisor through a local unix socket."""
        handler = getattr(self.parts.trainers, "command", None)
        if handler is None:
            return
        server = ControlServer(self.config.control_socket, handler)
        self._guard("control socket", server.start, None)
        self.control = server if "control socket" not in self.failures else None

    def tick(self) -> PublishedState:
        snapshot = self.sampler.sample()
        fans: tuple[FanState, ...] = ()
        trainers: tuple[TrainerState, ...] = ()
        if self.parts.fans is not None:
            fans = self._guard("fan controller", lambda: self.parts.fans.tick(snapshot), ())  # type: ignore[union-attr]
        if self.parts.trainers is not None:
            trainers = self._guard("supervisor", lambda: self.parts.trainers.tick(snapshot, fans), ())  # type: ignore[union-attr]
        self.ticks_total += 1
        _count_read_errors(self.read_errors, snapshot)
        state = PublishedState(
            snapshot=snapshot,
            daemon=DaemonInfo(
                pid=os.getpid(),
                version=__version__,
                started_unix=self.started_unix,
                ticks_total=self.ticks_total,
                interval_s=self.config.interval_s,
                failures=tuple(f"{part}: {why}" for part, why in self.failures.items()),
            ),
            fans=fans,
            trainers=trainers,
            read_errors_total=tuple((gpu, sensor, n) for (gpu, sensor), n in sorted(self.read_errors.items())),
        )
        document = to_document(state, self.config.thermal, source="daemon")
        self.holder.publish(state, document)
        self._guard("state file", lambda: write_state_file(self.config.state_file, document), None)
        for hook in self.parts.on_tick:
            self._guard("tick hook", lambda: hook(state), None)
        return state

    def run(self) -> int:
        """Tick until SIGTERM/SIGINT; always stop trainers, restore fans and remove the state file."""
        self._install_signals()
        self._start_control()
        first = self.sampler.sample()
        _log_discovery(self.config, first)
        interval = self.config.interval_s
        deadline = time.monotonic()
        try:
            self._start_http()
            while not self.stop_requested.is_set():
                self.tick()
                deadline += interval
                delay = deadline - time.monotonic()
                if delay < 0:
                    # Overran a tick: start the schedule again rather than firing a burst to catch up.
                    deadline, delay = time.monotonic(), 0.0
                self.stop_requested.wait(delay)
        finally:
            self.shutdown()
        return 0

    def shutdown(self) -> None:
        """Trainers first (they get their checkpoint time), then fans back to the firmware."""
        if self.http is not None:
            self._guard("http stop", self.http.stop, None)
            self.http = None
        if self.control is not None:
            self._guard("control socket stop", self.control.stop, None)
            self.control = None
        if self.parts.trainers is not None:
            self._guard("supervisor stop", self.parts.trainers.stop, None)
        if self.parts.fans is not None:
            self._guard("fan restore", self.parts.fans.restore, None)
        Path(self.config.state_file).unlink(missing_ok=True)
        log.info("gpuwatch stopped")

    @property
    def http_port(self) -> int | None:
        """The bound HTTP port (the real one when the config asked for port 0), None when not serving."""
        return None if self.http is None else self.http.port

    def _start_http(self) -> None:
        """A port already in use is logged and the daemon goes on: fans and supervision matter more."""
        http = self.config.http
        if not http.enabled:
            return
        try:
            self.http = HttpServer(self.holder, self.config.thermal, http.listen, http.port)
        except OSError as exc:
            log.error("cannot serve HTTP on %s:%d: %s; metrics are off", http.listen, http.port, exc.strerror)
            self.failures["http"] = f"cannot listen on {http.listen}:{http.port}: {exc.strerror}"
            return
        self.http.start()

    def request_stop(self, signum: int | None = None, frame: FrameType | None = None) -> None:
        if signum is not None:
            log.info("received %s, stopping", signal.Signals(signum).name)
        self.stop_requested.set()

    def _install_signals(self) -> None:
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self.request_stop)
            signal.signal(signal.SIGINT, self.request_stop)

    def _guard(self, part: str, action: Callable[[], object], fallback: object) -> object:
        try:
            result = action()
        except Exception as exc:
            if part not in self.failures:
                log.exception("%s failed", part)
            self.failures[part] = f"{type(exc).__name__}: {exc}"
            return fallback
        self.failures.pop(part, None)
        return result


def _count_read_errors(totals: Counter[tuple[str, str]], snapshot: Snapshot) -> None:
    """Cumulative per-sensor read failures for the exporter's counter; a GPU that is gone counts as down, not as errors."""
    for gpu in snapshot.gpus:
        if gpu.up:
            totals.update((gpu.gpu_id, error.sensor) for error in gpu.errors)


def _log_discovery(config: Config, snapshot: Snapshot) -> None:
    for gpu in snapshot.gpus:
        log.info("GPU %s (%s, %s): %s", gpu.gpu_id, gpu.card, gpu.backend, gpu.name or gpu.device_id)
    for card in snapshot.unsupported:
        log.info("card %s uses driver %s: not supported, not read", card.card, card.driver)
    if not snapshot.gpus:
        log.warning(
            "no GPU found (backend %s; amdgpu under %s/class/drm). Point gpuwatch at another sysfs tree with "
            "--sysfs-root DIR (or sysfs_root in the config), or run the simulator: gpuwatch run --simulate",
            config.backend,
            config.sysfs_root,
        )
