"""The power-cap governor's control law (pure): ``decide(params, state, inputs incl. now) -> Decision``.

The escalation is fan -> power cap -> pause; this is the middle rung. Nothing here reads a clock or a
file: the controller (controller.py) passes ``now`` and the measurements in, writes ``Decision.cap_w``
when ``Decision.write`` says so and reads it back. docs/power.md gives the reason for every constant;
they were tuned on the simulator's physics (gpuwatch/sim/physics.py) and benchmarks/control_quality.py
measures the result.

Everything is in *headroom*: the smallest (pause limit - reading) over the GPU's sensors, so edge,
junction and mem, each with its own limit, are handled alike (positive = room). Power is scaled by the
board's default cap, so the same gains fit a 95 W laptop part and a 330 W board.

* hf = EMA(headroom, FILTER_TAU_S): amdgpu reports whole degrees that flicker by one.
* IDLE -> GOVERNING when the fan cannot rise and hf <= engage_margin_c. Bumpless: the output starts at
  min(original, power drawn + the binding tolerance), the integrator at output - P(e), so the P term
  alone starts pulling the cap down as the card heats on.
* GOVERNING, e = hf - hold_margin_c, ez = e with a +/-DEAD_BAND_C dead zone, a PI controller:
    I += ki * ez * dt   downwards always; upwards only while the cap binds and (e <= UP_BAND_C, or the
                        room has lasted release_after_s: a settled card, not the warm-up after an eval)
    u  = clamp(I + kp * ez, floor, original), rising at most raise_ratio_per_s
  While the cap does not bind (eval, data loading, a pause) and it is not too hot, nothing moves: the
  cap that held the limit is kept for the next training phase.
* Written in whole watts (the kernel truncates to W) when round(u) moves min_step from the cap in force
  (reverse_step against the previous write's direction), or reaches the floor or the original. A
  reversal that the error agrees with goes to round(I), the integrator's estimate of the cap that holds
  the set point: that ends the slow +/-3 W limit cycle a write dead band otherwise causes.
* GOVERNING -> IDLE when u has stayed at the original for release_after_s with the card below the hold
  band, or the cap has not bound for idle_restore_after_s (the job ended: the original goes back).
* pause_allowed (the supervisor still applies its own debounce_s): IDLE, at the floor, or no temperature.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from gpuwatch.config.cooling import PowerConfig
from gpuwatch.model import replaced

Phase = Literal["idle", "governing"]

# Constants of the law (not settings: each is tied to the others and to the physics; docs/power.md).
# EMA of the headroom: fewer reversals than 4 s, a lag far below the ~70 s loop time constant.
FILTER_TAU_S = 6.0
# ~3 sigma of that EMA with +/-0.6 °C noise on whole degrees: noise alone writes nothing.
DEAD_BAND_C = 0.5
# Integrate upwards only this close below the set point: after an eval the card warms up from far
# below the limit, and integrating that "room" would wind the cap up and overshoot on every cycle.
UP_BAND_C = 2.5
# Proportional gain, share of the default cap per °C (7.5 W/°C at 150 W): the fast path (0.11 K/W
# junction over heatsink) then has a loop gain of 0.83; above 1 it limit-cycles.
KP_RATIO_PER_C = 0.05
# Integral gain: kp/ki = 71 s, the heatsink's time constant at full fan; the PI zero cancels that pole.
KI_RATIO_PER_C_S = 0.0007
# The cap binds when the card draws within 3 % of the default cap of it (power1_average lags, and the
# SMU holds slightly under the limit).
BOUND_TOLERANCE_RATIO = 0.03
# A longer gap between ticks (a stalled loop) must not integrate as if it were control.
MAX_DT_S = 10.0


@dataclass(frozen=True)
class GovernorParams:
    """The per-GPU settings the law needs; no defaults of its own (``governor_params`` builds it)."""

    engage_margin_c: float
    hold_margin_c: float
    floor_ratio: float
    min_step_ratio: float
    reverse_step_ratio: float
    raise_ratio_per_s: float
    release_after_s: float
    idle_restore_after_s: float


def governor_params(power: PowerConfig) -> GovernorParams:
    """The law's view of one GPU's (already validated, overrides applied) [power] settings."""
    return GovernorParams(
        engage_margin_c=power.engage_margin_c,
        hold_margin_c=power.hold_margin_c,
        floor_ratio=power.floor_percent / 100.0,
        min_step_ratio=power.min_step_percent / 100.0,
        reverse_step_ratio=power.reverse_step_percent / 100.0,
        raise_ratio_per_s=power.raise_percent_per_s / 100.0,
        release_after_s=power.release_after_s,
        idle_restore_after_s=power.idle_restore_after_s,
    )


@dataclass(frozen=True)
class GovernorState:
    """What the law remembers between ticks."""

    phase: Phase = "idle"
    integral_w: float | None = None
    output_w: float | None = None  # u before rounding (the rise limit acts on it)
    headroom_filtered_c: float | None = None
    last_now: float | None = None
    room_since: float | None = None  # since when the card has had room (ez > 0) with the cap binding
    release_since: float | None = None  # since when u is at the original with the card below the hold band
    unbound_since: float | None = None  # since when the cap has not limited the card
    last_direction: int = 0  # of the last write: +1 up, -1 down


@dataclass(frozen=True)
class GovernorInputs:
    now: float
    headroom_c: float | None  # min over sensors of (pause limit - reading); None: no usable temperature
    fan_can_rise: bool  # False: fan at the curve's top, stuck, failsafe or not driven by gpuwatch
    power_w: float | None  # what the card draws
    cap_w: float  # the cap in force now
    original_cap_w: float  # found at start: the ceiling, and what goes back on exit
    default_cap_w: float  # power1_cap_default: the scale of every power setting
    floor_cap_w: float  # floor_cap_w(...)


@dataclass(frozen=True)
class Decision:
    state: GovernorState
    cap_w: float  # the cap that should be in force
    write: bool  # it differs from the cap in force: write it (and read it back)
    pause_allowed: bool
    at_floor: bool


def floor_cap_w(floor_ratio: float, default_w: float, cap_min_w: float | None, original_w: float) -> float:
    """The lowest cap the governor writes: ``floor_ratio`` x default in whole watts, never under
    ``power1_cap_min`` (0 = no minimum, as many cards report), never over the cap found at start."""
    floor = floor_ratio * default_w
    if cap_min_w:
        floor = max(floor, cap_min_w)
    return min(float(math.ceil(floor)), original_w)


@dataclass(frozen=True)
class _Tick:
    """What one tick's inputs mean for the law: the gains in watts, the error and whether the cap binds."""

    kp: float
    ki: float
    tolerance: float
    bound: bool  # the card draws (nearly) what the cap allows: the cap is what limits it
    e: float  # filtered headroom - hold margin (positive: room)
    ez: float  # e with the dead zone

    @classmethod
    def of(cls, params: GovernorParams, headroom_filtered_c: float, x: GovernorInputs) -> _Tick:
        scale = x.default_cap_w
        tolerance = BOUND_TOLERANCE_RATIO * scale
        e = headroom_filtered_c - params.hold_margin_c
        return cls(kp=KP_RATIO_PER_C * scale, ki=KI_RATIO_PER_C_S * scale, tolerance=tolerance,
                   bound=x.power_w is None or x.power_w >= x.cap_w - tolerance, e=e, ez=_dead_zone(e, DEAD_BAND_C))


