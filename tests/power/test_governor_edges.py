"""The governor's law one tick at a time, at the edges of each rule: every threshold at its boundary, the
stalled-loop clamp, the whole-watt write dead band, the jump to the integrator and its threshold, and
the whole Decision of the paths that end governing (docs/power.md).

A 150 W card (default = original = 150 W, floor 90 W), default [power] settings: kp = 5 % of 150 W =
7.5 W/°C, ki = 0.07 % of 150 W = 0.105 W/(°C s), the cap binds within 3 % of 150 W = 4.5 W, a write
needs 2 % = 3 W (4 % = 6 W against the previous write's direction), the output rises at most 0.7 %/s =
1.05 W/s. The filtered headroom is given equal to the reading, so the filter leaves it as it is and
e = headroom - 2 °C (hold_margin_c), ez = e less the 0.5 °C dead band.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpuwatch.config.cooling import PowerConfig
from gpuwatch.power.governor import (
    Decision,
    GovernorInputs,
    GovernorParams,
    GovernorState,
    decide,
    governor_params,
)

P = governor_params(PowerConfig())
KI = 0.105  # W/(°C s)
KP = 7.5  # W/°C


def governing(headroom_c: float, **fields: object) -> GovernorState:
    """Governing at a steady filtered headroom, last tick at t=100 s."""
    base = GovernorState(phase="governing", integral_w=120.0, output_w=120.0, headroom_filtered_c=headroom_c,
                         last_now=100.0)
    return replace(base, **fields)  # type: ignore[arg-type]


def tick(state: GovernorState, headroom_c: float | None, *, now: float = 101.0, cap_w: float = 120.0,
         power_w: float | None = None, original_w: float = 150.0, floor_w: float = 90.0,
         fan_can_rise: bool = False, params: GovernorParams = P) -> Decision:
    """One tick; the card draws all the cap allows unless ``power_w`` says otherwise."""
    return decide(params, state, GovernorInputs(
        now=now, headroom_c=headroom_c, fan_can_rise=fan_can_rise, power_w=cap_w if power_w is None else power_w,
        cap_w=cap_w, original_cap_w=original_w, default_cap_w=150.0, floor_cap_w=floor_w))


def test_params_carry_every_setting() -> None:
    power = PowerConfig(engage_margin_c=9, hold_margin_c=3, floor_percent=70, min_step_percent=3,
                        reverse_step_percent=5, raise_percent_per_s=1, release_after_s=200, idle_restore_after_s=500)
    assert governor_params(power) == GovernorParams(
        engage_margin_c=9.0, hold_margin_c=3.0, floor_ratio=0.7, min_step_ratio=0.03, reverse_step_ratio=0.05,
        raise_ratio_per_s=0.01, release_after_s=200.0, idle_restore_after_s=500.0)


# --- time: the first tick integrates nothing, a short tick its own length, a stalled loop at most 10 s ---

def test_the_first_tick_integrates_nothing() -> None:
    """Engaging on the very first tick (no previous tick, so no interval): the integrator starts bumpless
    at what the card draws + 4.5 W less the P term, and no time has passed to integrate."""
    d = tick(GovernorState(), 1.0, now=0.0, cap_w=150.0, power_w=100.0)  # e = -1, ez = -0.5
    assert d.state.output_w == 104.5 and d.state.integral_w == 104.5 + KP * 0.5


@pytest.mark.parametrize("gap_s, integrated_s", [
    (0.5, 0.5),  # a short tick integrates its own length
    (1.0, 1.0),
    (10.0, 10.0),
    (60.0, 10.0),  # a stalled loop (a minute between ticks) integrates as MAX_DT_S = 10 s, not as control
])
def test_the_integrator_integrates_the_time_between_ticks_up_to_10_s(gap_s: float, integrated_s: float) -> None:
    d = tick(governing(0.0), 0.0, now=100.0 + gap_s)  # too hot: e = -2, ez = -1.5, always integrates down
    assert d.state.integral_w == pytest.approx(120.0 - KI * 1.5 * integrated_s, rel=1e-12)


# --- the dead zone and the integrator's rules, at their edges ---

def test_noise_within_the_dead_band_moves_nothing() -> None:
    d = tick(governing(2.3), 2.3)  # e = 0.3: inside +/-0.5
    assert (d.state.integral_w, d.state.output_w, d.cap_w, d.write) == (120.0, 120.0, 120.0, False)


@pytest.mark.parametrize("headroom_c, room_since", [
    (2.5, None),  # e = 0.5: the dead band's edge, ez = 0: no room yet
    (2.8, 101.0),  # ez = 0.3: room, since now
])
def test_room_starts_counting_out_of_the_dead_band(headroom_c: float, room_since: float | None) -> None:
    d = tick(governing(headroom_c, room_since=50.0 if room_since is None else None), headroom_c)
    assert d.state.room_since == room_since


@pytest.mark.parametrize("headroom_c, power_w, rises_w", [
    (3.0, 120.0, KI * 0.5),  # ez = 0.5, binding, within the up band: integrates up
    (4.5, 120.0, KI * 2.0),  # e = 2.5 = UP_BAND_C exactly: still integrates up
    (4.5, 115.5, KI * 2.0),  # drawing cap - 4.5 W (3 % of the default): the cap binds, boundary included
    (3.0, 115.4, 0.0),  # drawing under cap - 4.5 W: the cap does not bind, nothing is learned
    (4.6, 120.0, 0.0),  # e = 2.6: over the up band, room not lasting yet: warm-up, not integrated
])
def test_upward_integration_only_near_the_set_point_while_the_cap_binds(headroom_c: float, power_w: float,
                                                                        rises_w: float) -> None:
    d = tick(governing(headroom_c), headroom_c, power_w=power_w)
    assert d.state.integral_w == pytest.approx(120.0 + rises_w, rel=1e-12)


@pytest.mark.parametrize("room_for_s, rises_w", [
    (300.0, KI * 2.0),  # room for release_after_s (boundary included): integrates up, at most the up band's rate
    (299.0, 0.0),
])
def test_room_that_lasted_integrates_up_at_the_up_bands_rate(room_for_s: float, rises_w: float) -> None:
    d = tick(governing(7.0, room_since=101.0 - room_for_s), 7.0)  # e = 5, ez = 4.5
    assert d.state.integral_w == pytest.approx(120.0 + rises_w, rel=1e-12)


@pytest.mark.parametrize("headroom_c, power_w, unbound_since", [
    (4.0, 120.0, None),  # binding with room: the cap is doing its job
    (1.0, 50.0, None),  # too hot, not binding: still the governor's business
    (2.0, 50.0, 101.0),  # e = 0 exactly, not binding: the job may have ended, counted from now
])
def test_the_unbound_clock(headroom_c: float, power_w: float, unbound_since: float | None) -> None:
    d = tick(governing(headroom_c, unbound_since=50.0 if unbound_since is None else None), headroom_c,
             power_w=power_w)
    assert d.state.unbound_since == unbound_since


@pytest.mark.parametrize("headroom_c", [2.0, 2.5, 9.0])  # e = 0, 0.5 (no ez), 7
def test_an_unbound_cap_keeps_its_output_unless_too_hot(headroom_c: float) -> None:
    d = tick(governing(headroom_c, integral_w=110.0, output_w=125.0), headroom_c, cap_w=125.0, power_w=40.0)
    assert (d.state.output_w, d.state.integral_w, d.cap_w, d.write) == (125.0, 110.0, 125.0, False)


# --- writes: whole watts, the write dead band, reversal and the jump to the integrator ---

@pytest.mark.parametrize("integral_w, cap_w, write", [
    (117.0, 117.0, True),  # a 3 W move (min_step, boundary included) is written
    (118.0, 120.0, False),  # a 2 W move is not: the cap in force stays
])
def test_the_whole_watt_write_dead_band(integral_w: float, cap_w: float, write: bool) -> None:
    d = tick(governing(2.0, integral_w=integral_w, last_direction=-1), 2.0)  # e = 0: u = I
    assert (d.cap_w, d.write) == (cap_w, write)


def test_a_move_to_the_same_cap_keeps_the_last_direction() -> None:
    state = governing(3.0, integral_w=150.0, output_w=150.0, last_direction=-1)
    d = tick(state, 3.0, cap_w=150.0)  # at the original already: no move
    assert (d.cap_w, d.write, d.state.last_direction) == (150.0, False, -1)


@pytest.mark.parametrize("integral_w, cap_w", [
    (120.0, 130.0),  # the integrator 2 W above the cap (after this tick's 1.575 W): no jump, the output's 130 W
    (121.0, 123.0),  # 3 W above: min_step exactly, jumps to round(I)
])
def test_a_reversal_jumps_to_the_integrator_only_a_min_step_away(integral_w: float, cap_w: float) -> None:
    """After a write down, the card has room (e = 2, ez = 1.5): the output rises 10.5 W in 10 s (a reversal
    of 10 W, over the 6 W needed). The integrator's estimate, round(I), is where it goes, if it is at least
    min_step (3 W) from the cap in force; otherwise the output's whole watts."""
    d = tick(governing(4.0, integral_w=integral_w, last_direction=-1), 4.0, now=110.0)
    assert (d.cap_w, d.write, d.state.last_direction) == (cap_w, True, 1)


