"""gpuwatch/limits.py as tables: each sensor's limit under a [thermal], the over-limit rule, breaches, and
every limit in force as a tick publishes them (pure)."""

from __future__ import annotations

import pytest

from gpuwatch.config.cooling import ThermalConfig
from gpuwatch.limits import (
    LimitBreach,
    LimitsInForce,
    breaches,
    limits_by_sensor,
    limits_in_force,
    over_limit,
    sensor_limit_c,
)
from gpuwatch.model import GpuReading, PublishedState, SensorLimit, Snapshot, TempReading


def test_every_sensor_with_a_limit_in_snapshot_order() -> None:
    a = GpuReading("a", "card0", "amdgpu", temps=(TempReading("edge", 50.0),
                                                   TempReading("junction", 60.0, crit_c=110.0),
                                                   TempReading("mem", 55.0)))
    b = GpuReading("b", "card1", "amdgpu", temps=(TempReading("junction", None, crit_c=100.0),))
    gone = GpuReading("c", "card2", "amdgpu", up=False)
    thermal = ThermalConfig(mem_limit_c=85.0)
    assert limits_in_force(Snapshot(0.0, 0.0, (a, b, gone)), thermal) == (
        SensorLimit("a", "edge", 90.0), SensorLimit("a", "junction", 100.0), SensorLimit("a", "mem", 85.0),
        SensorLimit("b", "junction", 90.0),
    )
    # mem without a configured limit and without crit has none: left out, not 0.
    assert limits_in_force(Snapshot(0.0, 0.0, (a,)), ThermalConfig()) == (
        SensorLimit("a", "edge", 90.0), SensorLimit("a", "junction", 100.0))


# (label, temp_c, crit_c, [thermal] settings) -> the limit in force, derived by hand from docs/robustness.md's
# rule: a configured limit wins, else crit minus the sensor's margin; edge has only its configured limit.
LIMITS = [
    ("edge", None, {}, 90.0),  # edge_limit_c's default
    ("edge", 100.0, {"edge_limit_c": 80.0}, 80.0),  # edge never derives from crit
    ("junction", 110.0, {}, 100.0),  # crit 110 - junction_crit_margin_c 10
    ("junction", 110.0, {"junction_crit_margin_c": 4.0}, 106.0),
    ("junction", 110.0, {"junction_limit_c": 95.0}, 95.0),  # configured wins over crit
    ("junction", None, {"junction_limit_c": 95.0}, 95.0),
    ("junction", None, {}, None),  # neither: no limit
    ("mem", 105.0, {}, 100.0),  # crit 105 - mem_crit_margin_c 5
    ("mem", 105.0, {"mem_crit_margin_c": 8.0}, 97.0),
    ("mem", 105.0, {"mem_limit_c": 85.0}, 85.0),
    ("mem", None, {"mem_limit_c": 85.0}, 85.0),
    ("mem", None, {}, None),
    ("vddgfx", 110.0, {"junction_limit_c": 95.0}, None),  # not a thermal sensor with a limit
]


@pytest.mark.parametrize("label, crit_c, settings, limit_c", LIMITS)
def test_sensor_limit(label: str, crit_c: float | None, settings: dict[str, float], limit_c: float | None) -> None:
    assert sensor_limit_c(TempReading(label, 50.0, crit_c=crit_c), ThermalConfig(**settings)) == limit_c


@pytest.mark.parametrize("temp_c, limit_c, margin_c, over", [
    (99.9, 100.0, 0.0, False),
    (100.0, 100.0, 0.0, True),  # at the limit is over it
    (100.1, 100.0, 0.0, True),
    (96.9, 100.0, 3.0, False),  # the margin lowers the line (hysteresis: "still hot")
    (97.0, 100.0, 3.0, True),
    (None, 100.0, 0.0, None),  # unknown, not "fine"
    (50.0, None, 0.0, None),
])
def test_over_limit(temp_c: float | None, limit_c: float | None, margin_c: float, over: bool | None) -> None:
    assert over_limit(temp_c, limit_c, margin_c) is over