def decide(params: GovernorParams, state: GovernorState, x: GovernorInputs) -> Decision:
    """One tick of the law, in named steps: filter, engage, integrate, quantise, release (module docstring)."""
    dt = 0.0 if state.last_now is None else min(MAX_DT_S, max(0.0, x.now - state.last_now))
    if x.headroom_c is None:
        # No temperature: hold; the fan's failsafe and the supervisor's emergency stop take over.
        return Decision(replaced(state, last_now=x.now), x.cap_w, False, pause_allowed=True,
                        at_floor=x.cap_w <= x.floor_cap_w)
    hf = _filtered(state.headroom_filtered_c, x.headroom_c, dt)
    state = replaced(state, headroom_filtered_c=hf, last_now=x.now)
    if state.phase == "idle" and (x.fan_can_rise or hf > params.engage_margin_c):
        return _give_back(state, x)  # not governing: the supervisor pauses exactly as without a governor
    # After the idle check: an idle GPU's tick (most of them) needs no gains (_Tick.of is pure).
    tick = _Tick.of(params, hf, x)
    if state.phase == "idle":
        state = _engaged(state, x, tick)
    integral, u, room_since, unbound_since = _integrated(params, state, x, tick, dt)
    target, direction = _quantised(params, state, x, tick, integral, u)
    release_since = _released_since(state, x, tick, u)
    if (release_since is not None and x.now - release_since >= params.release_after_s) or (
            unbound_since is not None and x.now - unbound_since >= params.idle_restore_after_s):
        return _give_back(state, x)
    state = replaced(state, integral_w=integral, output_w=u, room_since=room_since, release_since=release_since,
                     unbound_since=unbound_since, last_direction=direction or state.last_direction)
    at_floor = target <= x.floor_cap_w
    return Decision(state, target, target != x.cap_w, pause_allowed=at_floor, at_floor=at_floor)


