"""The clock rung's law, table-tested (pure: ``now`` passed in): when it engages, steps, holds and gives back; where
its steps start (the clock the card runs at), how far they go (how far over and how fast rising), when the pause
may come before the floor."""

from __future__ import annotations

import pytest

from gpuwatch.clock.law import (
    DWELL_DOWN_S,
    DWELL_UP_S,
    LOOKAHEAD_S,
    ClockInputs,
    ClockLawState,
    ClockParams,
    ceilings,
    decide,
)

PARAMS = ClockParams(hold_margin_c=2.0, floor_ratio=0.6, idle_restore_after_s=600.0)
LADDER = (1500.0, 2000.0, 2400.0, 2500.0)  # floor ... the card's maximum
FINE = ceilings(2500.0, 500.0, 0.6, None)  # an overdrive table's: every 25 MHz from 1500 to 2500


def inputs(now: float, headroom_c: float | None, exhausted: bool = True) -> ClockInputs:
    return ClockInputs(now=now, headroom_c=headroom_c, cap_exhausted=exhausted, ceilings_mhz=LADDER)


def fine(now: float, headroom_c: float, running_mhz: float | None = None, exhausted: bool = True) -> ClockInputs:
    return ClockInputs(now=now, headroom_c=headroom_c, cap_exhausted=exhausted, ceilings_mhz=FINE,
                       running_mhz=running_mhz)


def at(mhz: float) -> int:
    return FINE.index(mhz)


@pytest.mark.parametrize(("state", "x", "ceiling", "write", "pause_allowed"), [
    # idle: the cap still has room (or the fan can rise), the card not running away -> nothing, the rungs below decide
    (ClockLawState(), inputs(0, -0.5, exhausted=False), None, False, True),
    # idle, cap exhausted, at the set point or below it -> nothing
    (ClockLawState(), inputs(0, 2.5), None, False, True),
    # idle, cap exhausted, less than 1 °C over the set point (the cap's floor may still hold it) -> nothing
    (ClockLawState(), inputs(0, 1.2), None, False, True),
    # idle, cap exhausted, over the set point by more -> one step down, the pause held
    (ClockLawState(), inputs(0, 0.8), 2400.0, True, False),
    # limiting, still hot, the dwell not over -> hold
    (ClockLawState(index=2, changed_at=0, headroom_filtered_c=1.0, last_now=0), inputs(DWELL_DOWN_S - 1, 1.0),
     2400.0, False, False),
    # limiting, still hot after the dwell -> one more step down
    (ClockLawState(index=2, changed_at=0, headroom_filtered_c=1.0, last_now=DWELL_DOWN_S - 1),
     inputs(DWELL_DOWN_S, 1.0), 2000.0, True, False),
    # at the floor, still hot -> stays, the pause allowed
    (ClockLawState(index=0, changed_at=0, headroom_filtered_c=0.0, last_now=99), inputs(100, 0.0), 1500.0, False, True),
    # in the band between (room, but not UP_BAND_C of it) -> hold
    (ClockLawState(index=1, changed_at=0, headroom_filtered_c=4.0, last_now=99), inputs(100, 4.0),
     2000.0, False, False),
    # room, the up dwell not over -> hold
    (ClockLawState(index=1, changed_at=0, headroom_filtered_c=8.0, last_now=DWELL_UP_S - 2),
     inputs(DWELL_UP_S - 1, 8.0), 2000.0, False, False),
    # room after the up dwell -> one step up
    (ClockLawState(index=1, changed_at=0, headroom_filtered_c=8.0, last_now=DWELL_UP_S - 1), inputs(DWELL_UP_S, 8.0),
     2400.0, True, False),
    # one step below the top with room -> back to idle: the card's maximum (the original goes back)
    (ClockLawState(index=2, changed_at=0, headroom_filtered_c=8.0, last_now=DWELL_UP_S - 1), inputs(DWELL_UP_S, 8.0),
     None, True, True),
    # room comes back even while the cap is not exhausted any more (released in the rungs' reverse order)
    (ClockLawState(index=2, changed_at=0, headroom_filtered_c=8.0, last_now=DWELL_UP_S - 1),
     inputs(DWELL_UP_S, 8.0, exhausted=False), None, True, True),
    # no temperature -> hold what is in force
    (ClockLawState(index=1, changed_at=0, headroom_filtered_c=1.0, last_now=9), inputs(10, None), 2000.0, False, False),
])
def test_the_law(state: ClockLawState, x: ClockInputs, ceiling: float | None, write: bool, pause_allowed: bool) -> None:
    decision = decide(PARAMS, state, x)
    assert (decision.ceiling_mhz, decision.write, decision.pause_allowed) == (ceiling, write, pause_allowed)