def test_over_limit_without_a_margin_is_at_the_limit() -> None:
    assert over_limit(100.0, 100.0) is True and over_limit(99.5, 100.0) is False


def test_breaches_name_each_sensor_at_or_over_its_limit() -> None:
    gpu = GpuReading("0000:03:00.0", "card0", "amdgpu", temps=(
        TempReading("edge", 91.0),  # over the default 90
        TempReading("junction", 99.0, crit_c=110.0),  # under 100
        TempReading("mem", 100.0, crit_c=105.0),  # at 100
        TempReading("junction", None, crit_c=110.0),  # unreadable: not a breach
        TempReading("mem", 99.0),  # no limit at all
    ))
    thermal = ThermalConfig()
    assert breaches(gpu, thermal) == [LimitBreach("0000:03:00.0", "edge", 91.0, 90.0),
                                      LimitBreach("0000:03:00.0", "mem", 100.0, 100.0)]
    assert breaches(gpu, thermal, margin_c=1.0) == [
        LimitBreach("0000:03:00.0", "edge", 91.0, 90.0), LimitBreach("0000:03:00.0", "junction", 99.0, 100.0),
        LimitBreach("0000:03:00.0", "mem", 100.0, 100.0)]
    assert breaches(GpuReading("x", "card1", "amdgpu"), thermal) == []


@pytest.mark.parametrize("limits", [
    (),
    (SensorLimit("a", "edge", 90.0), SensorLimit("a", "junction", 100.0), SensorLimit("b", "edge", 85.0)),
    (SensorLimit("a", "edge", 90.0), SensorLimit("a", "edge", 80.0)),  # the first wins, as limit_c's scan
])
def test_the_limits_by_sensor_answer_as_limit_c(limits: tuple[SensorLimit, ...]) -> None:
    state = PublishedState(snapshot=Snapshot(taken_unix=0.0, taken_monotonic=0.0, gpus=()), limits_c=limits)
    table = limits_by_sensor(limits)
    for gpu in ("a", "b", "c"):
        for sensor in ("edge", "junction", "mem"):
            assert table.get((gpu, sensor)) == state.limit_c(gpu, sensor)


def test_the_limits_in_force_kept_while_their_sources_are_the_same() -> None:
    """LimitsInForce: limits_in_force's answer every time, the same tuple while [thermal] is the same object and
    every sensor's GPU, label and crit are equal; a crit of 0 told from -0 (a margin of 0 prints its sign)."""

    def snapshot(*crits: float | None, label: str = "junction") -> Snapshot:
        return Snapshot(0.0, 0.0, tuple(GpuReading(f"g{i}", f"card{i}", "amdgpu", temps=(
            TempReading("edge", 50.0, crit_c=crit), TempReading(label, 60.0, crit_c=crit)))
            for i, crit in enumerate(crits)))

    thermal, zero_margin = ThermalConfig(), ThermalConfig(junction_crit_margin_c=0.0, mem_crit_margin_c=0.0)
    limits = LimitsInForce()
    first = limits(snapshot(110.0, 105.0), thermal)
    assert first == limits_in_force(snapshot(110.0, 105.0), thermal)
    assert limits(snapshot(110.0, 105.0), thermal) is first
    steps = [(snapshot(110.0, 100.0), thermal), (snapshot(110.0, 100.0), ThermalConfig()),  # a reload: a new object
             (snapshot(110.0, None), thermal), (snapshot(110.0, 100.0, label="mem"), thermal),
             (snapshot(110.0), thermal), (snapshot(0.0), zero_margin), (snapshot(-0.0), zero_margin),
             (snapshot(-0.0), zero_margin), (snapshot(None), zero_margin)]
    for taken, settings in steps:
        got, want = limits(taken, settings), limits_in_force(taken, settings)
        assert got == want and [repr(limit.limit_c) for limit in got] == [repr(limit.limit_c) for limit in want]
