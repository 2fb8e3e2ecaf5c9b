"""The clock rung's law (pure): ``decide(params, state, inputs incl. now) -> Decision``.

The ladder is fan -> power cap -> clock ceiling -> pause; this is the third rung. It acts only where the
second has nothing left: the power governor holds its cap at the floor (or the card has no cap control) and
the hottest sensor is still above the hold band. Nothing here reads a clock or a file: the controller
(controller.py) passes ``now`` and the measurements in, writes ``Decision.ceiling_mhz`` when
``Decision.write`` says so and reads it back. docs/power.md ("The clock rung") gives the reason for every
constant; they were tuned on the simulator's physics and benchmarks/control_quality.py measures the result.

* The ceilings it may set are a ladder of their own (``ceilings``): the card's maximum (no ceiling of
  ours), then steps of STEP_RATIO of it down to the floor (an overdrive table takes any whole MHz), or the
  card's own DPM levels in that span (a level mask).
* hf = EMA(headroom, FILTER_TAU_S), e = hf - hold_margin_c (the governor's set point: both rungs hold the
  same temperature).
* IDLE -> LIMITING when the cap is exhausted and e < 0: one step down.
* LIMITING: one step down when e < -DOWN_BAND_C and the last change is DWELL_DOWN_S old; one step up when
  e > UP_BAND_C and the last change is DWELL_UP_S old (the heatsink's time constant: the card must show
  the room it has before the clock takes it back). Back at the top: IDLE, the card's own maximum again.
  The band between them (hysteresis) and the dwells keep it from hunting on sensor noise.
* pause_allowed: IDLE (the rungs below decide), or at the floor: the trainer may be paused.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

# EMA of the headroom, as the governor's (FILTER_TAU_S there): whole degrees flicker by one.
FILTER_TAU_S = 6.0
# Step down only this far over the set point: noise alone never lowers the clock.
DOWN_BAND_C = 0.5
# Step up only with this much room: a step of STEP_RATIO of the clock is ~3 % of the board's power, which
# warms a card at its thermal limit by 1-3 °C; a band wider than that step cannot limit-cycle.
UP_BAND_C = 3.0
# A step down may follow the last change this soon (the junction answers within seconds; 8 s let a card
# whose fan is stuck from the start overshoot its limit once)...
DWELL_DOWN_S = 4.0
# ...a step up only this late (the heatsink's time constant at full fan is about a minute).
DWELL_UP_S = 45.0
# One step of an overdrive ceiling, share of the card's maximum (25 MHz on a 2500 MHz card).
STEP_RATIO = 0.01
# A longer gap between ticks (a stalled loop) is not filtered as if it were control.
MAX_DT_S = 10.0


@dataclass(frozen=True)
class ClockParams:
    """The per-GPU settings the law needs; no defaults of its own (``clock_params`` builds it)."""

    hold_margin_c: float
    floor_ratio: float


@dataclass(frozen=True)
class ClockLawState:
    """What the law remembers between ticks; ``index`` into the ceilings (None: idle, the top in force)."""

    index: int | None = None
    changed_at: float | None = None
    headroom_filtered_c: float | None = None
    last_now: float | None = None


@dataclass(frozen=True)
class ClockInputs:
    now: float
    headroom_c: float | None  # min over sensors of (pause limit - reading); None: no usable temperature
    cap_exhausted: bool  # the power cap is at its floor, or the card has no cap the governor can set
    ceilings_mhz: tuple[float, ...]  # ascending; the last is the card's own maximum


@dataclass(frozen=True)
class Decision:
    state: ClockLawState
    ceiling_mhz: float | None  # the ceiling that should be in force; None: none of ours (the card's maximum)
    write: bool  # it differs from what the state had: write it (or give the original back)
    pause_allowed: bool
    at_floor: bool


def ceilings(original_mhz: float, min_mhz: float, floor_ratio: float,
             levels_mhz: tuple[float, ...] | None) -> tuple[float, ...]:
    """The ceilings the law may set, ascending, the card's maximum last: the card's DPM levels within
    [floor, maximum], or whole MHz every STEP_RATIO of the maximum; the floor is floor_ratio of the
    maximum and never under what the interface takes. One element: no room to act."""
    floor = max(min_mhz, math.ceil(floor_ratio * original_mhz))
    if levels_mhz is not None:
        return tuple(sorted({level for level in levels_mhz if floor <= level < original_mhz} | {original_mhz}))
    step = max(1.0, round(STEP_RATIO * original_mhz))
    found, value = [original_mhz], original_mhz - step
    while value > floor:
        found.append(float(round(value)))
        value -= step
    if floor < original_mhz:
        found.append(float(floor))
    return tuple(sorted(set(found)))


def decide(params: ClockParams, state: ClockLawState, x: ClockInputs) -> Decision:
    """One tick of the law (module docstring)."""
    top = len(x.ceilings_mhz) - 1
    dt = 0.0 if state.last_now is None else min(MAX_DT_S, max(0.0, x.now - state.last_now))
    index = state.index if state.index is None else min(max(state.index, 0), top)
    if x.headroom_c is None or top < 1:
        # No temperature (the fan's failsafe and the emergency stop take over) or no room: hold.
        return _decision(replace(state, index=index, last_now=x.now), x, write=False)
    hf = x.headroom_c if state.headroom_filtered_c is None else _filtered(state.headroom_filtered_c, x.headroom_c, dt)
    state = replace(state, index=index, headroom_filtered_c=hf, last_now=x.now)
    e = hf - params.hold_margin_c
    since = math.inf if state.changed_at is None else x.now - state.changed_at
    if index is None:
        if x.cap_exhausted and e < 0:
            return _decision(replace(state, index=top - 1, changed_at=x.now), x, write=True)
        return _decision(state, x, write=False)
    if e < -DOWN_BAND_C and since >= DWELL_DOWN_S and index > 0:
        return _decision(replace(state, index=index - 1, changed_at=x.now), x, write=True)
    if e > UP_BAND_C and since >= DWELL_UP_S:
        up = index + 1
        return _decision(replace(state, index=None if up >= top else up, changed_at=x.now), x, write=True)
    return _decision(state, x, write=False)


def _decision(state: ClockLawState, x: ClockInputs, write: bool) -> Decision:
    ceiling = None if state.index is None else x.ceilings_mhz[state.index]
    at_floor = state.index == 0
    return Decision(state, ceiling, write, pause_allowed=state.index is None or at_floor, at_floor=at_floor)


def _filtered(previous_c: float, headroom_c: float, dt: float) -> float:
    if dt <= 0:
        return previous_c
    return previous_c + (1.0 - math.exp(-dt / FILTER_TAU_S)) * (headroom_c - previous_c)