def test_a_reversal_jumps_to_the_integrator_with_a_small_error_too() -> None:
    d = tick(governing(3.0, integral_w=140.0, last_direction=-1), 3.0, now=110.0)  # ez = 0.5
    assert (d.cap_w, d.write) == (141.0, True)  # round(140 + 0.525), not the output's 130 W


def test_no_jump_without_a_reversal_or_an_error_that_agrees() -> None:
    going_up = tick(governing(3.0, integral_w=140.0, output_w=135.0, last_direction=1), 3.0, cap_w=130.0)
    assert going_up.cap_w == 136.0  # the output's whole watts (135 + 1.05), not round(I) = 140
    within = tick(governing(2.0, integral_w=140.0, last_direction=-1), 2.0, now=110.0)  # ez = 0
    assert within.cap_w == 130.0  # the output's 120 + 10.5 W rounded to even, not round(I) = 140


def test_the_ends_are_written_exactly() -> None:
    """An original of 312.5 W goes back as 312.5 W; a floor in fractional watts is written as it is."""
    top = tick(governing(3.0, integral_w=312.5, output_w=312.5), 3.0, cap_w=312.0, original_w=312.5)
    assert (top.cap_w, top.write) == (312.5, True)
    bottom = tick(governing(-5.0, integral_w=90.7, output_w=90.7), -5.0, cap_w=95.0, floor_w=90.7)
    assert (bottom.cap_w, bottom.at_floor, bottom.pause_allowed) == (90.7, True, True)


