"""The fan controller's pure rules as tables: sensor choice, stall, and the mode and message of a tick."""

from __future__ import annotations

import pytest

from gpuwatch.config.cooling import FanConfig
from gpuwatch.fan.curve import CurveState, Decision, curve_params, top_percent
from gpuwatch.fan.rules import Stall, Verdict, can_rise, driven_verdict, idle_verdict, pick_sensor, stall
from gpuwatch.model import FanMode, GpuReading, TempReading


def _gpu(*labels: str) -> GpuReading:
    return GpuReading(gpu_id="g", card="card0", backend="amdgpu",
                      temps=tuple(TempReading(label, 50.0) for label in labels))


@pytest.mark.parametrize(
    "labels, wanted, expected",
    [
        (("edge", "junction", "mem"), "auto", "junction"),
        (("edge",), "auto", "edge"),  # Polaris, SI/CIK, APUs
        (("mem",), "auto", None),
        ((), "auto", None),
        (("edge", "junction"), "edge", "edge"),
        (("edge",), "mem", "mem"),  # pinned: a missing pinned sensor means failsafe later, not a switch
    ],
)
def test_pick_sensor(labels: tuple[str, ...], wanted: str, expected: str | None) -> None:
    assert pick_sensor(_gpu(*labels), wanted) == expected


# (ticks before, rpm, applied_pwm, written) -> Stall, with stall_after_ticks = 3
@pytest.mark.parametrize(
    "ticks, rpm, pwm, written, expected",
    [
        (0, 0, 128, True, Stall(1, False, False)),
        (2, 0, 128, True, Stall(3, True, True)),  # the episode starts: counted once
        (3, 0, 128, True, Stall(4, True, False)),  # still stalled, not counted again
        (3, 900, 128, True, Stall(0, False, False)),  # turning again
        (2, 0, 0, True, Stall(0, False, False)),  # commanded 0: not a stall
        (2, 0, None, True, Stall(0, False, False)),
        (2, None, 128, True, Stall(0, False, False)),  # no tach
        (2, 0, 128, False, Stall(0, False, False)),  # dry-run: nothing written
    ],
)
def test_stall_rule(ticks: int, rpm: int | None, pwm: int | None, written: bool, expected: Stall) -> None:
    assert stall(ticks, rpm, pwm, after_ticks=3, written=written) == expected


@pytest.mark.parametrize(
    "up, suspended, expected",
    [
        (False, False, Verdict(FanMode.FAILSAFE, "GPU not present", "GPU not present")),
        (False, True, Verdict(FanMode.FAILSAFE, "GPU not present", "GPU not present")),
        (True, True, Verdict(FanMode.CURVE, "GPU runtime-suspended: fan left as is")),
        (True, False, None),
    ],
)
def test_idle_verdict(up: bool, suspended: bool, expected: Verdict | None) -> None:
    assert idle_verdict(up, suspended) == expected


def _decision(percent: float = 60.0, failsafe_reason: str | None = None, crit: bool = False) -> Decision:
    return Decision(percent=percent, state=CurveState(), target_percent=percent, failsafe_reason=failsafe_reason,
                    crit=crit)


@pytest.mark.parametrize(
    "base, decision, sensor, verified, stalled, expected",
    [
        (FanMode.CURVE, _decision(), "junction", True, False, Verdict(FanMode.CURVE)),
        (FanMode.DRY_RUN, _decision(), "junction", True, False, Verdict(FanMode.DRY_RUN)),
        (FanMode.CURVE, _decision(100, "no temperature for 3 tick(s)"), "junction", True, False,
         Verdict(FanMode.FAILSAFE, "failsafe: no temperature for 3 tick(s) on junction",
                 "no temperature for 3 tick(s)")),
        (FanMode.CURVE, _decision(100, "no temperature for 3 tick(s)"), None, True, False,
         Verdict(FanMode.FAILSAFE, "failsafe: no temperature for 3 tick(s) on no sensor",
                 "no temperature for 3 tick(s)")),
        (FanMode.CURVE, _decision(100, crit=True), "junction", True, False,
         Verdict(FanMode.CURVE, "junction at or above crit 110 °C: 100 %")),
        (FanMode.CURVE, _decision(), "junction", False, False,
         Verdict(FanMode.CURVE, "fan readback differs from the written value")),
        (FanMode.CURVE, _decision(62.4, crit=False), "junction", False, True,
         Verdict(FanMode.CURVE, "fan stalled: 0 RPM while commanded 62 %")),  # a stall says so last
        (FanMode.CURVE, _decision(100, "frozen"), "edge", True, True,
         Verdict(FanMode.FAILSAFE, "fan stalled: 0 RPM while commanded 100 %", "frozen")),
    ],
)
def test_driven_verdict(base: FanMode, decision: Decision, sensor: str | None, verified: bool, stalled: bool,
                        expected: Verdict) -> None:
    assert driven_verdict(base, decision, sensor, 110.0, verified, stalled) == expected


@pytest.mark.parametrize(
    "mode, percent, stalled, expected",
    [
        (FanMode.CURVE, 85.0, False, True),
        (FanMode.CURVE, 100.0, False, False),  # at the curve's top (a stuck fan on a hot card is commanded here too)
        (FanMode.CURVE, 85.0, True, False),  # stalled: more duty gives no air
        (FanMode.FAILSAFE, 100.0, False, False),
        (FanMode.MONITOR_ONLY, None, False, False),  # gpuwatch does not drive it
        (FanMode.DRY_RUN, 60.0, False, False),
        (FanMode.CURVE, None, False, False),  # suspended: nothing commanded
    ],
)
def test_can_rise(mode: FanMode, percent: float | None, stalled: bool, expected: bool) -> None:
    assert can_rise(mode, percent, 100.0, stalled) is expected


@pytest.mark.parametrize(
    "curve, floor, top",
    [([[64, 50], [95, 100]], 50, 100), ([[40, 30], [80, 70]], 50, 70), ([[40, 30], [80, 40]], 50, 50)],
)
def test_top_of_the_curve(curve: list[list[float]], floor: float, top: float) -> None:
    assert top_percent(curve_params(FanConfig(curve=curve, floor_percent=floor))) == top
