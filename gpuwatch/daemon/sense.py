"""What the daemon and the CLI read, one way: the GPU sources, the Sampler, who uses which GPU, which was reset.

The GPU sources the config names and the Sampler over them; who uses which GPU and which GPU was reset, from the
same tick.

The daemon's loop samples every tick and hands the snapshot to ``GpuUseWatch``; `gpuwatch status`/`sensors`
(cli/show.py) and `gpuwatch health` without a daemon (cli/health/) read once through the same ``sampler``.

Order matters: this tick's reset events are found first, so the process monitor already treats a GPU
that just reset (or one that is gone) carefully -- no fdinfo reads of its clients, a D-state check of
every thread of its holders -- and the reset watch then sees those holders' states.

Each stage runs in its own guard (the loop's ``_guard``: a stage that raises is logged once and
published in the daemon's failures under its own name) and a fault in one never costs another its
tick (issue 31): a devcoredump still counts when the uevent socket or the process scan raises, and a
scan that raises leaves the reset watch the holders' states of the last scan that worked (a GPU is
not declared recovered on a scan that saw nothing).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol, TypeVar

from gpuwatch.config.base import ConfigError
from gpuwatch.config.file import REAL_SYSFS_ROOT, Config
from gpuwatch.gpus.amdgpu_source import AmdgpuSource
from gpuwatch.gpus.amdgpuinfo import AmdgpuInfo, WithAmdgpuInfo
from gpuwatch.gpus.nvml import NvmlSource, NvmlUnavailable
from gpuwatch.gpus.sampler import Sampler
from gpuwatch.gpus.source import GpuSource
from gpuwatch.model import GpuProcess, GpuResetState, Snapshot, replaced
from gpuwatch.procfs import Procfs
from gpuwatch.procs.monitor import ProcessMonitor
from gpuwatch.resets.devcoredump import DevCoredumps
from gpuwatch.resets.recovery import ResetEvent
from gpuwatch.resets.uevent import UeventFeed, open_uevents
from gpuwatch.resets.watch import ResetWatch
from gpuwatch.sysfs import Sysfs

log = logging.getLogger("gpuwatch")
T = TypeVar("T")


class Guard(Protocol):
    """``guard(part, action, fallback)``: ``action()``, or ``fallback`` when it raised (logged, published)."""

    def __call__(self, part: str, action: Callable[[], T], fallback: T) -> T: ...


def unguarded(part: str, action: Callable[[], T], fallback: T) -> T:
    return action()


class GpuUseWatch:
    def __init__(self, monitor: ProcessMonitor | None, resets: ResetWatch | None,
                 close: Callable[[], None] | None = None) -> None:
        self.monitor = monitor
        self.resets = resets
        self._close = close
        self._last_processes: tuple[GpuProcess, ...] = ()  # of the last scan that worked
        self._pending: list[ResetEvent] = []  # found, but the recovery step that counts them raised

    def observe(self, snapshot: Snapshot, trees: Callable[[], Mapping[str, Sequence[int]]],
                guard: Guard = unguarded) -> Snapshot:
        """This tick's processes and resets added to ``snapshot``; ``trees``: each trainer's process tree."""
        now, now_unix = snapshot.taken_monotonic, snapshot.taken_unix
        resets = self.resets
        gpu_ids = {gpu.gpu_id for gpu in snapshot.gpus}
        events, self._pending = self._pending, []
        if resets is not None:
            events += guard("reset detection (devcoredump)", lambda: resets.dump_events(gpu_ids), [])
            events += guard("reset detection (uevents)", lambda: resets.uevent_events(gpu_ids), [])
        careful = {event.gpu_id for event in events} | {gpu.gpu_id for gpu in snapshot.gpus if not gpu.up}
        if resets is not None:
            careful |= resets.recovering()
        processes: tuple[GpuProcess, ...] = ()
        unreadable = 0
        holders = self._last_processes
        monitor = self.monitor
        if monitor is not None:
            nobody: Mapping[str, Sequence[int]] = {}
            owners = guard("trainer trees", trees, nobody)
            scanned = guard("process scan", lambda: monitor.sample(owners, now, frozenset(careful), now_unix), None)
            if scanned is not None:
                processes, unreadable = scanned
                holders = self._last_processes = processes
        states: tuple[GpuResetState, ...] = ()
        if resets is not None:
            stepped = guard("reset recovery", lambda: resets.update(snapshot, events, holders, now, now_unix), None)
            if stepped is None:
                self._pending, stepped = events, resets.published(snapshot)  # counted on the next tick
            states = stepped
        return replaced(snapshot, processes=processes, processes_unreadable=unreadable, resets=states)

    def close(self) -> None:
        if self._close is not None:
            self._close()


def amdgpu_source(config: Config) -> AmdgpuSource | None:
    """The amdgpu reader when ``config.backend`` asks for one (it also locates cards for the fans)."""
    if config.backend not in ("auto", "amdgpu"):
        return None
    return AmdgpuSource(Sysfs(config.sysfs_root), deadline_s=config.sysfs_deadline_s)


def with_amdgpuinfo(config: Config, amdgpu: GpuSource, module: object | None = None) -> GpuSource:
    """``amdgpu`` with pyamdgpuinfo's readings merged in when they describe the same GPUs: the real /sys
    (not a simulated or test tree); ``module`` injects a stand-in for pyamdgpuinfo (tests)."""
    # /dev/dri, what pyamdgpuinfo reads, belongs to the machine's own tree only.
    if config.amdgpuinfo.mode == "off" or (module is None and config.sysfs_root != REAL_SYSFS_ROOT):
        return amdgpu
    return WithAmdgpuInfo(amdgpu, AmdgpuInfo(module, polls_per_second=config.amdgpuinfo.polls_per_second))


def build_sources(config: Config, nvml: object | None = None, amdgpu: AmdgpuSource | None = None) -> list[GpuSource]:
    """The GPU sources ``config.backend`` names; ``nvml`` injects a pynvml-like module (tests), ``amdgpu``
    a reader built with ``amdgpu_source`` (shared with the fan controller).

    auto never fails: NVML that is absent or cannot initialise is logged and skipped. An explicit
    ``backend = "nvml"`` without a working NVML is a configuration error (exit 2), said plainly.
    """
    sources: list[GpuSource] = []
    amdgpu = amdgpu or amdgpu_source(config)
    if amdgpu is not None:
        sources.append(with_amdgpuinfo(config, amdgpu))
    if config.backend in ("auto", "nvml"):
        try:
            sources.append(NvmlSource(nvml))
        except NvmlUnavailable as exc:
            if config.backend == "nvml":
                raise ConfigError(f"backend = \"nvml\": {exc}") from None
            log.debug("NVIDIA backend not used: %s", exc)
    return sources


def sampler(sources: Sequence[GpuSource], interval_s: float = 0.0) -> Sampler:
    """The Sampler over ``sources``: the daemon's, ticking every ``interval_s`` (a reading up to five ticks after
    the last still counts for energy and time throttled), or a CLI's one reading (0: the Sampler's 10 s)."""
    return Sampler(sources, max_gap_s=max(10.0, 5 * interval_s))


def read_directly(config: Config) -> Sampler:
    """A CLI's own reading of the GPUs ``config`` means, no daemon involved (kept for every ``--watch`` refresh)."""
    return sampler(build_sources(config))


def build_gpu_use(config: Config, uevents: UeventFeed | None = None,
                  on_cards_changed: Callable[[], None] | None = None) -> GpuUseWatch | None:
    """The process monitor and the reset watch ``[processes]``/``[resets]`` ask for; ``uevents`` stands in
    for the kernel's uevent socket (the simulator's); ``on_cards_changed`` hears a DRM card come or go."""
    if not (config.processes.enabled or config.resets.enabled):
        return None
    sysfs = Sysfs(config.sysfs_root)
    monitor = None
    if config.processes.enabled:
        monitor = ProcessMonitor(Procfs(config.proc_root), sysfs, config.processes.scan_all_every_s)
    resets, close = None, None
    if config.resets.enabled:
        if uevents is None and config.resets.uevents:
            sock = open_uevents()
            if sock is not None:
                uevents, close = sock.drain, sock.close
        dumps = DevCoredumps(sysfs, config.reset_dump_dir, config.resets.dumps_kept, config.resets.dump_max_bytes,
                             config.resets.dismiss_dumps)
        resets = ResetWatch(dumps, uevents, config.resets.answer_ticks, on_cards_changed)
    return GpuUseWatch(monitor, resets, close)
