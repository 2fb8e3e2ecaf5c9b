"""Energy and time-throttled counters across ticks (pure): tables of readings in, counters out."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpuwatch.gpus import accounting
from gpuwatch.gpus.accounting import ACCUMULATOR_WRAP_J, Account, step
from gpuwatch.gpus.sampler import Sampler
from gpuwatch.model import GpuReading, UnsupportedCard

GPU = "0000:03:00.0"


def reading(power_w: float | None = None, counter_j: float | None = None, reasons: tuple[str, ...] | None = None,
            up: bool = True) -> GpuReading:
    return GpuReading(GPU, "card0", "amdgpu", up=up, power_w=power_w, energy_accumulator_j=counter_j,
                      throttle_reasons=reasons)


def run(samples: list[tuple[float, GpuReading]], max_gap_s: float = 10.0) -> list[Account]:
    accounts: list[Account] = []
    for now, sample in samples:
        accounts.append(step(accounts[-1] if accounts else None, sample, now, max_gap_s))
    return accounts


def test_integrated_power_is_the_trapezoid_between_ticks() -> None:
    got = run([(0.0, reading(100)), (1.0, reading(200)), (3.0, reading(200))])
    assert [a.joules for a in got] == [0.0, 150.0, 550.0]
    assert {a.source for a in got} == {"integrated"}


@pytest.mark.parametrize(("case", "samples", "joules"), [
    ("a gap longer than max_gap_s adds nothing", [(0.0, reading(100)), (30.0, reading(100)), (31.0, reading(100))],
     100.0),
    ("a suspended tick (no power) adds nothing either side", [(0, reading(50)), (1, reading()), (2, reading(50)),
                                                              (3, reading(50))], 50.0),
    ("clock going backwards adds nothing", [(5.0, reading(100)), (4.0, reading(100))], 0.0),
])
def test_intervals_that_do_not_count(case: str, samples: list[tuple[float, GpuReading]], joules: float) -> None:
    assert run(samples)[-1].joules == joules, case


def test_no_power_ever_means_no_energy_counter() -> None:
    got = run([(0, reading()), (1, reading())])
    assert got[-1].source is None
    assert accounting.apply(got[-1], reading()).energy_joules is None


def test_the_accumulator_is_trusted_after_three_agreeing_intervals() -> None:
    # 200 W and a counter that grows 200 J per second: integrated until trusted, then the counter.
    samples = [(float(t), reading(200, 1000 + 201.0 * t)) for t in range(6)]
    got = run(samples)
    assert [a.source for a in got] == ["integrated"] * 3 + ["accumulator"] * 3
    assert got[-1].joules == pytest.approx(200 * 2 + 201 * 3)


def test_a_32_bit_accumulator_wraps_and_a_disagreeing_interval_falls_back_to_power() -> None:
    start = ACCUMULATOR_WRAP_J - 300.0
    samples = [(float(t), reading(200, (start + 200 * t) % ACCUMULATOR_WRAP_J)) for t in range(6)]
    samples.append((6.0, reading(200, 5.0)))  # a firmware reset: way off the power reading
    got = run(samples)
    assert got[5].source == "accumulator" and got[5].joules == pytest.approx(1000.0)
    assert got[6].joules == pytest.approx(1200.0) and got[6].source == "accumulator"


@pytest.mark.parametrize(("case", "counters"), [
    ("stuck at a value (RDNA3 reads 0, decoded as absent)", [500.0] * 6),
    ("wildly off the power reading", [0.0, 5000.0, 10000.0, 15000.0, 20000.0, 25000.0]),
])
def test_an_accumulator_that_does_not_agree_is_never_trusted(case: str, counters: list[float]) -> None:
    got = run([(float(t), reading(100, c)) for t, c in enumerate(counters)])
    assert got[-1].source == "integrated" and got[-1].joules == 500.0, case


def test_time_throttled_per_reason() -> None:
    got = run([(0, reading(100, reasons=())), (1, reading(100, reasons=("power",))),
               (3, reading(100, reasons=("power", "thermal"))), (4, reading(100, reasons=None)),
               (5, reading(100, reasons=()))])
    assert dict(got[-1].throttled_s) == {"power": 3.0, "current": 0.0, "thermal": 2.0, "other": 0.0}


def test_unknown_throttle_status_has_no_counters() -> None:
    assert run([(0, reading(100)), (1, reading(100))])[-1].throttled_s == ()


class Source:
    name = "amdgpu"

    def __init__(self) -> None:
        self.power: list[float | None] = [100.0, 100.0, None, 100.0]

    def read_all(self) -> tuple[list[GpuReading], list[UnsupportedCard]]:
        power = self.power.pop(0)
        return [reading(power, up=power is not None)] if power is not None else [], []


def test_the_sampler_keeps_counting_across_a_gpu_that_went_away() -> None:
    clock = iter(float(t) for t in range(20))
    sampler = Sampler([Source()], monotonic=lambda: next(clock))  # type: ignore[list-item]
    got = [sampler.sample().gpu(GPU) for _ in range(4)]
    assert [g.energy_joules if g else None for g in got] == [0.0, 200.0, None, 200.0]
    assert got[2] is not None and not got[2].up
    assert got[3] is not None and got[3].energy_source == "integrated"


def test_apply_is_replace_with_the_counters() -> None:
    """``apply`` (``model.replaced``, not replace's ``__init__`` over 65 fields) gives what replace gave."""
    reading = GpuReading("0000:03:00.0", "card0", "amdgpu", power_w=100.0, throttle_reasons=("thermal",))
    account = step(step(None, reading, 0.0, 10.0), reading, 1.0, 10.0)
    applied = accounting.apply(account, reading)
    assert applied == replace(reading, energy_joules=100.0, energy_source="integrated",
                              throttled_s=account.throttled_s)
    assert applied.throttled_s == (("power", 0.0), ("current", 0.0), ("thermal", 1.0), ("other", 0.0))
    assert type(applied) is GpuReading and reading.energy_joules is None  # the reading itself unchanged
    unsourced = accounting.apply(step(None, GpuReading("g", "card1", "amdgpu"), 0.0, 10.0), reading)
    assert (unsourced.energy_joules, unsourced.energy_source) == (None, None)
