"""Throttle reasons from gpu_metrics' ``indep_throttle_status`` (pure).

The bits are the kernel's ASIC-independent ``SMU_THROTTLER_*`` numbers (amdgpu_smu.h: power 0-7,
current 16-23, temperature 32-47, other 56-57), present in tables v1.3 and v2.2+. Older and MI/APU
v3.0 tables carry only the firmware's own word, numbered differently per SMU generation, so no
reasons are derived from them (the raw word is still published).

Quirk: RDNA3 (SMU 13.0.0/13.0.7/13.0.10) and RDNA4 (SMU 14.0.2/14.0.3) firmware sets TEMP_HOTSPOT
(bit 36) nearly always, at idle too (drm/amd#3251, LACT#307, MangoHud#1243, ROCm/rocm-systems#11781;
a real RX 7600S table shows it at 54 °C and 1 W). As libdrm-amdgpu-sys (commit ad7d3c7), LACT and
MangoHud do, the bit is dropped while the hotspot is below 90 °C, for every v1.3 table (on RDNA1/2 the
bit comes from a firmware status word and is not affected below 90 °C anyway). On those cards a
thermal reason therefore means "hotspot at 90 °C or more", not a firmware-confirmed throttle.
"""

from __future__ import annotations

from functools import lru_cache

from gpuwatch.model import THROTTLE_REASONS as REASONS

HOTSPOT_BIT = 36
HOTSPOT_QUIRK_BELOW_C = 90.0
FLAGS: dict[int, str] = {
    0: "PPT0", 1: "PPT1", 2: "PPT2", 3: "PPT3", 4: "SPL", 5: "FPPT", 6: "SPPT", 7: "SPPT_APU",
    16: "TDC_GFX", 17: "TDC_SOC", 18: "TDC_MEM", 19: "TDC_VDD", 20: "TDC_CVIP", 21: "EDC_CPU", 22: "EDC_GFX",
    23: "APCC",
    32: "TEMP_GPU", 33: "TEMP_CORE", 34: "TEMP_MEM", 35: "TEMP_EDGE", 36: "TEMP_HOTSPOT", 37: "TEMP_SOC",
    38: "TEMP_VR_GFX", 39: "TEMP_VR_SOC", 40: "TEMP_VR_MEM0", 41: "TEMP_VR_MEM1", 42: "TEMP_LIQUID0",
    43: "TEMP_LIQUID1", 44: "VRHOT0", 45: "VRHOT1", 46: "PROCHOT_CPU", 47: "PROCHOT_GFX",
    56: "PPM", 57: "FIT",
}


def reason_of(bit: int) -> str:
    """The group a SMU_THROTTLER bit belongs to, as the kernel's comments group them."""
    if bit < 16:
        return "power"
    if bit < 32:
        return "current"
    if bit < 56:
        return "thermal"
    return "other"


def flags(indep_status: int, junction_c: float | None, hotspot_quirk: bool) -> tuple[str, ...]:
    """The named bits set in ``indep_status``; with ``hotspot_quirk``, TEMP_HOTSPOT only at 90 °C or more
    (an unknown hotspot temperature keeps the bit: no reading to disprove it)."""
    hotspot_dropped = hotspot_quirk and junction_c is not None and junction_c < HOTSPOT_QUIRK_BELOW_C
    return _flags(indep_status & ~(1 << HOTSPOT_BIT) if hotspot_dropped else indep_status)


@lru_cache(maxsize=64)  # the same few words tick after tick (every GPU's, each tick): named once
def _flags(status: int) -> tuple[str, ...]:
    return tuple(FLAGS.get(bit, f"BIT{bit}") for bit in range(64) if status >> bit & 1)


_BITS = {name: bit for bit, name in FLAGS.items()}


@lru_cache(maxsize=64)
def reasons(flag_names: tuple[str, ...]) -> tuple[str, ...]:
    """The groups (power, current, thermal, other) of ``flag_names``, in REASONS order."""
    groups = {reason_of(_BITS[name] if name in _BITS else int(name[3:])) for name in flag_names}
    return tuple(reason for reason in REASONS if reason in groups)
