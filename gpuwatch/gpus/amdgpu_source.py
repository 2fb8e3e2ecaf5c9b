"""The amdgpu GPU source: every amdgpu card below one sysfs root, read once per tick (amdgpu.py parses).

Re-discovers every ``rediscover_s``, whenever a card vanishes (it may come back under a new cardN
or hwmonN) and at the next read after ``rediscover()`` (the kernel announced a DRM card node: the reset
watch hears its uevents). Each card is read on its own worker with a deadline (gpuwatch.deadline): a card whose
reads hang is reported ``unresponsive`` within ``deadline_s`` while the others are read as usual, and
at once on later ticks while its worker is still blocked; discovery is bounded the same way. A card
found at a new place is announced through ``bindings`` (gpus/binding.py) to every part that drives it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from functools import partial
from typing import TypeVar

from gpuwatch.config.base import DEFAULT_SYSFS_DEADLINE_S
from gpuwatch.deadline import Late, Workers
from gpuwatch.gpus.amdgpu import AmdCard, Remembered, discover, read_card
from gpuwatch.gpus.binding import Bindings
from gpuwatch.gpus.source import DiscoveryResult
from gpuwatch.gpus.telemetry import GpuMetricsReader
from gpuwatch.model import GpuReading, ReadError, SourceName, UnsupportedCard
from gpuwatch.sysfs import Sysfs

log = logging.getLogger("gpuwatch")
T = TypeVar("T")


class AmdgpuSource:
    """Reads every amdgpu card below one sysfs root (see the module's docstring)."""

    name: SourceName = "amdgpu"

    def __init__(self, sysfs: Sysfs, rediscover_s: float = 30.0, clock: Callable[[], float] | None = None,
                 deadline_s: float = DEFAULT_SYSFS_DEADLINE_S) -> None:
        self.sysfs = sysfs
        self.rediscover_s = rediscover_s
        self.deadline_s = deadline_s
        self._clock = clock or time.monotonic
        self._found: DiscoveryResult[AmdCard] | None = None
        self._found_at = 0.0
        self._stale = False  # rediscover() asked for a discovery at the next read
        self._static: dict[str, Remembered] = {}
        self._read: dict[str, AmdCard] = {}  # the cards of the last read_all, by gpu_id
        self._workers = Workers("gpuwatch-read")
        self._hung: set[str] = set()  # GPUs (and "discovery") reported unresponsive, until they answer
        self.bindings: Bindings[AmdCard] = Bindings()
        self.metrics = GpuMetricsReader()  # gpu_metrics, read inside read_card: on the card's worker too

    def rediscover(self) -> None:
        """Discover at the next read: a DRM card node came or went (a GPU back from a reset under another
        number is bound within a tick or two, not at the periodic rediscovery up to 30 s later)."""
        self._stale = True

    def discovered(self) -> DiscoveryResult[AmdCard]:
        now = self._clock()
        if self._found is None or self._stale or now - self._found_at >= self.rediscover_s:
            # Each worker lets its held descriptors go at its next read (a path may lead elsewhere now), so a
            # file read once per discovery (the fixed attributes) never takes a place (sysfs.py).
            self.sysfs.forget()
            found = self._bounded({"discovery": lambda: discover(self.sysfs)})["discovery"]
            if isinstance(found, Late):
                return self._found or DiscoveryResult(cards=())  # the last cards known; retried next tick
            self._found, self._found_at, self._stale = found, now, False
            self._static = {}
            self.bindings.update(found.cards)
        return self._found

    def read_all(self) -> tuple[list[GpuReading], list[UnsupportedCard]]:
        found = self.discovered()
        self._read = {card.gpu_id: card for card in found.cards}
        results = self._bounded({
            card.gpu_id: partial(read_card, self.sysfs, card, self._static.setdefault(card.gpu_id, {}), self.metrics)
            for card in found.cards})
        readings = [self._unresponsive(card, result) if isinstance(result, Late) else result
                    for card, result in zip(found.cards, results.values(), strict=True)]
        if any(not r.up and not r.unresponsive for r in readings):
            # A card fell off the bus or was reset: it may come back under a new cardN/hwmonN.
            self._found = None
        return readings, list(found.unsupported)

    def _bounded(self, calls: dict[str, Callable[[], T]]) -> dict[str, T | Late]:
        """The calls on their workers within the deadline; says once when one hangs and when it answers."""
        results = self._workers.run_all(calls, self.deadline_s)
        for key, result in results.items():
            if isinstance(result, Late) and key not in self._hung:
                self._hung.add(key)
                log.error("%s: sysfs reads did not return within %g s: unresponsive until they do (a driver "
                          "stuck on the GPU; see dmesg)", _subject(key), self.deadline_s)
            elif not isinstance(result, Late) and key in self._hung:
                self._hung.discard(key)
                log.warning("%s: sysfs reads answer again", _subject(key))
        return results

    @staticmethod
    def _unresponsive(card: AmdCard, late: Late) -> GpuReading:
        why = f"unresponsive: sysfs reads blocked for {late.running_s:.1f} s"
        return GpuReading(gpu_id=card.gpu_id, card=card.card, backend="amdgpu", device_id=card.device_id,
                          subsystem_id=card.subsystem_id, up=False, unresponsive=True,
                          errors=(ReadError("device", why),))

    def locate(self, gpu_id: str) -> AmdCard | None:
        """Where the card behind a reading of the last ``read_all`` lives (device and hwmon directories):
        the fan controller writes next to what was read. No I/O."""
        return self._read.get(gpu_id)


def _subject(key: str) -> str:
    return "GPU discovery" if key == "discovery" else f"GPU {key}"
