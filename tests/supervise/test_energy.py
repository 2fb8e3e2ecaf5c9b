"""Energy per supervised run (pure): counters of the trainer's GPUs in, joules and steps per kJ out."""

from __future__ import annotations

import pytest

from gpuwatch.model import GpuReading, Snapshot
from gpuwatch.supervise.energy import RunEnergy, energies, update

A, B, C = "0000:03:00.0", "0000:0c:00.0", "0000:43:00.0"


def ticks(*rows: tuple[float, dict[str, float], int | None]) -> RunEnergy:
    energy = RunEnergy()
    for run, counters, steps in rows:
        energy = update(energy, run, counters, steps)
    return energy


def test_a_run_counts_from_its_start_over_its_gpus() -> None:
    energy = ticks((1.0, {A: 1000.0, B: 500.0}, None), (1.0, {A: 1600.0, B: 800.0}, 10),
                   (1.0, {A: 2000.0, B: 1000.0}, 110))
    assert energy.used_j == 1500.0 and energy.total_j == 1500.0
    assert energy.steps_per_kj(110) == pytest.approx(100 / 1.5)


def test_a_new_run_starts_from_zero_and_the_total_carries_on() -> None:
    energy = ticks((1.0, {A: 0.0}, 0), (1.0, {A: 900.0}, 90), (2.0, {A: 1000.0}, 0), (2.0, {A: 1300.0}, 30))
    assert energy.used_j == 300.0 and energy.total_j == 1200.0 and energy.run == 2.0
    assert energy.steps_per_kj(30) == pytest.approx(100.0)


def test_a_gpu_that_goes_away_keeps_what_it_used_and_a_late_one_counts_from_first_sight() -> None:
    energy = ticks((1.0, {A: 100.0}, None), (1.0, {A: 300.0, B: 50.0}, None), (1.0, {B: 150.0}, None))
    assert energy.used_j == 300.0 and energy.total_j == 300.0


def test_nothing_known_is_none_not_zero() -> None:
    assert RunEnergy().used_j is None and RunEnergy().steps_per_kj(5) is None
    energy = ticks((1.0, {}, 5))
    assert energy.used_j is None and energy.steps_per_kj(50) is None
    assert ticks((1.0, {A: 10.0}, None), (1.0, {A: 20.0}, None)).steps_per_kj(None) is None


def test_energies_of_the_trainers_gpus_only() -> None:
    snapshot = Snapshot(0.0, 0.0, (
        GpuReading(A, "card0", "amdgpu", energy_joules=10.0), GpuReading(B, "card1", "amdgpu", energy_joules=20.0),
        GpuReading(C, "card2", "amdgpu"),
    ))
    assert energies(snapshot, (A,)) == {A: 10.0}
    assert energies(snapshot, ()) == {A: 10.0, B: 20.0}
