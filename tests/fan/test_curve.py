"""Pure curve rules as tables: interpolation, floor, validation, hysteresis, spindown, slew, crit, failsafe."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpuwatch.config.cooling import DEFAULT_CURVE, FanConfig, validate_points
from gpuwatch.fan.curve import (
    CurveParams,
    CurveState,
    Decision,
    apply_floor,
    curve_params,
    decide,
    failsafe,
    interpolate,
    top_percent,
)


@pytest.mark.parametrize(
    "temp_c, percent",
    [(20, 50), (64, 50), (64.5, 55), (65, 60), (70, 65), (75, 70), (80, 77.5), (85, 85), (90, 92.5), (95, 100),
     (120, 100)],
)
def test_default_curve_is_the_seeds_curve(temp_c: float, percent: float) -> None:
    assert interpolate(DEFAULT_CURVE, temp_c) == pytest.approx(percent)


@pytest.mark.parametrize(
    "percent, floor, minimum, expected",
    [(10, 50, 0, 50), (70, 50, 0, 70), (10, 0, 35, 35), (40, 50, 35, 50), (120, 50, 0, 100), (0, 0, 0, 0)],
)
def test_floor_is_applied_last(percent: float, floor: float, minimum: float, expected: float) -> None:
    assert apply_floor(percent, floor, minimum) == expected


@pytest.mark.parametrize(
    "points, problem",
    [
        ([], "at least one point"),
        ([[50, 60], [50, 70]], "must be above the previous"),
        ([[50, 60], [40, 70]], "must be above the previous"),
        ([[50, 70], [60, 60]], "must not be below"),
        ([[50, 101]], "within 0..100"),
        ([[50, -1]], "within 0..100"),
        ([[50]], "must be [temp_c, speed_percent]"),
    ],
)
def test_validation_names_the_rule(points: list[list[float]], problem: str) -> None:
    assert any(problem in p for p in validate_points(points))


def test_valid_curve_has_no_problems() -> None:
    assert validate_points([list(p) for p in DEFAULT_CURVE]) == []


# Built from FanConfig like the controller's, so production's other defaults apply (frozen_after_ticks=300).
P = curve_params(FanConfig(dead_band_c=4.0, spindown_delay_s=10.0, failsafe_after_ticks=3))

# (now, temp_c, expected applied %) run through decide() in order with the state carried along.
HYSTERESIS = [
    (0, 50, 50),    # start: floor
    (1, 70, 65),    # raise at once
    (2, 80, 77.5),  # raise at once
    (3, 78, 77.5),  # within dead band (80-4=76): hold
    (4, 77, 77.5),
    (5, 76, 77.5),  # a dead band below: the spindown clock starts at 5
    (10, 75, 77.5),  # still held: 5 s < 10 s
    (15, 75, 70),   # 10 s below the band: lower
    (16, 74.5, 70),  # dead band now measured from 75
    (17, 76, 71.5),  # a rise is applied at once, even a small one
    (18, 75, 71.5),  # no hunting: falling back 1 °C does nothing
    (19, 76, 71.5),
]


def test_hysteresis_table() -> None:
    state = CurveState()
    for now, temp_c, expected in HYSTERESIS:
        d = decide(P, state, temp_c, crit_c=110, now=now)
        assert d.percent == pytest.approx(expected), (now, temp_c)
        state = d.state


def test_spindown_clock_restarts_when_temperature_rises_back_into_band() -> None:
    state = CurveState()
    for now, temp_c in ((0, 80), (1, 75), (8, 77), (9, 75), (15, 75)):
        state = decide(P, state, temp_c, 110, now).state
    assert state.applied_percent == pytest.approx(77.5)  # clock restarted at 9, only 6 s ago
    assert decide(P, state, 75, 110, 19).percent == pytest.approx(70)


def test_slew_limit_walks_down() -> None:
    params = curve_params(FanConfig(dead_band_c=2, spindown_delay_s=0, slew_down_percent_per_s=5))
    state = decide(params, CurveState(), 95, 110, 0).state
    seen = []
    for now in range(1, 11):
        d = decide(params, state, 50, 110, now)
        state = d.state
        seen.append(d.percent)
    assert seen == [95, 90, 85, 80, 75, 70, 65, 60, 55, 50]


@pytest.mark.parametrize("temp_c, crit_c, expected",
                         [(109.9, 110, 100), (110, 110, 100), (60, 60, 100), (60, None, 50)])
def test_crit_means_full_speed(temp_c: float, crit_c: float | None, expected: float) -> None:
    d = decide(curve_params(FanConfig()), CurveState(), temp_c, crit_c, 0)
    assert d.percent == expected
    assert d.crit == (crit_c is not None and temp_c >= crit_c)


def test_missing_temperature_goes_failsafe_after_n_ticks() -> None:
    state = decide(P, CurveState(), 50, 110, 0).state
    results = []
    for now in (1, 2, 3):
        d = decide(P, state, None, None, now)
        state = d.state
        results.append((d.percent, d.failsafe_reason is not None))
    assert results == [(50, False), (50, False), (100, True)]
    back = decide(P, state, 50, 110, 4)
    assert back.percent == 100 and back.failsafe_reason is None  # lowering waits for the spindown delay
    assert decide(P, back.state, 50, 110, 14).percent == 50


def test_missing_temperature_at_start_holds_full_speed() -> None:
    assert decide(P, CurveState(), None, None, 0).percent == 100


def test_frozen_temperature_goes_failsafe() -> None:
    params = curve_params(FanConfig(frozen_after_ticks=3))
    state = CurveState()
    reasons = []
    for now in range(5):
        d = decide(params, state, 70.0, 110, now)
        state = d.state
        reasons.append(d.failsafe_reason is not None)
    assert reasons == [False, False, False, True, True]
    thawed = decide(params, state, 70.5, 110, 6)
    assert thawed.failsafe_reason is None and thawed.percent == 100
    assert decide(params, thawed.state, 70.5, 110, 16).percent == pytest.approx(65.5)  # delay only, no dead band


def test_steady_sensor_with_live_telemetry_is_not_frozen() -> None:
    # An idle card can hold one whole-degree junction value for minutes while power moves.
    params = curve_params(FanConfig(frozen_after_ticks=3))
    state = CurveState()
    for now, power_w in enumerate([20.0, 21.0, 20.0, 22.0, 20.0, 21.0]):
        d = decide(params, state, 45.0, 110, now, telemetry=(44.0, 45.0, 50.0, power_w))
        state = d.state
        assert d.failsafe_reason is None
    for now in range(6, 10):
        d = decide(params, state, 45.0, 110, now, telemetry=(44.0, 45.0, 50.0, 21.0))
        state = d.state
    assert d.failsafe_reason is not None and d.percent == 100


# Every branch of decide() with its whole Decision, derived by hand from the rules (docs/fan-control.md):
# the applied speed, the curve's target, the failsafe reason, crit, and all the state the next tick reads.
# (given state, temp_c, crit_c, now) -> (percent, target, reason, crit, the state's changed fields)
RULES = curve_params(FanConfig(dead_band_c=4.0, spindown_delay_s=10.0, failsafe_after_ticks=3,
                               frozen_after_ticks=5))
SLEW = curve_params(FanConfig(dead_band_c=4.0, spindown_delay_s=0.0, slew_down_percent_per_s=5.0))
BRANCHES = [
    pytest.param(RULES, CurveState(), None, None, 1.0,
                 (100.0, 100.0, None, False, dict(applied_percent=100.0, bad_ticks=1, last_now=1.0)),
                 id="no-reading-before-any: full speed held"),
    pytest.param(RULES, CurveState(applied_percent=65.0, ref_temp_c=70.0, last_temp_c=70.0, last_now=0.0),
                 None, None, 1.0,
                 (65.0, 65.0, None, False, dict(bad_ticks=1, last_now=1.0)),
                 id="no-reading: what is applied is held, the last temperature kept"),
    pytest.param(RULES, CurveState(applied_percent=65.0, ref_temp_c=70.0, below_since=0.5, slewing=True,
                                   last_temp_c=70.0, bad_ticks=2),
                 None, None, 3.0,
                 (100.0, 100.0, "no temperature for 3 tick(s)", False,
                  dict(applied_percent=100.0, ref_temp_c=None, below_since=None, slewing=False, bad_ticks=3,
                       last_now=3.0)),
                 id="no-reading-for-n-ticks: failsafe"),
    pytest.param(RULES, CurveState(applied_percent=50.0, ref_temp_c=60.0, below_since=2.0, last_temp_c=60.0,
                                   same_ticks=4),
                 60.0, 110.0, 9.0,
                 (100.0, 100.0, "temperature frozen at 60 °C for 5 ticks", False,
                  dict(applied_percent=100.0, ref_temp_c=None, below_since=None, same_ticks=5, last_now=9.0)),
                 id="frozen: failsafe, no dead band after it"),
    pytest.param(RULES, CurveState(applied_percent=65.0, ref_temp_c=70.0, below_since=3.0, slewing=True,
                                   last_temp_c=70.0),
                 110.0, 110.0, 4.0,
                 (100.0, 100.0, None, True,
                  dict(applied_percent=100.0, ref_temp_c=110.0, below_since=None, slewing=False, last_temp_c=110.0,
                       last_now=4.0)),
                 id="crit: full speed, the dead band measured from the crit reading"),
    pytest.param(RULES, CurveState(applied_percent=50.0, ref_temp_c=50.0, below_since=2.0, last_temp_c=50.0),
                 70.0, 110.0, 5.0,
                 (65.0, 65.0, None, False,
                  dict(applied_percent=65.0, ref_temp_c=70.0, below_since=None, last_temp_c=70.0, last_now=5.0)),
                 id="rise: applied at once"),
    pytest.param(SLEW, CurveState(applied_percent=60.0, ref_temp_c=62.0, slewing=True, last_temp_c=62.0,
                                  last_now=4.0),
                 70.0, 110.0, 5.0,
                 (65.0, 65.0, None, False,
                  dict(applied_percent=65.0, ref_temp_c=70.0, slewing=False, last_temp_c=70.0, last_now=5.0)),
                 id="rise-while-slewing: applied at once, the slew over"),
    pytest.param(RULES, CurveState(applied_percent=100.0, ref_temp_c=95.0, below_since=3.0, slewing=True,
                                   last_temp_c=96.0),
                 120.0, 130.0, 6.0,
                 (100.0, 100.0, None, False,
                  dict(below_since=None, slewing=False, last_temp_c=120.0, last_now=6.0)),
                 id="same-speed: the dead band keeps its reference"),
    pytest.param(RULES, CurveState(applied_percent=77.5, ref_temp_c=80.0, below_since=5.0, last_temp_c=77.0),
                 78.0, 110.0, 7.0,
                 (77.5, 74.5, None, False, dict(below_since=None, last_temp_c=78.0, last_now=7.0)),
                 id="within-dead-band: held, the spindown clock stopped"),
    pytest.param(RULES, CurveState(applied_percent=77.5, ref_temp_c=80.0, last_temp_c=76.0),
                 75.0, 110.0, 20.0,
                 (77.5, 70.0, None, False, dict(below_since=20.0, last_temp_c=75.0, last_now=20.0)),
                 id="below-dead-band: the spindown clock starts"),
    pytest.param(RULES, CurveState(applied_percent=77.5, ref_temp_c=80.0, below_since=5.0, last_temp_c=76.0),
                 75.0, 110.0, 14.5,
                 (77.5, 70.0, None, False, dict(below_since=5.0, last_temp_c=75.0, last_now=14.5)),
                 id="spindown-running: held"),
    pytest.param(RULES, CurveState(applied_percent=77.5, ref_temp_c=80.0, below_since=5.0, last_temp_c=76.0),
                 75.0, 110.0, 15.0,
                 (70.0, 70.0, None, False,
                  dict(applied_percent=70.0, ref_temp_c=75.0, below_since=None, last_temp_c=75.0, last_now=15.0)),
                 id="spindown-done: lowered to the curve"),
    pytest.param(SLEW, CurveState(applied_percent=100.0, ref_temp_c=95.0, last_temp_c=95.0, last_now=10.0),
                 60.0, 110.0, 10.5,
                 (97.5, 50.0, None, False,
                  dict(applied_percent=97.5, ref_temp_c=60.0, slewing=True, last_temp_c=60.0, last_now=10.5)),
                 id="slew: 5 %/s for 0.5 s"),
    pytest.param(SLEW, CurveState(applied_percent=90.0, ref_temp_c=60.0, slewing=True, last_temp_c=60.0,
                                  last_now=12.0),
                 60.0, 110.0, 13.0,
                 (85.0, 50.0, None, False, dict(applied_percent=85.0, last_now=13.0, same_ticks=1)),
                 id="slewing: no dead band while walking down"),
    pytest.param(SLEW, CurveState(applied_percent=52.0, ref_temp_c=60.0, slewing=True, last_temp_c=60.0,
                                  last_now=12.0),
                 60.0, 110.0, 13.0,
                 (50.0, 50.0, None, False, dict(applied_percent=50.0, slewing=False, last_now=13.0, same_ticks=1)),
                 id="slew-arrives: the target, slewing over"),
]


@pytest.mark.parametrize("params, state, temp_c, crit_c, now, expected", BRANCHES)
def test_each_branch_returns_its_whole_decision(params: CurveParams, state: CurveState, temp_c: float | None,
                                                crit_c: float | None, now: float,
                                                expected: tuple[float, float, str | None, bool, dict[str, object]]
                                                ) -> None:
    percent, target, reason, crit, changed = expected
    assert decide(params, state, temp_c, crit_c, now) == Decision(
        percent=percent, target_percent=target, failsafe_reason=reason, crit=crit, state=replace(state, **changed))


def test_the_floor_holds_under_a_curve_that_starts_below_it() -> None:
    """floor_percent (50 % by default) is the lowest speed decide() commands, whatever the curve says:
    the default curve starts at 50 % itself, so only a curve below the floor shows the floor is applied."""
    params = curve_params(FanConfig(curve=[[40, 20], [80, 100]]))
    assert params.floor_percent == 50.0
    assert [decide(params, CurveState(), t, 110.0, 0.0).percent for t in (30, 40, 55, 60, 70)] == [
        50.0, 50.0, 50.0, 60.0, 80.0]


def test_the_firmware_minimum_is_applied_and_defaults_to_none() -> None:
    """A card whose firmware refuses speeds under 60 % gets 60 %; without a minimum a 0 % curve and floor
    give 0 % (a passively cooled rig may want the fan off)."""
    params = curve_params(FanConfig())
    assert decide(params, CurveState(), 50.0, 110.0, 0.0, minimum_percent=60.0).percent == 60.0
    silent = curve_params(FanConfig(curve=[[40, 0], [80, 100]], floor_percent=0))
    assert decide(silent, CurveState(), 30.0, 110.0, 0.0).percent == 0.0
    assert apply_floor(0.5, 0.0) == 0.5


def test_interpolation_starts_at_the_first_points_temperature() -> None:
    """Flat below the first point's temperature (not its speed): a curve whose first speed is above the
    temperature still interpolates between its points."""
    assert interpolate([(40.0, 80.0), (60.0, 100.0)], 50.0) == 90.0
    assert interpolate([(40.0, 80.0), (60.0, 100.0)], 40.0) == 80.0


def test_curve_params_carry_every_setting() -> None:
    fan = FanConfig(curve=[[40, 20], [80, 100]], floor_percent=30, dead_band_c=2.5, spindown_delay_s=7,
                    slew_down_percent_per_s=4, failsafe_after_ticks=6, frozen_after_ticks=9)
    assert curve_params(fan) == CurveParams(points=((40.0, 20.0), (80.0, 100.0)), floor_percent=30.0,
                                            dead_band_c=2.5, spindown_delay_s=7.0, slew_down_percent_per_s=4.0,
                                            failsafe_after_ticks=6, frozen_after_ticks=9)


@pytest.mark.parametrize("points, floor, top", [
    (DEFAULT_CURVE, 50.0, 100.0),  # the last point
    (((40.0, 20.0), (80.0, 80.0)), 50.0, 80.0),  # a curve that never reaches 100 %
    (((40.0, 20.0), (80.0, 40.0)), 50.0, 50.0),  # the floor above the whole curve
    (((40.0, 90.0), (80.0, 60.0)), 0.0, 90.0),  # the highest point, not the last
    (((40.0, 20.0),), 120.0, 100.0),  # never above 100 % (a hand-built params)
])
def test_top_percent_is_the_highest_speed_below_crit(points: tuple[tuple[float, float], ...], floor: float,
                                                     top: float) -> None:
    params = replace(curve_params(FanConfig()), points=tuple(points), floor_percent=floor)
    assert top_percent(params) == top


def test_failsafe_is_full_speed_at_once_with_its_reason() -> None:
    state = CurveState(applied_percent=65.0, ref_temp_c=70.0, below_since=3.0, slewing=True, last_now=1.0,
                       last_temp_c=70.0, bad_ticks=1, same_ticks=2)
    assert failsafe(state, "reads hang", 5.0) == Decision(
        percent=100.0, target_percent=100.0, failsafe_reason="reads hang",
        state=replace(state, applied_percent=100.0, ref_temp_c=None, below_since=None, slewing=False, last_now=5.0))
