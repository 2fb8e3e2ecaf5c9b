"""Turns the sources' readings into one frozen Snapshot per tick.

A GPU seen once is never silently dropped: when it disappears (reset, fell off the bus) it stays in
the snapshot with its identity and ``up=False`` so dashboards and alerts see it go.
"""

from __future__ import annotations

import logging
import time
from typing import Callable, Sequence

from gpuwatch.gpus.source import GpuSource
from gpuwatch.model import GpuReading, Snapshot, UnsupportedCard

log = logging.getLogger("gpuwatch.sampler")  # the name log lines had before the move to gpus/


class Sampler:
    def __init__(
        self,
        sources: Sequence[GpuSource],
        wall_clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.sources = list(sources)
        self._wall = wall_clock
        self._mono = monotonic
        self._known: dict[str, GpuReading] = {}

    def sample(self) -> Snapshot:
        started = self._mono()
        readings: list[GpuReading] = []
        unsupported: list[UnsupportedCard] = []
        for source in self.sources:
            try:
                got, skipped = source.read_all()
            except Exception as exc:  # a source's bug must not stop fans or supervision
                log.exception("backend %s failed", source.name)
                got = [r.gone(f"backend failed: {exc}") for r in self._known.values() if r.backend == source.name]
                skipped = []
            readings.extend(got)
            unsupported.extend(skipped)
        present = {r.gpu_id for r in readings}
        # On a box with both, amdgpu lists the NVIDIA DRM card as "another driver" that nvml does read.
        unsupported = [card for card in unsupported if card.gpu_id not in present]
        readings = [self._remember(r) for r in readings]
        readings += [last.gone("no longer present") for gpu_id, last in self._known.items() if gpu_id not in present]
        readings.sort(key=lambda r: r.gpu_id)
        ended = self._mono()
        return Snapshot(
            taken_unix=self._wall(),
            taken_monotonic=ended,
            gpus=tuple(readings),
            unsupported=tuple(unsupported),
            sample_duration_s=ended - started,
        )

    def _remember(self, reading: GpuReading) -> GpuReading:
        last = self._known.get(reading.gpu_id)
        if reading.up or last is None:
            self._known[reading.gpu_id] = reading
            return reading
        return last.gone("device directory vanished")

