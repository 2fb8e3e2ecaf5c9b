"""Counters kept across ticks for each GPU (pure): energy in joules, and seconds throttled per reason.

**Energy.** Two sources, the one in use labelled:

* ``integrated``: the trapezoid of the power reading between consecutive ticks. An interval with no
  power at either end (suspended, gone, unreadable) or longer than ``max_gap_s`` adds nothing, so a
  runtime-suspended GPU counts as 0 W while it sleeps.
* ``accumulator``: the firmware's own counter from gpu_metrics (2^-16 J per count). Only RX 6000
  (sienna_cichlid) and Navi 12 fill it; RDNA3/RDNA4 leave it 0, Navi 10/14 all ones, APUs have none.
  It is a 32-bit counter there (wraps at 65 536 J, ~3.6 min at 300 W), and its unit is documented for
  MI cards only, so it is trusted after ``TRUST_AFTER`` intervals in a row agree with the power
  reading (within 50 % + 10 W). Once trusted it is the GPU's source; an interval where it does not
  agree (a reset, a missed wrap) is integrated instead.

**Throttling.** When the reading knows its throttle reasons (gpu_metrics v1.3, v2.2+), each active
reason adds the interval that ended with that reading.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuwatch.model import THROTTLE_REASONS, EnergySource, GpuReading, replaced

TRUST_AFTER = 3
ACCUMULATOR_WRAP_J = 2.0**32 * 2.0**-16  # a u32 count of 2^-16 J
_AGREE_RATIO, _AGREE_SLACK_W, _MAX_W = 0.5, 10.0, 2000.0


@dataclass(frozen=True)
class Account:
    """One GPU's counters and what the next interval needs from the last reading."""

    at: float  # monotonic time of the last reading
    power_w: float | None
    accumulator_j: float | None
    joules: float = 0.0
    source: EnergySource | None = None
    agreeing: int = 0  # intervals in a row the accumulator agreed with the power reading
    throttled_s: tuple[tuple[str, float], ...] = ()


def step(prev: Account | None, reading: GpuReading, now: float, max_gap_s: float) -> Account:
    """The counters after ``reading``, taken at monotonic ``now``."""
    power, counter = reading.power_w, reading.energy_accumulator_j
    if prev is None:
        return Account(now, power, counter, source="integrated" if power is not None else None,
                       throttled_s=_throttled((), reading, 0.0))
    dt = now - prev.at
    usable = 0.0 < dt <= max_gap_s
    integrated = None
    if usable and power is not None and prev.power_w is not None:
        integrated = (power + prev.power_w) / 2.0 * dt
    delta = _counter_delta(prev.accumulator_j, counter) if usable else None
    agrees = delta is not None and _agrees(delta / dt, prev.power_w, power)
    agreeing = prev.agreeing + 1 if agrees else 0
    source = prev.source
    if agreeing >= TRUST_AFTER:
        source = "accumulator"
    elif source is None and power is not None:
        source = "integrated"
    added = delta if source == "accumulator" and agrees and delta is not None else integrated or 0.0
    return Account(now, power, counter, prev.joules + added, source, agreeing,
                   _throttled(prev.throttled_s, reading, dt if usable else 0.0))


def apply(account: Account, reading: GpuReading) -> GpuReading:
    """``reading`` with the counters of ``account`` (``model.replaced``: replace without ``__init__``, per GPU
    per tick)."""
    return replaced(reading, energy_joules=account.joules if account.source is not None else None,
                    energy_source=account.source, throttled_s=account.throttled_s)


def _counter_delta(before: float | None, after: float | None) -> float | None:
    """Joules between two accumulator readings; a 32-bit counter may have wrapped once, a wider one
    that went backwards was reset (no delta)."""
    if before is None or after is None:
        return None
    if after >= before:
        return after - before
    if before < ACCUMULATOR_WRAP_J:
        return after - before + ACCUMULATOR_WRAP_J
    return None


def counter_grew(before_j: float, after_j: float, seconds: float) -> float | None:
    """Joules a trusted firmware counter grew by over ``seconds`` nobody read it (a daemon restart,
    receipts across it: publish/receipt_resume.py); None when that is not known: it went back (a reset, a
    wrap), more than ``_MAX_W`` on average, or a 32-bit counter could have wrapped back past where it was."""
    if after_j < before_j or after_j - before_j > _MAX_W * seconds:
        return None
    if before_j < ACCUMULATOR_WRAP_J and after_j < ACCUMULATOR_WRAP_J and _MAX_W * seconds >= ACCUMULATOR_WRAP_J:
        return None  # 32 bits wrap in 33 s at _MAX_W: a longer gap may hide whole turns
    return after_j - before_j


def _agrees(implied_w: float, before_w: float | None, after_w: float | None) -> bool:
    """A counter that does not move is not counting (a GPU always draws power)."""
    if implied_w <= 0:
        return False
    if before_w is None or after_w is None:
        return implied_w <= _MAX_W
    reference = (before_w + after_w) / 2.0
    return abs(implied_w - reference) <= _AGREE_RATIO * reference + _AGREE_SLACK_W


def _throttled(totals: tuple[tuple[str, float], ...], reading: GpuReading, dt: float) -> tuple[tuple[str, float], ...]:
    if reading.throttle_reasons is None:
        return totals
    seconds = dict(totals) or dict.fromkeys(THROTTLE_REASONS, 0.0)
    for reason in reading.throttle_reasons:
        seconds[reason] = seconds.get(reason, 0.0) + dt
    return tuple(seconds.items())
