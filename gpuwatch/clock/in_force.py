"""Whether a ceiling takes effect, judged by the clock the card runs at (pure; issue 49 item 2).

A read of ``pp_od_clk_voltage`` prints the driver's edit buffer, not what the firmware runs (od_table.py), and
RDNA3 firmware sometimes takes a new maximum and keeps running above it (amdgpu-clocks #73, drm/amd #3625,
LACT #520). So a ceiling is verified by the shader clock the card runs at, under load: gpu_metrics'
current and average gfxclk (``GpuReading.sclk_hz``, ``sclk_average_hz``), else the ``*`` line of
``pp_dpm_sclk``. Idle, a card runs low whatever its ceiling: nothing is concluded then.

The controller re-commits a ceiling the card still runs above ``SETTLE_S`` after its commit, once; still
above ``SETTLE_S`` after a later commit (that one, or the law's next step), the ceiling is reported as not
taking effect (status, one log line) and the pause rung may act. A card seen at or under its ceiling under
load clears both.
"""

from __future__ import annotations

from typing import Literal

from gpuwatch.model import GpuReading

# The firmware answers a new maximum within a DPM interval (milliseconds); two ticks cover a slow one and a
# gpu_metrics average, and stay under the law's dwell between steps down (law.DWELL_DOWN_S).
SETTLE_S = 2.0
# Busy at least this much: the card runs as fast as its ceiling and power let it, so above means ignored.
LOAD_RATIO = 0.5
# Above by more than this: DPM's own overshoot and the averaging of gpu_metrics are not a ceiling ignored.
MARGIN_RATIO, MARGIN_MHZ = 0.02, 25.0

Verdict = Literal["in_force", "above", "unknown"]


def running_mhz(reading: GpuReading, dpm_current_mhz: float | None) -> float | None:
    """The shader clock the card runs at: the lower of gpu_metrics' current and average gfxclk (one sample of
    a clock that swings is not taken for the ceiling ignored), else pp_dpm_sclk's current line."""
    values = [hz / 1e6 for hz in (reading.sclk_hz, reading.sclk_average_hz) if hz is not None and hz > 0]
    return min(values) if values else dpm_current_mhz



def operating_mhz(gpu: GpuReading) -> float | None:
    """The clock the law starts its steps from: gpu_metrics' average gfxclk (smu_v13_0_0_get_gpu_metrics fills
    average_gfxclk_frequency), else the current one (hwmon freq1_input, amdgpu_hwmon_show_sclk; NVML's graphics
    clock); 0 while the card is idle (busy under LOAD_RATIO: its clock then says nothing of what a ceiling does).
    An RDNA3 card runs below its overdrive maximum (LACT #1068): the first ceilings above it change nothing."""
    if gpu.gpu_busy_ratio is not None and gpu.gpu_busy_ratio < LOAD_RATIO:
        return 0.0
    hz = gpu.sclk_average_hz if gpu.sclk_average_hz is not None else gpu.sclk_hz
    return None if hz is None or hz <= 0 else hz / 1e6


def verdict(ceiling_mhz: float, running: float | None, busy_ratio: float | None) -> Verdict:
    """``above``: under load and over the ceiling by more than the margin; ``in_force``: under load and at or
    under it; ``unknown``: idle, or the clock or the load unread."""
    if running is None or busy_ratio is None or busy_ratio < LOAD_RATIO:
        return "unknown"
    margin = max(MARGIN_MHZ, MARGIN_RATIO * ceiling_mhz)
    return "above" if running > ceiling_mhz + margin else "in_force"