def test_noise_alone_never_moves_it() -> None:
    """Whole degrees flickering by one around the set point write nothing in an hour."""
    state = ClockLawState(index=2, changed_at=0, headroom_filtered_c=2.0, last_now=0)
    for now in range(1, 3600):
        decision = decide(PARAMS, state, inputs(now, 2.0 + (1 if now % 2 else -1) * 0.6))
        assert not decision.write
        state = decision.state


@pytest.mark.parametrize(("original", "low", "floor", "levels", "expected_first", "count"), [
    (2500.0, 500.0, 0.6, None, 1500.0, 41),  # whole MHz every 1 % (25 MHz) down to 60 %
    (2500.0, 1800.0, 0.6, None, 1800.0, 29),  # the interface's lowest wins over the floor
    (1366.0, 300.0, 0.6, (300.0, 600.0, 900.0, 1145.0, 1215.0, 1257.0, 1300.0, 1366.0), 900.0, 6),  # Polaris levels
    (2660.0, 500.0, 0.6, (500.0, 2660.0), 2660.0, 1),  # RDNA's two ends: no ceiling above the floor, no room
])
def test_ceilings(original: float, low: float, floor: float, levels: tuple[float, ...] | None, expected_first: float,
                  count: int) -> None:
    found = ceilings(original, low, floor, levels)
    assert found[0] == expected_first and found[-1] == original and len(found) == count
    assert list(found) == sorted(set(found))


