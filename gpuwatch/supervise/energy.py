"""Energy of one supervised trainer's runs (pure): joules its GPUs used and training steps per kilojoule.

A run is one life of the training command (from its spawn, ``Trainer.started_unix``). Its energy is
the growth of the per-GPU energy counters (gpus/accounting.py) of the GPUs the trainer runs on (its
``gpus``, all GPUs when that is empty, as for the thermal verdict) while the run is live, paused
time included: a paused run keeps its GPUs. Two trainers sharing a GPU each count all of it. A GPU
first seen after the run started counts from then on; one that goes away keeps what it used.
Steps per kilojoule divide the steps reported during the run by that energy.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from gpuwatch.model import Snapshot


@dataclass(frozen=True)
class RunEnergy:
    run: float | None = None  # the run counted (its start, Unix seconds); None: none yet
    gpus: tuple[tuple[str, float, float], ...] = ()  # (gpu, counter at first sight, counter last seen)
    total_j: float = 0.0  # every run of the trainer since the daemon started
    steps_at_start: int | None = None  # the first step count the run reported

    @property
    def used_j(self) -> float | None:
        """This run's joules; None while no GPU of it has an energy counter."""
        if not self.gpus:
            return None
        return sum(last - first for _, first, last in self.gpus)

    def steps_per_kj(self, steps_total: int | None) -> float | None:
        used = self.used_j
        if steps_total is None or self.steps_at_start is None or not used or steps_total < self.steps_at_start:
            return None  # a count below the run's first one is not this run's (never a negative rate)
        return (steps_total - self.steps_at_start) / (used / 1000.0)


def energies(snapshot: Snapshot, gpus: tuple[str, ...]) -> dict[str, float]:
    """The energy counters of the GPUs a trainer uses (all GPUs when ``gpus`` is empty)."""
    return {g.gpu_id: g.energy_joules for g in snapshot.gpus
            if (not gpus or g.gpu_id in gpus) and g.energy_joules is not None}


def update(prev: RunEnergy, run: float, counters: Mapping[str, float], steps_total: int | None) -> RunEnergy:
    """``prev`` after one more tick of run ``run`` (a new run starts from zero, the total carries on)."""
    if run != prev.run:
        prev = RunEnergy(run=run, total_j=prev.total_j)
    seen = {gpu: (first, last) for gpu, first, last in prev.gpus}
    for gpu, joules in counters.items():
        first, last = seen.get(gpu, (joules, joules))
        seen[gpu] = (first, max(last, joules))
    now = RunEnergy(run, tuple((gpu, first, last) for gpu, (first, last) in sorted(seen.items())), prev.total_j,
                    prev.steps_at_start if prev.steps_at_start is not None else steps_total)
    grown = (now.used_j or 0.0) - (prev.used_j or 0.0)
    return RunEnergy(now.run, now.gpus, prev.total_j + grown, now.steps_at_start)
