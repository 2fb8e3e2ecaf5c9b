"""The power governor's per-tick rules around the law (pure): whether the fan can still help, the limits of a
cap range, and the throughput estimate it publishes (the headroom it holds: gpuwatch.limits).

Everything here is a function of its arguments; the controller (controller.py) keeps the state between
ticks and does the I/O. The control law itself is governor.py.
"""

from __future__ import annotations

from gpuwatch.model import FanState
from gpuwatch.power.governor import BOUND_TOLERANCE_RATIO


def fan_can_rise(fan: FanState | None) -> bool:
    """More air is still possible. A GPU without a fan state (NVIDIA, ``fan.mode = "off"``) has no fan
    gpuwatch can raise, so the governor may act on it."""
    return fan is not None and fan.can_rise


def cap_range_problem(original_w: float, floor_w: float, cap_max_w: float | None) -> str | None:
    """Why a cap range leaves the governor nothing to do; None when it has room below the original."""
    if floor_w >= original_w:
        return (f"no room below the cap: {original_w:g} W is already at or under the floor {floor_w:g} W "
                "(power1_cap_min or power.floor_percent)")
    if cap_max_w is not None and cap_max_w and original_w > cap_max_w:
        return f"the cap {original_w:g} W is above power1_cap_max {cap_max_w:g} W: the board reports nonsense"
    return None


def binds(power_w: float | None, cap_w: float, default_w: float) -> bool:
    """The cap is what limits the card: it draws within the law's tolerance of it."""
    return power_w is not None and power_w >= cap_w - BOUND_TOLERANCE_RATIO * default_w


def throughput_kept_ratio(cap_w: float | None, original_w: float | None, power_w: float | None,
                          default_w: float) -> float | None:
    """Training speed kept under the cap, estimated as (cap / original) ** (1/3) while the cap binds, else 1.

    Near the top of the voltage/frequency curve the voltage rises with the clock, so dynamic power
    P = a*C*V^2*f grows about as f^3 and the clock as P^(1/3) (docs/power.md gives sources and limits).
    """
    if cap_w is None or not original_w:
        return None
    if cap_w >= original_w or not binds(power_w, cap_w, default_w):
        return 1.0
    return float((cap_w / original_w) ** (1.0 / 3.0))
