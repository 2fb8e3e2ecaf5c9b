"""A simulated Navi 31-like card (RX 7900 XTX class): the high cap floor and the clock files of RDNA3.

What it changes from the RX 5600 XT (navi10.py), each from the real capture ``navi31-rx7900xtx-sapphire-nitro``
(tests/fixtures/amdgpu/cards): a 290 W default cap whose floor, ``power1_cap_min``, is 261 W (90 %: since
Linux 6.7 amdgpu refuses caps below the board's minimum, issue 36), up to 333 W; crit 100/110/108 °C; the PCI
id 1002:744C. The clock interfaces of RDNA3 (smu_v13_0_0_ppt.c): ``pp_dpm_sclk`` with two lines (min, max),
``power_dpm_force_performance_level`` and, the overdrive feature enabled (amdgpu.ppfeaturemask bit 0x4000),
the min/max ``pp_od_clk_voltage`` table that takes ``s 1 <MHz>`` then ``c`` (Documentation/gpu/amdgpu/
thermal.rst, pp_od_clk_voltage; the LACT write log of that capture, ``s 1 2850`` and ``c``).

Kept from the RX 5600 XT so the rest of the simulator is unchanged: the pwm1/pwm1_enable fan interface (a real
RDNA3 card drives its fan through gpu_od/fan_ctrl, which the simulator does not model), the sensor layout and
the gpu_metrics table. Its physics are the RX 5600 XT's scaled to 290 W (``PARAMS``): the same temperatures
at the same fan duty, the same time constants; its load would draw more than the cap at the top clock (power-limited).
"""

from __future__ import annotations

from gpuwatch.sim import navi10
from gpuwatch.sim.physics import ThermalParams

POWER_CAP_UW, POWER_CAP_MIN_UW, POWER_CAP_MAX_UW = 290_000_000, 261_000_000, 333_000_000
CRIT_C = {"edge": 100, "junction": 110, "mem": 108}
# The overdrive table's gfx clock: the card's range (OD_SCLK 0 and 1) and what the interface takes (OD_RANGE).
SCLK_MIN_MHZ, SCLK_MAX_MHZ = 500, 2500
OD_SCLK_RANGE_MHZ = (500, 3150)
MCLK_MHZ = 1249
_SCALE = POWER_CAP_UW / navi10.POWER_CAP_UW
# The load's demand at the overdrive maximum is above the default cap: like a real RX 7900 XTX, the card is
# power-limited and runs at ~91 % of its maximum clock (physics.operating_clock_ratio; ~2680 of 2940 MHz there,
# LACT #1068, 2283 of 2500 MHz here). At the default cap its power, temperatures and speed are those of a 290 W card.
LOAD_POWER_W = 365.0
PARAMS = ThermalParams(
    idle_power_w=50.0, load_power_w=LOAD_POWER_W, passive_w_per_k=0.8 * _SCALE, fan_w_per_k=4.0 * _SCALE,
    heat_capacity_j_per_k=200.0 * _SCALE, junction_k_per_w=0.11 / _SCALE, mem_k_per_w=0.03 / _SCALE,
)


def od_table(sclk_min_mhz: float, sclk_max_mhz: float) -> str:
    """``pp_od_clk_voltage`` as smu_v13_0_0_print_clk_levels prints it (OD_SCLK, OD_MCLK, the voltage offset,
    OD_RANGE)."""
    low, high = OD_SCLK_RANGE_MHZ
    return (f"OD_SCLK:\n0: {sclk_min_mhz:.0f}Mhz\n1: {sclk_max_mhz:.0f}Mhz\nOD_MCLK:\n0: 97Mhz\n1: {MCLK_MHZ}MHz\n"
            f"OD_VDDGFX_OFFSET:\n0mV\nOD_RANGE:\nSCLK:     {low}Mhz       {high}Mhz\nMCLK:      97Mhz       1500Mhz\n")


def dpm_sclk(ceiling_mhz: float) -> str:
    """``pp_dpm_sclk`` of RDNA3: the range's two ends (no trailing space on RDNA3's sclk lines)."""
    return f"0: {SCLK_MIN_MHZ}Mhz\n1: {ceiling_mhz:.0f}Mhz\n"


def card_files(fan1_input: bool = True) -> dict[str, str]:
    """Every file of one card: the RX 5600 XT's, with the Navi 31 cap range, crit, ids and clock files."""
    files = navi10.card_files(fan1_input)
    hw = f"device/hwmon/{navi10.HWMON}"
    files["device/uevent"] = files["device/uevent"].replace("731F", "744C")
    files["device/device"] = "0x744c\n"
    files.update({
        f"{hw}/power1_cap": f"{POWER_CAP_UW}\n", f"{hw}/power1_cap_default": f"{POWER_CAP_UW}\n",
        f"{hw}/power1_cap_min": f"{POWER_CAP_MIN_UW}\n", f"{hw}/power1_cap_max": f"{POWER_CAP_MAX_UW}\n",
        "device/pp_dpm_sclk": dpm_sclk(SCLK_MAX_MHZ),
        "device/power_dpm_force_performance_level": "auto\n",
        "device/pp_od_clk_voltage": od_table(SCLK_MIN_MHZ, SCLK_MAX_MHZ),
    })
    for label, index in navi10.TEMP_INDEX.items():
        files[f"{hw}/temp{index}_crit"] = f"{CRIT_C[label] * 1000}\n"
        files[f"{hw}/temp{index}_emergency"] = f"{(CRIT_C[label] + 5) * 1000}\n"
    return files