def _engaged(state: GovernorState, x: GovernorInputs, tick: _Tick) -> GovernorState:
    """IDLE -> GOVERNING, bumpless: the output starts at what the card draws (within the binding
    tolerance), the integrator at that minus the P term, so P alone pulls the cap down as it heats on."""
    start = x.original_cap_w if x.power_w is None else min(x.original_cap_w, x.power_w + tick.tolerance)
    return replaced(state, phase="governing", integral_w=start - tick.kp * tick.ez, output_w=start)


def _integrated(params: GovernorParams, state: GovernorState, x: GovernorInputs, tick: _Tick,
                dt: float) -> tuple[float, float, float | None, float | None]:
    """The PI step: the integrator (down always, up only near the set point or after lasting room, and
    only while the cap binds), the output with its rise limit, and the since-when clocks it needs."""
    assert state.integral_w is not None and state.output_w is not None
    lo, hi, scale = x.floor_cap_w, x.original_cap_w, x.default_cap_w
    integral, u_before = state.integral_w, state.output_w
    room_since = None
    if tick.bound and tick.ez > 0:
        room_since = state.room_since if state.room_since is not None else x.now
    if tick.ez < 0:
        integral += tick.ki * tick.ez * dt  # too hot: always integrate down
    elif tick.ez > 0 and tick.bound and (tick.e <= UP_BAND_C or (
            room_since is not None and x.now - room_since >= params.release_after_s)):
        integral += tick.ki * min(tick.ez, UP_BAND_C - DEAD_BAND_C) * dt
    integral = _clamp(integral, lo, hi)
    u = min(_clamp(integral + tick.kp * tick.ez, lo, hi), u_before + params.raise_ratio_per_s * scale * dt)
    unbound_since = state.unbound_since
    if tick.bound or tick.e < 0:
        unbound_since = None
    elif unbound_since is None:
        unbound_since = x.now
    if not tick.bound and tick.e >= 0:
        u = u_before  # nothing to learn while the card draws under the cap: keep it for the next load
    return integral, u, room_since, unbound_since


def _quantised(params: GovernorParams, state: GovernorState, x: GovernorInputs, tick: _Tick, integral: float,
               u: float) -> tuple[float, int]:
    """The cap to have in force, in whole watts, and the direction of the write (0: none): a move smaller
    than min_step (reverse_step against the last write) is not written unless it reaches an end; a
    reversal the error agrees with goes to the integrator's estimate of the cap that holds the set point."""
    lo, hi, applied, scale = x.floor_cap_w, x.original_cap_w, x.cap_w, x.default_cap_w
    target = _whole_w(u, lo, hi)
    direction = (target > applied) - (target < applied)
    reverse = direction != 0 and direction == -state.last_direction
    needed = (params.reverse_step_ratio if reverse else params.min_step_ratio) * scale
    if abs(target - applied) < needed and target not in (lo, hi):
        return applied, 0
    if reverse and tick.ez * direction > 0:
        settle = _whole_w(integral, lo, hi)
        if (settle - applied) * direction >= params.min_step_ratio * scale:
            target = settle
    return target, direction


def _released_since(state: GovernorState, x: GovernorInputs, tick: _Tick, u: float) -> float | None:
    """Since when the output has been at the original with the card below the hold band (None: it is not)."""
    if u >= x.original_cap_w and tick.e > DEAD_BAND_C:
        return state.release_since if state.release_since is not None else x.now
    return None


def _give_back(state: GovernorState, x: GovernorInputs) -> Decision:
    """IDLE: the original in force (written if it is not), and the supervisor pauses as without a governor."""
    hi = x.original_cap_w
    return Decision(_idle(state), hi, x.cap_w != hi, pause_allowed=True, at_floor=False)


def _filtered(previous_c: float | None, headroom_c: float, dt: float) -> float:
    if previous_c is None:
        return headroom_c
    if dt <= 0:
        return previous_c
    return previous_c + (1.0 - math.exp(-dt / FILTER_TAU_S)) * (headroom_c - previous_c)


def _dead_zone(e: float, band: float) -> float:
    return math.copysign(max(0.0, abs(e) - band), e)


def _clamp(value: float, lo: float, hi: float) -> float:
    return min(hi, max(lo, value))


def _whole_w(value: float, lo: float, hi: float) -> float:
    """Whole watts inside [lo, hi]; the ends exactly (an original of 312.5 W goes back as 312.5 W)."""
    if value >= hi:
        return hi
    if value <= lo:
        return lo
    return _clamp(float(round(value)), lo, hi)


def _idle(state: GovernorState) -> GovernorState:
    """The state of the IDLE phase: the filter and the clock kept, all else as GovernorState() has it. An idle
    state is that already (made by GovernorState(), here, or ``decide``'s ``replaced`` of the filter and the
    clock alone): kept, not made again every idle tick (tests/power/test_governor.py checks the invariant)."""
    if state.phase == "idle":
        return state
    return GovernorState(headroom_filtered_c=state.headroom_filtered_c, last_now=state.last_now)
