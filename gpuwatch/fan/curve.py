"""Pure fan-curve logic: interpolation, floor, hysteresis/spindown/slew, crit and failsafe rules.

Everything here is a function of its arguments (``now`` included): the controller passes the previous
``CurveState`` in and stores the returned one. No I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gpuwatch.config.cooling import FanConfig, Point
from gpuwatch.model import at_crit, replaced


@dataclass(frozen=True)
class CurveParams:
    """The per-GPU curve settings that the pure rules need; no defaults of its own: ``curve_params``
    builds it from a FanConfig, whose defaults are the only ones (tests included)."""

    points: tuple[Point, ...]
    floor_percent: float
    dead_band_c: float
    spindown_delay_s: float
    slew_down_percent_per_s: float | None
    failsafe_after_ticks: int
    frozen_after_ticks: int


def curve_params(fan: FanConfig) -> CurveParams:
    """The pure rules' view of one GPU's (already validated) fan settings."""
    return CurveParams(
        points=tuple((float(t), float(p)) for t, p in fan.curve),
        floor_percent=fan.floor_percent,
        dead_band_c=fan.dead_band_c,
        spindown_delay_s=fan.spindown_delay_s,
        slew_down_percent_per_s=fan.slew_down_percent_per_s,
        failsafe_after_ticks=fan.failsafe_after_ticks,
        frozen_after_ticks=fan.frozen_after_ticks,
    )


@dataclass(frozen=True)
class CurveState:
    """What the hysteresis remembers between ticks."""

    applied_percent: float | None = None
    ref_temp_c: float | None = None  # temperature at the last applied change
    below_since: float | None = None  # when the temperature first fell a dead band below ref_temp_c
    slewing: bool = False  # a slew-limited decrease is still walking down to its target
    last_now: float | None = None
    last_temp_c: float | None = None
    bad_ticks: int = 0  # consecutive ticks with no usable temperature
    same_ticks: int = 0  # consecutive ticks with an identical temperature (and identical telemetry)
    last_telemetry: tuple[float | None, ...] = ()


@dataclass(frozen=True)
class Decision:
    percent: float
    state: CurveState
    target_percent: float  # the curve's value before hysteresis
    failsafe_reason: str | None = None
    crit: bool = False


def interpolate(points: Sequence[Point], temp_c: float) -> float:
    """Linear between points; flat below the first and above the last."""
    if temp_c <= points[0][0]:
        return points[0][1]
    for (t0, s0), (t1, s1) in zip(points, points[1:], strict=False):
        if temp_c <= t1:
            return s0 + (s1 - s0) * (temp_c - t0) / (t1 - t0)
    return points[-1][1]


def top_percent(params: CurveParams) -> float:
    """The highest speed the curve ever commands below crit (its last point, or the floor above it)."""
    return min(100.0, max(params.floor_percent, max(speed for _, speed in params.points)))


def apply_floor(percent: float, floor_percent: float, minimum_percent: float = 0.0) -> float:
    """Firmware minimum first, then the floor last, so no transform can take the fan under it."""
    return min(100.0, max(floor_percent, minimum_percent, percent))


def decide(
    params: CurveParams,
    state: CurveState,
    temp_c: float | None,
    crit_c: float | None,
    now: float,
    minimum_percent: float = 0.0,
    telemetry: tuple[float | None, ...] = (),
) -> Decision:
    """The speed to apply this tick. ``temp_c`` None means missing/unreadable.

    ``telemetry`` is the GPU's other live readings (other sensors, power): the sensor counts as
    frozen only while they are frozen too, since an idle card can hold one whole-degree value for
    minutes, while a hung SMU freezes everything it reports.
    """
    bad = state.bad_ticks + 1 if temp_c is None else 0
    unchanged = temp_c is not None and temp_c == state.last_temp_c and telemetry == state.last_telemetry
    same = state.same_ticks + 1 if unchanged else 0
    # What every outcome remembers, applied with the outcome's own changes in one ``replaced`` (two were a
    # third of a fan's step).
    base: dict[str, Any] = {
        "bad_ticks": bad, "same_ticks": same, "last_now": now, "last_telemetry": telemetry,
        "last_temp_c": temp_c if temp_c is not None else state.last_temp_c,
    }
    if temp_c is None:
        if bad >= params.failsafe_after_ticks:
            return _full(state, base, f"no temperature for {bad} tick(s)", ref_temp_c=None)
        # Not yet failsafe: keep what is applied (or full speed if nothing is yet).
        held = state.applied_percent if state.applied_percent is not None else 100.0
        return Decision(percent=held, state=replaced(state, **base, applied_percent=held), target_percent=held)
    if params.frozen_after_ticks and same >= params.frozen_after_ticks:
        # No dead band afterwards: the frozen value says nothing about how hot the GPU really was.
        return _full(state, base, f"temperature frozen at {temp_c:g} °C for {same} ticks", ref_temp_c=None)
    if at_crit(temp_c, crit_c):
        full = _full(state, base, None, ref_temp_c=temp_c)
        return replaced(full, crit=True)
    target = apply_floor(interpolate(params.points, temp_c), params.floor_percent, minimum_percent)
    applied = state.applied_percent
    if applied is None or target > applied:
        return _set(state, base, target, target, temp_c)
    if target == applied:
        return Decision(percent=applied, state=replaced(state, **base, below_since=None, slewing=False),
                        target_percent=target)
    # Lowering: only once the temperature is a dead band below the last change and stayed there.
    if not state.slewing:
        if state.ref_temp_c is not None and temp_c > state.ref_temp_c - params.dead_band_c:
            return Decision(percent=applied, state=replaced(state, **base, below_since=None), target_percent=target)
        below_since = state.below_since if state.below_since is not None else now
        if now - below_since < params.spindown_delay_s:
            return Decision(percent=applied, state=replaced(state, **base, below_since=below_since),
                            target_percent=target)
    new = target
    if params.slew_down_percent_per_s is not None and state.last_now is not None:
        elapsed_s = max(0.0, now - state.last_now)
        new = max(target, applied - params.slew_down_percent_per_s * elapsed_s)
    return _set(state, base, new, target, temp_c, slewing=new > target)


def failsafe(state: CurveState, reason: str, now: float) -> Decision:
    """Full speed at once for a reason outside the curve's inputs (a GPU whose reads hang)."""
    return _full(state, {"last_now": now}, reason, ref_temp_c=None)


def _set(state: CurveState, base: dict[str, Any], percent: float, target: float, temp_c: float,
         slewing: bool = False) -> Decision:
    return Decision(
        percent=percent,
        target_percent=target,
        state=replaced(state, **base, applied_percent=percent, ref_temp_c=temp_c, below_since=None, slewing=slewing),
    )


def _full(state: CurveState, base: dict[str, Any], reason: str | None, ref_temp_c: float | None) -> Decision:
    state = replaced(state, **base, applied_percent=100.0, ref_temp_c=ref_temp_c, below_since=None, slewing=False)
    return Decision(percent=100.0, state=state, target_percent=100.0, failsafe_reason=reason)
