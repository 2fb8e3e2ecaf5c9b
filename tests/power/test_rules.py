"""The governor's rules around the law as tables: headroom over sensors and limit sets, whether the fan can
still help, a cap range with no room, and the throughput estimate."""

from __future__ import annotations

import pytest

from gpuwatch.config.cooling import ThermalConfig
from gpuwatch.config.file import parse_config
from gpuwatch.limits import ThermalsOn, headroom_c, thermals_on
from gpuwatch.model import FanMode, FanState, GpuReading, TempReading
from gpuwatch.power.rules import cap_range_problem, fan_can_rise, throughput_kept_ratio


def _gpu(edge: float | None, junction: float | None, mem: float | None = 70.0) -> GpuReading:
    temps = (TempReading("edge", edge, crit_c=100.0), TempReading("junction", junction, crit_c=110.0),
             TempReading("mem", mem, crit_c=105.0))
    return GpuReading(gpu_id="g", card="card0", backend="amdgpu", temps=temps)


@pytest.mark.parametrize(
    "gpu, thermals, expected",
    [
        (_gpu(70, 95), [ThermalConfig()], 5.0),  # junction: crit 110 - 10 = 100
        (_gpu(88, 95), [ThermalConfig()], 2.0),  # edge 90 binds first (the stuck-fan-at-20 % case)
        (_gpu(70, 95, 98), [ThermalConfig()], 2.0),  # mem: crit 105 - 5
        (_gpu(70, 95), [ThermalConfig(), ThermalConfig(junction_limit_c=97)], 2.0),  # a trainer's stricter limit
        (_gpu(70, 103), [ThermalConfig()], -3.0),  # over the limit: negative
        (_gpu(None, None, None), [ThermalConfig()], None),  # no temperature
        (_gpu(None, 90, None), [ThermalConfig()], 10.0),
    ],
)
def test_headroom(gpu: GpuReading, thermals: list[ThermalConfig], expected: float | None) -> None:
    assert headroom_c(gpu, thermals) == expected


@pytest.mark.parametrize(
    "fan, expected",
    [
        (None, False),  # NVIDIA, or fan.mode = "off": no fan gpuwatch can raise
        (FanState(gpu_id="g", backend="pwm1", mode=FanMode.CURVE, can_rise=True), True),
        (FanState(gpu_id="g", backend="pwm1", mode=FanMode.CURVE, can_rise=False), False),
    ],
)
def test_fan_can_rise(fan: FanState | None, expected: bool) -> None:
    assert fan_can_rise(fan) is expected


@pytest.mark.parametrize(
    "original, floor, cap_max, problem",
    [
        (150, 90, 180, None),
        (290, 261, 333, None),  # RDNA3 retail: 10 % of room, still governed
        (95, 95, 95, "no room below the cap"),  # laptop: min = max = default
        (120, 120, 340, "no room below the cap"),  # the user already capped 39 % of default
        (400, 240, 340, "above power1_cap_max"),
        (150, 90, 0, None),  # max 0: not reported
    ],
)
def test_cap_range_problem(original: float, floor: float, cap_max: float, problem: str | None) -> None:
    found = cap_range_problem(original, floor, cap_max)
    assert (found is None) if problem is None else (found is not None and problem in found)


@pytest.mark.parametrize(
    "cap, original, power, expected",
    [
        (150, 150, 150, 1.0),  # not capped
        (112.5, 150, 111, 0.9086),  # 75 % of the power, binding: ~91 % of the speed
        (90, 150, 89, 0.8434),  # the floor: 84 %
        (112.5, 150, 40, 1.0),  # capped but idle (eval): the cap costs nothing now
        (None, 150, 100, None),
    ],
)
def test_throughput_kept(cap: float | None, original: float, power: float, expected: float | None) -> None:
    kept = throughput_kept_ratio(cap, original, power, 150.0)
    assert kept == (None if expected is None else pytest.approx(expected, abs=1e-4))


def test_limit_sets_are_made_once_per_configuration_and_again_for_a_new_one() -> None:
    """The caps' and the clock's ``ThermalsOn``: each GPU's limit sets as ``thermals_on`` makes them, made once
    per Config (a reload's new one makes them again)."""
    slot = "0000:03:00.0"
    trainer = {"name": "t", "command": ["python3", "train.py"], "gpus": [slot], "edge_limit_c": 80}
    config = parse_config({"trainer": [trainer]})
    on = ThermalsOn()
    first = on(config, slot)
    assert first == thermals_on(config, slot) and [t.edge_limit_c for t in first] == [90, 80]
    assert on(config, slot) is first and on(config, "0000:04:00.0") == [config.thermal]
    reloaded = parse_config({"trainer": [trainer], "thermal": {"edge_limit_c": 50}})
    assert on(reloaded, slot) == thermals_on(reloaded, slot) and on(reloaded, slot)[0].edge_limit_c == 50
