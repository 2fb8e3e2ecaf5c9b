"""The fan controller's per-tick rules (pure): which sensor a GPU's curve follows, when a fan counts as
stalled, and the mode and message a tick publishes.

Everything here is a function of its arguments; the controller (controller.py) keeps the state
between ticks and does the I/O. The curve maths itself is curve.py.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuwatch.config.cooling import SensorChoice
from gpuwatch.fan.curve import Decision
from gpuwatch.model import FanMode, GpuReading


def pick_sensor(gpu: GpuReading, wanted: SensorChoice) -> str | None:
    """``auto``: junction where the GPU has one, else edge (Polaris, SI/CIK, APUs); else as configured."""
    if wanted != "auto":
        return wanted
    if gpu.temp("junction") is not None:
        return "junction"
    return "edge" if gpu.temp("edge") is not None else None


@dataclass(frozen=True)
class Stall:
    ticks: int  # consecutive ticks at 0 RPM while commanded above 0
    stalled: bool  # reached ``stall_after_ticks``: reported until the fan turns again
    started: bool  # this tick began the episode: count it (once)


def stall(ticks: int, rpm: int | None, applied_pwm: int | None, after_ticks: int, written: bool) -> Stall:
    """The stall rule: 0 RPM while driven above 0 for ``after_ticks`` ticks in a row.

    Without a tach reading, or when nothing was written (dry-run), nothing counts.
    """
    if not written or rpm is None:
        return Stall(0, False, False)
    ticks = ticks + 1 if rpm == 0 and (applied_pwm or 0) > 0 else 0
    return Stall(ticks, ticks >= after_ticks, ticks == after_ticks)


@dataclass(frozen=True)
class Verdict:
    """What one tick publishes for a GPU's fan besides the numbers."""

    mode: FanMode
    message: str | None = None
    failsafe_reason: str | None = None


def idle_verdict(up: bool, suspended: bool) -> Verdict | None:
    """A GPU that is not driven this tick: gone (nothing to write to) or runtime-suspended (nothing to
    cool, and a write would wake it); None when it is driven."""
    if not up:
        return Verdict(FanMode.FAILSAFE, "GPU not present", failsafe_reason="GPU not present")
    if suspended:
        return Verdict(FanMode.CURVE, "GPU runtime-suspended: fan left as is")
    return None


def can_rise(mode: FanMode, percent: float | None, top_percent: float, stalled: bool) -> bool:
    """Whether a hotter card would still get more air: the curve drives the fan below its top. At the
    top, in failsafe (100 %), stalled, or not driven (monitor-only, dry-run), it would not; the power
    governor acts only then (docs/power.md)."""
    return mode is FanMode.CURVE and not stalled and percent is not None and percent < top_percent
def unwritable_verdict(unresponsive: bool, problem: str) -> Verdict:
    """A tick whose fan write did not happen (it failed, or is blocked past the deadline).

    Reported as what it is: "uncontrolled", never "failsafe", since nothing ran the fan at 100 %; for
    a GPU whose reads hang too, failsafe stays (its temperature is unknown: fail hot).
    """
    if unresponsive:
        return Verdict(FanMode.FAILSAFE, f"failsafe: GPU unresponsive, and its fan cannot be written ({problem})",
                       failsafe_reason="GPU unresponsive")
    # The cause alone: the mode already says "uncontrolled" (G005's line and status print both: issue 46)
    return Verdict(FanMode.UNCONTROLLED, f"{problem}; retried every tick")


def driven_verdict(
    base: FanMode, decision: Decision, sensor: str | None, crit_c: float | None, verified: bool, stalled: bool
) -> Verdict:
    """Mode and message of a driven tick; ``base`` is the configured mode (curve or dry-run)."""
    mode, message = base, None
    if decision.failsafe_reason:
        mode, message = FanMode.FAILSAFE, f"failsafe: {decision.failsafe_reason} on {sensor or 'no sensor'}"
    elif decision.crit:
        message = f"{sensor} at or above crit {crit_c:g} °C: 100 %"
    elif not verified:
        message = "fan readback differs from the written value"
    if stalled:
        message = f"fan stalled: 0 RPM while commanded {decision.percent:.0f} %"
    return Verdict(mode, message, decision.failsafe_reason)
