"""Turns the sources' readings into one frozen Snapshot per tick.

A GPU seen once is never silently dropped: when it disappears (reset, fell off the bus) it stays in
the snapshot with its identity and ``up=False`` so dashboards and alerts see it go. The counters kept
across ticks (energy, seconds throttled: gpus/accounting.py) are added to each reading here.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence

from gpuwatch.gpus import accounting
from gpuwatch.gpus.source import GpuSource
from gpuwatch.model import GpuReading, Snapshot, UnsupportedCard

log = logging.getLogger("gpuwatch.sampler")  # the name log lines had before the move to gpus/


class Sampler:
    def __init__(
        self,
        sources: Sequence[GpuSource],
        wall_clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        max_gap_s: float = 10.0,
    ) -> None:
        """``max_gap_s``: the longest interval between two readings of a GPU that still counts (energy,
        time throttled); a longer one (a stuck tick, a GPU that was gone) adds nothing."""
        self.sources = list(sources)
        self._wall = wall_clock
        self._mono = monotonic
        self.max_gap_s = max_gap_s
        self._known: dict[str, GpuReading] = {}
        self._accounts: dict[str, accounting.Account] = {}

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
        ended = self._mono()
        present = {r.gpu_id for r in readings}
        # On a box with both, amdgpu lists the NVIDIA DRM card as "another driver" that nvml does read.
        unsupported = [card for card in unsupported if card.gpu_id not in present]
        readings = [self._remember(r) for r in readings]
        readings += [last.gone("no longer present") for gpu_id, last in self._known.items() if gpu_id not in present]
        readings = [self._account(r, ended) for r in readings]
        readings.sort(key=lambda r: r.gpu_id)
        return Snapshot(
            taken_unix=self._wall(),
            taken_monotonic=ended,
            gpus=tuple(readings),
            unsupported=tuple(unsupported),
            sample_duration_s=ended - started,
        )

    def _account(self, reading: GpuReading, now: float) -> GpuReading:
        """A gone GPU's tick counts too (as no power: nothing to integrate across it) but shows no values."""
        account = accounting.step(self._accounts.get(reading.gpu_id), reading, now, self.max_gap_s)
        self._accounts[reading.gpu_id] = account
        return accounting.apply(account, reading) if reading.up else reading

    def _remember(self, reading: GpuReading) -> GpuReading:
        last = self._known.get(reading.gpu_id)
        if reading.up or last is None:
            self._known[reading.gpu_id] = reading
            return reading
        why = reading.errors[0].error if reading.errors else "device directory vanished"
        return last.gone(why, reading.unresponsive)  # the identity of its last good reading

