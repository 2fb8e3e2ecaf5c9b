"""The thermal model's physics, as tables: where it settles, how fast, and that it is stable for any step."""

from __future__ import annotations

import pytest

from gpuwatch.sim.physics import (
    ThermalInputs,
    ThermalParams,
    ThermalState,
    equilibrium,
    idle_state,
    speed_ratio,
    step,
)

P = ThermalParams()


def run(
    params: ThermalParams, state: ThermalState, inputs: ThermalInputs, seconds: float, dt_s: float = 1.0
) -> ThermalState:
    for _ in range(int(seconds / dt_s)):
        state = step(params, state, inputs, dt_s)
    return state


@pytest.mark.parametrize(
    "duty, load, junction_range",
    [
        (0.33, 0.0, (40, 48)),  # idle on the firmware's 33 %
        (0.50, 0.0, (38, 46)),
        (0.85, 1.0, (78, 88)),  # where the default curve settles under full load
        (0.50, 1.0, (96, 104)),  # the floor alone is not enough at full load
        (0.30, 1.0, (110, 130)),  # fan stuck at 30 %: far above the 100 °C pause limit
        (1.00, 1.0, (74, 80)),
    ],
)
def test_equilibrium(duty: float, load: float, junction_range: tuple[float, float]) -> None:
    eq = equilibrium(P, ThermalInputs(duty, load))
    low, high = junction_range
    assert low <= eq.junction_c <= high
    assert eq.junction_c > eq.edge_c
    assert eq.power_w == pytest.approx(P.load_power_w if load else P.idle_power_w)


def test_junction_sits_above_edge_more_under_load() -> None:
    idle = equilibrium(P, ThermalInputs(0.5, 0.0))
    busy = equilibrium(P, ThermalInputs(0.5, 1.0))
    assert busy.junction_c - busy.edge_c > 10 > idle.junction_c - idle.edge_c


def test_converges_to_equilibrium_with_first_order_lag() -> None:
    inputs = ThermalInputs(0.6, 1.0)
    start = idle_state(P)
    target = equilibrium(P, inputs)
    after_10s = run(P, start, inputs, 10)
    after_60s = run(P, start, inputs, 60)
    after_30min = run(P, start, inputs, 1800)
    # Power and the fan follow within seconds; the heatsink takes about a minute per time constant.
    assert after_10s.power_w == pytest.approx(target.power_w, rel=1e-3)
    assert start.edge_c < after_10s.edge_c < after_60s.edge_c < target.edge_c
    assert after_60s.edge_c - start.edge_c < 0.8 * (target.edge_c - start.edge_c)
    assert after_30min.junction_c == pytest.approx(target.junction_c, abs=0.05)
    assert after_30min.fan_rpm == pytest.approx(0.6 * P.fan_max_rpm)


@pytest.mark.parametrize("dt_s", [0.05, 0.5, 5.0, 60.0])
def test_monotone_and_stable_for_any_step(dt_s: float) -> None:
    inputs = ThermalInputs(0.5, 1.0)
    state, target = idle_state(P), equilibrium(P, inputs)
    previous = state.edge_c
    for _ in range(int(3600 / dt_s)):
        state = step(P, state, inputs, dt_s)
        assert previous <= state.edge_c <= target.edge_c + 1e-9
        previous = state.edge_c
    assert state.edge_c == pytest.approx(target.edge_c, abs=0.1)


def test_more_fan_cools_and_reduced_cooling_heats() -> None:
    slow = equilibrium(P, ThermalInputs(0.4, 1.0)).junction_c
    fast = equilibrium(P, ThermalInputs(0.9, 1.0)).junction_c
    demo = equilibrium(ThermalParams(cooling_scale=0.4), ThermalInputs(1.0, 1.0)).junction_c
    assert fast < slow
    assert demo > 100  # the demo's hot case reaches the pause limit even at full fan


def test_fan_below_start_duty_stands_still_and_zero_dt_is_identity() -> None:
    state = run(P, idle_state(P), ThermalInputs(0.05, 0.0), 60)
    assert state.fan_rpm == pytest.approx(0.0, abs=1.0)
    assert step(P, state, ThermalInputs(1.0, 1.0), 0.0) == state


@pytest.mark.parametrize(
    "cap_w, power_w, speed",
    [
        (None, 150.0, 1.0),
        (200.0, 150.0, 1.0),  # above the demand: no effect
        (129.0, 129.0, 0.927),  # what holds 98 °C in the hot case (cooling x0.4): ~93 % of the speed
        (112.5, 112.5, 0.866),  # 75 % of the power keeps ~87 % of the speed
        (90.0, 90.0, 0.775),  # the governor's floor (60 %)
    ],
)
def test_a_power_cap_holds_the_power_and_costs_the_square_root_of_it(cap_w: float | None, power_w: float,
                                                                      speed: float) -> None:
    inputs = ThermalInputs(fan_duty_ratio=1.0, load_ratio=1.0, power_cap_w=cap_w)
    assert equilibrium(P, inputs).power_w == pytest.approx(power_w)
    assert speed_ratio(P, 1.0, cap_w) == pytest.approx(speed, abs=1e-3)


def test_the_cap_that_holds_the_hot_case_under_its_limit() -> None:
    """The issue's figures: the hot case holds 99 °C junction at ~87 % of its power, the stuck fan at ~75 %."""
    from dataclasses import replace

    hot = replace(P, cooling_scale=0.4)
    assert equilibrium(hot, ThermalInputs(1.0, 1.0)).junction_c > 105
    assert equilibrium(hot, ThermalInputs(1.0, 1.0, power_cap_w=0.87 * 150)).junction_c == pytest.approx(99, abs=1)
    assert equilibrium(P, ThermalInputs(0.3, 1.0, power_cap_w=0.75 * 150)).junction_c == pytest.approx(99, abs=1)
