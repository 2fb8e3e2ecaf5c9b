"""The clock rung's law, table-tested (pure: ``now`` passed in): when it engages, steps, holds and gives back."""

from __future__ import annotations

import pytest

from gpuwatch.clock.law import (
    DWELL_DOWN_S,
    DWELL_UP_S,
    ClockInputs,
    ClockLawState,
    ClockParams,
    ceilings,
    decide,
)

PARAMS = ClockParams(hold_margin_c=2.0, floor_ratio=0.6)
LADDER = (1500.0, 2000.0, 2400.0, 2500.0)  # floor ... the card's maximum


def inputs(now: float, headroom_c: float | None, exhausted: bool = True) -> ClockInputs:
    return ClockInputs(now=now, headroom_c=headroom_c, cap_exhausted=exhausted, ceilings_mhz=LADDER)


@pytest.mark.parametrize(("state", "x", "ceiling", "write", "pause_allowed"), [
    # idle: the cap still has room (or the fan can rise) -> nothing, the rungs below decide
    (ClockLawState(), inputs(0, -3.0, exhausted=False), None, False, True),
    # idle, cap exhausted, at the set point or below it -> nothing
    (ClockLawState(), inputs(0, 2.5), None, False, True),
    # idle, cap exhausted, over the set point -> one step down, the pause held
    (ClockLawState(), inputs(0, 1.0), 2400.0, True, False),
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
