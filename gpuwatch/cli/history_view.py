"""`gpuwatch status --history`: the /history document drawn as terminal sparklines, one per GPU and value
(temperature, power, fan) and one per run (steps/s), with the events of the range (pure)."""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any

from gpuwatch.cli.text import BOLD, painter, safe

BARS = "▁▂▃▄▅▆▇█"
WIDTH = 60  # columns of a sparkline; each is the mean of its share of the time axis (a temperature's maximum)
EVENTS_SHOWN = 8
# (series, label, unit, whether a column is its maximum: the hottest is the one that matters for a temperature)
GPU_LINES = (("hottest_c", "temp", "°C", True), ("power_w", "power", "W", False), ("fan_pct", "fan", "%", False))


def sparkline(values: Sequence[float | None], times: Sequence[float], start: float, end: float,
              width: int = WIDTH, peak: bool = False) -> str:
    """``values`` (at ``times``) on a time axis from ``start`` to ``end`` in ``width`` columns, scaled between their
    minimum and maximum; a column without a value (the daemon stopped, or not started yet) is a space."""
    columns = _columns(values, times, start, end, width, peak)
    known = [v for v in columns if v is not None]
    if not known:
        return " " * len(columns)
    low, high = min(known), max(known)
    span = high - low
    return "".join(" " if v is None else BARS[0 if span == 0 else min(len(BARS) - 1, int((v - low) / span * len(BARS)))]
                   for v in columns)


def _columns(values: Sequence[float | None], times: Sequence[float], start: float, end: float, width: int,
             peak: bool) -> list[float | None]:
    """Each column's values (their maximum with ``peak``, else their mean), None where it has none."""
    parts: list[list[float]] = [[] for _ in range(width)]
    length = max(end - start, 1e-9)
    for t, v in zip(times, values, strict=False):
        if v is not None and start <= t <= end:
            parts[min(width - 1, int((t - start) / length * width))].append(v)
    return [(max(part) if peak else sum(part) / len(part)) if part else None for part in parts]


def render(doc: dict[str, Any], color: bool = False, width: int = WIDTH, note: str | None = None) -> str:
    paint = painter(color)
    t = doc.get("t") or []
    span = f", {_clock(t[0])} to {_clock(t[-1])}" if t else ""
    lines = [paint(f"history, last {safe(doc.get('range'))}", BOLD)
             + f" ({_step(doc.get('step_s'))} steps, {len(t)} points{span})"]
    if note:
        lines.append(note)
    if not t:
        lines.append("no points in this range yet")
    # The axis: from the first point to the document's now (a stop shows as blank columns).
    now = doc.get("now_unix")
    axis = (float(t[0]) if t else 0.0, float(now) if isinstance(now, (int, float)) else 0.0)
    for gpu, series in sorted((doc.get("gpus") or {}).items()):
        lines.append(paint(f"GPU {safe(gpu)}", BOLD))
        for key, label, unit, peak in GPU_LINES:
            lines.append(_line(label, series.get(key) or [], t, axis, unit, width, peak))
    for run, series in sorted((doc.get("runs") or {}).items()):
        lines.append(paint(f"run {safe(run)}", BOLD))
        lines.append(_line("steps/s", series.get("steps_per_s") or [], t, axis, "", width, False))
    events = doc.get("events") or []
    if events:
        lines.append(paint("events", BOLD) + (f" (the last {EVENTS_SHOWN} of {len(events)})"
                                             if len(events) > EVENTS_SHOWN else ""))
        lines += [f"  {_clock(e.get('unix'))}  {safe(str(e.get('text')))}" for e in events[-EVENTS_SHOWN:]]
    return "\n".join(lines) + "\n"


def _line(label: str, values: Sequence[float | None], times: Sequence[float], axis: tuple[float, float], unit: str,
          width: int, peak: bool) -> str:
    known = [v for v in values if isinstance(v, (int, float)) and math.isfinite(v)]
    numbers = [v if isinstance(v, (int, float)) and math.isfinite(v) else None for v in values]
    summary = "no value" if not known else (f"{_n(min(known))}–{_n(max(known))}{unit}, now {_n(known[-1])}{unit}"
                                            if values and values[-1] is not None else
                                            f"{_n(min(known))}–{_n(max(known))}{unit}")
    return f"  {label:<8}{sparkline(numbers, times, axis[0], max(axis), width, peak)}  {summary}"


def _n(value: float) -> str:
    return f"{value:.0f}" if abs(value) >= 10 else f"{value:.1f}"


def _step(step_s: Any) -> str:
    return f"{step_s:g} s" if isinstance(step_s, (int, float)) else "?"


def _clock(unix: Any) -> str:
    if not isinstance(unix, (int, float)):
        return "?"
    return time.strftime("%a %H:%M:%S", time.localtime(unix))