@pytest.mark.parametrize(("state", "x", "ceiling", "write", "pause_allowed"), [
    # issue 49 item 7: a power-limited card runs under its overdrive maximum (2283 of 2500 MHz): the first step
    # lands under the clock it runs at, not on 2475 MHz, which would change nothing
    (ClockLawState(), fine(0, 0.8, running_mhz=2283.0), 2275.0, True, False),
    # ...a card that runs at the ceiling, or whose clock is unknown: the next one down
    (ClockLawState(), fine(0, 0.8, running_mhz=2500.0), 2475.0, True, False),
    (ClockLawState(), fine(0, 0.8), 2475.0, True, False),
    # ...a clock under the floor tells nothing (idle, paused): the next one down
    (ClockLawState(), fine(0, 0.8, running_mhz=300.0), 2475.0, True, False),
    # limiting at 2400 while the cap holds the card at 2290: the next step lands under 2290
    (ClockLawState(index=at(2400.0), changed_at=0, headroom_filtered_c=1.0, last_now=9),
     fine(10, 1.0, running_mhz=2290.0), 2275.0, True, False),
    # issue 49 item 6: the step follows how far over the pause limit the card is: one per STEP_PER_C (1 °C),
    # at least one: 2 °C over -> 2 steps (50 MHz)
    (ClockLawState(index=at(2300.0), changed_at=0, headroom_filtered_c=-2.0, last_now=9),
     fine(10, -2.0, running_mhz=2300.0), 2250.0, True, False),
    # ...and how fast it rises: 1 °C under the limit, heating 0.5 °C/s -> LOOKAHEAD_S (12 s) ahead 5 °C over: 5 steps
    (ClockLawState(index=at(2300.0), changed_at=0, headroom_filtered_c=1.0, last_now=9, slope_c_per_s=-0.5),
     fine(10, 1.0, running_mhz=2300.0), 2175.0, True, False),
    # ...the same while cooling that fast (the last step takes effect; the filter lags): no further step
    (ClockLawState(index=at(2300.0), changed_at=0, headroom_filtered_c=1.0, last_now=9, slope_c_per_s=0.25),
     fine(10, 1.0, running_mhz=2300.0), 2300.0, False, False),
    # the cap not exhausted, the card predicted over its pause limit (a hot start, a stalled fan): the clock steps
    # in beside the cap, proportionally
    (ClockLawState(), fine(0, -3.0, running_mhz=2283.0, exhausted=False), 2225.0, True, False),
    # room, but the card does not run at its ceiling (an evaluation, a pause): nothing learned, the ceiling holds
    (ClockLawState(index=at(2200.0), changed_at=0, headroom_filtered_c=8.0, last_now=DWELL_UP_S - 1, bound_at=0),
     fine(DWELL_UP_S, 8.0, running_mhz=300.0), 2200.0, False, False),
    # ...while it runs at it: one step up
    (ClockLawState(index=at(2200.0), changed_at=0, headroom_filtered_c=8.0, last_now=DWELL_UP_S - 1, bound_at=0),
     fine(DWELL_UP_S, 8.0, running_mhz=2195.0), 2225.0, True, False),
    # up past the ceiling it engaged at (under the clock the card ran at then): idle, the card's maximum back
    (ClockLawState(index=at(2275.0), changed_at=0, headroom_filtered_c=8.0, last_now=DWELL_UP_S - 1,
                   engaged_index=at(2275.0)), fine(DWELL_UP_S, 8.0, running_mhz=2275.0), None, True, True),
    # a ceiling that has not bound for idle_restore_after_s (the job ended): given back
    (ClockLawState(index=at(2200.0), changed_at=0, headroom_filtered_c=20.0, last_now=699, bound_at=99),
     fine(700, 20.0, running_mhz=300.0), None, True, True),
    (ClockLawState(index=at(2200.0), changed_at=0, headroom_filtered_c=20.0, last_now=600, bound_at=99),
     fine(601, 20.0, running_mhz=300.0), 2200.0, False, False),
    # losing: over the pause limit by more than LOSING_C and still heating after the steps so far -> the pause may
    # come before the floor (the dwell not over: no step this tick)
    (ClockLawState(index=at(2200.0), changed_at=9, headroom_filtered_c=-1.5, last_now=9, slope_c_per_s=-0.2),
     fine(10, -1.5, running_mhz=2200.0), 2200.0, False, True),
    # ...over but cooling already: the rung catches up, the pause waits
    (ClockLawState(index=at(2200.0), changed_at=9, headroom_filtered_c=-1.5, last_now=9, slope_c_per_s=0.2),
     fine(10, -1.5, running_mhz=2200.0), 2200.0, False, False),
])
def test_where_and_how_far_it_steps(state: ClockLawState, x: ClockInputs, ceiling: float | None, write: bool,
                                    pause_allowed: bool) -> None:
    decision = decide(PARAMS, state, x)
    assert (decision.ceiling_mhz, decision.write, decision.pause_allowed) == (ceiling, write, pause_allowed)


def test_the_rate_is_filtered_from_the_headroom() -> None:
    """A steady rise of the junction shows as a negative rate; a one-degree flicker moves it little."""
    state = ClockLawState(index=at(2300.0), changed_at=0, headroom_filtered_c=10.0, last_now=0)
    for now in range(1, 31):
        state = decide(PARAMS, state, fine(now, 10.0 - 0.3 * now, running_mhz=2300.0)).state
    assert state.slope_c_per_s < -0.15
    assert LOOKAHEAD_S * state.slope_c_per_s < -1.0
    calm = ClockLawState(index=at(2300.0), changed_at=0, headroom_filtered_c=5.0, last_now=0)
    for now in range(1, 300):
        calm = decide(PARAMS, calm, fine(now, 5.0 + (0.6 if now % 2 else -0.6), running_mhz=2300.0)).state
        assert abs(calm.slope_c_per_s) < 0.1
