"""Between sampling and the consumers: who uses which GPU, and which GPU was reset, from the same tick.

Order matters: this tick's reset events are found first, so the process monitor already treats a GPU
that just reset (or one that is gone) carefully -- no fdinfo reads of its clients, a D-state check of
every thread of its holders -- and the reset watch then sees those holders' states.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

from gpuwatch.model import GpuProcess, Snapshot
from gpuwatch.procs.monitor import ProcessMonitor
from gpuwatch.resets.watch import ResetWatch


class GpuUseWatch:
    def __init__(self, monitor: ProcessMonitor | None, resets: ResetWatch | None,
                 close: Callable[[], None] | None = None) -> None:
        self.monitor = monitor
        self.resets = resets
        self._close = close

    def observe(self, snapshot: Snapshot, trees: Mapping[str, Sequence[int]]) -> Snapshot:
        now, now_unix = snapshot.taken_monotonic, snapshot.taken_unix
        events = self.resets.detect(snapshot) if self.resets is not None else []
        careful = {event.gpu_id for event in events} | {gpu.gpu_id for gpu in snapshot.gpus if not gpu.up}
        if self.resets is not None:
            careful |= self.resets.recovering()
        processes: tuple[GpuProcess, ...] = ()
        unreadable = 0
        if self.monitor is not None:
            processes, unreadable = self.monitor.sample(trees, now, frozenset(careful), now_unix)
        resets = self.resets.update(snapshot, events, processes, now, now_unix) if self.resets is not None else ()
        return replace(snapshot, processes=processes, processes_unreadable=unreadable, resets=resets)

    def close(self) -> None:
        if self._close is not None:
            self._close()