# --- the paths that end or skip governing, as whole decisions ---

def test_engaging_without_a_power_reading_starts_at_the_original() -> None:
    d = decide(P, GovernorState(), GovernorInputs(now=0.0, headroom_c=1.0, fan_can_rise=False, power_w=None,
                                                  cap_w=150.0, original_cap_w=150.0, default_cap_w=150.0,
                                                  floor_cap_w=90.0))
    # Bumpless from the original (nothing else to start from): the integrator at 150 + 3.75 W, clamped to
    # the original, the output the P term (ez = -0.5) under it.
    assert (d.state.phase, d.state.integral_w, d.state.output_w, d.cap_w) == ("governing", 150.0, 146.25, 146.0)


@pytest.mark.parametrize("cap_w, at_floor", [(90.0, True), (91.0, False)])
def test_no_temperature_holds_the_cap_and_its_clock(cap_w: float, at_floor: bool) -> None:
    state = governing(1.0, room_since=10.0, release_since=20.0, unbound_since=30.0, last_direction=-1)
    assert tick(state, None, cap_w=cap_w) == Decision(replace(state, last_now=101.0), cap_w, False,
                                                      pause_allowed=True, at_floor=at_floor)


def test_release_after_release_after_s_at_the_original_with_room() -> None:
    """u at the original and e over the dead band since t=100 - 300 s + 1: released this tick (boundary
    included); one second earlier it governs on. The idle state keeps only the filter and the clock."""
    state = governing(5.0, integral_w=150.0, output_w=150.0, release_since=-199.0, last_direction=1)
    assert tick(state, 5.0, cap_w=150.0) == Decision(
        GovernorState(headroom_filtered_c=5.0, last_now=101.0), 150.0, False, pause_allowed=True, at_floor=False)
    assert tick(replace(state, release_since=-198.0), 5.0, cap_w=150.0).state.phase == "governing"


@pytest.mark.parametrize("headroom_c, release_since", [(2.5, None), (2.6, 101.0)])
def test_release_counts_only_over_the_dead_band(headroom_c: float, release_since: float | None) -> None:
    state = governing(headroom_c, integral_w=150.0, output_w=150.0)
    assert tick(state, headroom_c, cap_w=150.0).state.release_since == release_since


def test_giving_back_writes_the_original_and_is_never_at_the_floor() -> None:
    state = governing(15.0, unbound_since=-499.0)  # unbound for idle_restore_after_s (600 s)
    assert tick(state, 15.0, cap_w=90.0, power_w=20.0) == Decision(
        GovernorState(headroom_filtered_c=15.0, last_now=101.0), 150.0, True, pause_allowed=True, at_floor=False)
