"""`gpuwatch curve`: the configured fan curve as a table and a small terminal plot (pure text)."""

from __future__ import annotations

from gpuwatch.config.cooling import FanConfig
from gpuwatch.fan.curve import apply_floor, interpolate

_ROWS = 10
_T_MIN_C, _T_MAX_C, _T_STEP_C = 30, 110, 2


def render_curve(fan: FanConfig) -> str:
    points = [(float(t), float(p)) for t, p in fan.curve]
    lines = [f"fan curve (sensor {fan.sensor}, floor {fan.floor_percent:g} %, dead band {fan.dead_band_c:g} °C, "
             f"spindown {fan.spindown_delay_s:g} s)", "", "  temp °C   curve %   applied %"]
    for temp_c, percent in points:
        applied = apply_floor(percent, fan.floor_percent)
        lines.append(f"  {temp_c:7g}   {percent:7g}   {applied:9g}")
    lines.append("  at or above the sensor's crit temperature: 100 %")
    lines.append("")
    temps = list(range(_T_MIN_C, _T_MAX_C + 1, _T_STEP_C))
    speeds = [apply_floor(interpolate(points, t), fan.floor_percent) for t in temps]
    for row in range(_ROWS, 0, -1):
        level = row * 100 / _ROWS
        cells = "".join("#" if s >= level - 100 / _ROWS / 2 else " " for s in speeds)
        lines.append(f"{level:5.0f}% |{cells}")
    lines.append("       +" + "-" * len(temps))
    axis = "".join(f"{t:<5d}" for t in temps[::5])
    lines.append("        " + axis.rstrip() + " °C")
    return "\n".join(lines) + "\n"
