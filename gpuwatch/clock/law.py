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
* hf = EMA(headroom, FILTER_TAU_S), its rate of change r = EMA(d hf / dt, SLOPE_TAU_S); e = hf - hold_margin_c
  (the governor's set point: both rungs hold the same temperature) and the error LOOKAHEAD_S ahead,
  ep = e + r * LOOKAHEAD_S (a card heating fast is treated as hotter than it reads, one cooling fast after a step
  as cooler: the filter's lag asks for no further step).
* The running clock (gpu_metrics' gfxclk, the sampler's reading) decides where a step starts: a power-limited
  card runs below its overdrive maximum (RDNA3: ~2680 of 2940 MHz, LACT #1068), so a ceiling above that clock
  changes nothing; the first step lands on the highest ceiling under the clock the card runs at.
* IDLE -> LIMITING when the cap is exhausted and e < -2 * DOWN_BAND_C (the cap's floor may hold a card a little
  over the set point: the clock does not take from it what that floor holds), or, whatever the cap does, when
  the card is predicted more than LOSING_C over its pause limit (hf + r * LOOKAHEAD_S: a stalled fan, a hot
  start, where the cap's slow loop cannot catch up): down under the running clock.
* LIMITING: down when ep < -DOWN_BAND_C and the last change is DWELL_DOWN_S old, by one step per STEP_PER_C
  (begun, at least one) that the card is predicted over its pause limit (how far over it is, and how fast it
  rises); up one step when e > UP_BAND_C, the last change is DWELL_UP_S old and the ceiling binds (the card runs
  at it: not during an evaluation or a pause, which show no room, as the governor learns only while its cap
  binds). Up past the ceiling it engaged at (under the clock the card ran at then): IDLE, the card's own maximum
  again. The band between (hysteresis) and the dwells keep it from hunting on sensor noise. A ceiling that has
  not bound for ``idle_restore_after_s`` (the job ended) is given back: IDLE.
* pause_allowed: IDLE (the rungs below decide), at the floor, or losing: the card is more than LOSING_C over its
  pause limit and still heating (HEATING_C_PER_S) after the steps so far: the pause must not wait for a rung
  that cannot catch up.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

# EMA of the headroom, as the governor's (FILTER_TAU_S there): whole degrees flicker by one.
FILTER_TAU_S = 6.0
# EMA of the filtered headroom's rate of change: long enough that a one-degree flicker moves it by under
# 0.05 °C/s, short against the heatsink's minute.
SLOPE_TAU_S = 8.0
# How far ahead the rate is extrapolated: the filter's lag (6 s), the junction's (3 s) and the next dwell's.
LOOKAHEAD_S = 12.0
# Step down only this far over the set point: noise alone never lowers the clock.
DOWN_BAND_C = 0.5
# One more step per this much predicted over the pause limit: a 1 % step cuts ~3 % of the board's power, 1-3 °C
# at full fan, more with a stalled one.
STEP_PER_C = 1.0
# Step up only with this much room: a step of STEP_RATIO of the clock is ~3 % of the board's power, which
# warms a card at its thermal limit by 1-3 °C; a band wider than that step cannot limit-cycle.
UP_BAND_C = 3.0
# A step down may follow the last change this soon (the junction answers within seconds)...
DWELL_DOWN_S = 4.0
# ...a step up only this late (the heatsink's time constant at full fan is about a minute).
DWELL_UP_S = 45.0
# One step of an overdrive ceiling, share of the card's maximum (25 MHz on a 2500 MHz card).
STEP_RATIO = 0.01
# The ceiling binds while the card runs within this share of it (gpu_metrics' average gfxclk sits a little
# under a ceiling in force; idle, paused or power-limited below it, the card runs far under).
BIND_RATIO = 0.05
# Predicted this far over the pause limit, the rungs below are losing: the clock steps in beside the cap; over
# it already and still heating this fast, the rung is losing too and the pause may come (after the debounce).
LOSING_C = 1.0
HEATING_C_PER_S = 0.05
# A longer gap between ticks (a stalled loop) is not filtered as if it were control.
MAX_DT_S = 10.0


@dataclass(frozen=True)
class ClockParams:
    """The per-GPU settings the law needs; no defaults of its own (``clock_params`` builds it)."""

    hold_margin_c: float
    floor_ratio: float
    idle_restore_after_s: float  # [power]'s: a ceiling that has not bound this long is given back


@dataclass(frozen=True)
class ClockLawState:
    """What the law remembers between ticks; ``index`` into the ceilings (None: idle, the top in force)."""

    index: int | None = None
    changed_at: float | None = None
    headroom_filtered_c: float | None = None
    last_now: float | None = None
    slope_c_per_s: float = 0.0  # d(headroom_filtered_c)/dt, filtered: negative while the card heats
    engaged_index: int | None = None  # the first ceiling of this episode (under the clock the card ran at then)
    bound_at: float | None = None  # when the ceiling last bound (the card ran at it)


@dataclass(frozen=True)
class ClockInputs:
    now: float
    headroom_c: float | None  # min over sensors of (pause limit - reading); None: no usable temperature
    cap_exhausted: bool  # the power cap is at its floor, or the card has no cap the governor can set
    ceilings_mhz: tuple[float, ...]  # ascending; the last is the card's own maximum
    running_mhz: float | None = None  # the shader clock the card runs at (gpu_metrics' gfxclk); None: unknown


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
        return _decision(replace(state, index=index, last_now=x.now), x, write=False, losing=False)
    previous = state.headroom_filtered_c
    hf = x.headroom_c if previous is None else _filtered(previous, x.headroom_c, dt, FILTER_TAU_S)
    slope = state.slope_c_per_s
    if previous is not None and dt > 0:
        slope = _filtered(slope, (hf - previous) / dt, dt, SLOPE_TAU_S)
    bound = index is not None and _binds(x.ceilings_mhz[index], x.running_mhz)
    state = replace(state, index=index, headroom_filtered_c=hf, last_now=x.now, slope_c_per_s=slope,
                    bound_at=x.now if bound else state.bound_at)
    e = hf - params.hold_margin_c
    ahead = e + slope * LOOKAHEAD_S  # a card cooling fast after a step needs no more: the filter's lag is not heat
    # Predicted more than LOSING_C over the pause limit: the rungs below cannot catch up (a stalled fan, a hot
    # start): the clock steps in beside the cap, and while the card still heats the pause may come.
    runaway = ahead + params.hold_margin_c < -LOSING_C
    losing = runaway and hf < -LOSING_C and slope < -HEATING_C_PER_S
    since = math.inf if state.changed_at is None else x.now - state.changed_at
    if index is None:
        if (x.cap_exhausted and e < -2 * DOWN_BAND_C) or runaway:
            start = _below(x.ceilings_mhz, top, x.running_mhz)
            to = max(0, start - _steps(min(e, ahead) + params.hold_margin_c) + 1)
            return _decision(replace(state, index=to, changed_at=x.now, engaged_index=start, bound_at=x.now), x,
                             write=True, losing=losing)
        return _decision(state, x, write=False, losing=losing)
    if ahead < -DOWN_BAND_C and since >= DWELL_DOWN_S and index > 0:
        to = max(0, _below(x.ceilings_mhz, index, x.running_mhz) - _steps(ahead + params.hold_margin_c) + 1)
        return _decision(replace(state, index=to, changed_at=x.now), x, write=True, losing=losing)
    if e > UP_BAND_C and since >= DWELL_UP_S and bound:
        up = index + 1
        done = up >= top or (state.engaged_index is not None and up > state.engaged_index)
        return _decision(replace(state, index=None if done else up, changed_at=x.now), x, write=True, losing=losing)
    if state.bound_at is not None and x.now - state.bound_at >= params.idle_restore_after_s:
        return _decision(replace(state, index=None, changed_at=x.now), x, write=True, losing=losing)
    return _decision(state, x, write=False, losing=losing)


def _below(ceilings_mhz: tuple[float, ...], index: int, running_mhz: float | None) -> int:
    """Where a step down from ``index`` lands: the next ceiling down, or, where the card runs lower than that (a
    power-limited card), the highest ceiling under the clock it runs at. A card running under the floor (idle,
    paused) tells nothing: the next ceiling down."""
    below = index - 1
    if running_mhz is None or running_mhz <= ceilings_mhz[0]:
        return below
    while below > 0 and ceilings_mhz[below] >= running_mhz:
        below -= 1
    return below


def _steps(headroom_c: float) -> int:
    """Steps down for a (predicted) headroom to the pause limit: one per STEP_PER_C (begun) over the limit, at least
    one."""
    return max(1, math.ceil(-headroom_c / STEP_PER_C))


def _binds(ceiling_mhz: float, running_mhz: float | None) -> bool:
    """The card runs at the ceiling (unknown: taken as binding, as before the running clock was read)."""
    return running_mhz is None or running_mhz >= ceiling_mhz * (1.0 - BIND_RATIO)


def _decision(state: ClockLawState, x: ClockInputs, write: bool, losing: bool) -> Decision:
    ceiling = None if state.index is None else x.ceilings_mhz[state.index]
    at_floor = state.index == 0
    pause_allowed = state.index is None or at_floor or losing
    return Decision(state, ceiling, write, pause_allowed=pause_allowed, at_floor=at_floor)


def _filtered(previous: float, value: float, dt: float, tau_s: float) -> float:
    if dt <= 0:
        return previous
    return previous + (1.0 - math.exp(-dt / tau_s)) * (value - previous)
