"""Pure curve rules as tables: interpolation, floor, validation, hysteresis, spindown, slew, crit, failsafe."""

from __future__ import annotations

import pytest

from gpuwatch.config.cooling import DEFAULT_CURVE, FanConfig, validate_points
from gpuwatch.fan.curve import CurveState, apply_floor, curve_params, decide, interpolate


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
