"""Between sampling and the consumers: who uses which GPU, and which GPU was reset, from the same tick.

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

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Protocol, TypeVar

from gpuwatch.model import GpuProcess, GpuResetState, Snapshot
from gpuwatch.procs.monitor import ProcessMonitor
from gpuwatch.resets.recovery import ResetEvent
from gpuwatch.resets.watch import ResetWatch

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
        return replace(snapshot, processes=processes, processes_unreadable=unreadable, resets=states)

    def close(self) -> None:
        if self._close is not None:
            self._close()
