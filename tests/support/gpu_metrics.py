"""gpu_metrics tables for tests, built from the kernel's struct definitions; no captured bytes.

Every table is what the kernel makes (smu_cmn_init_soft_gpu_metrics): ``size`` bytes of 0xFF, the
header, then the fields the ASIC fills. Sizes and offsets below were written down by hand from
``struct gpu_metrics_vF_C`` in kgd_pp_interface.h (Linux 6.11; v1.6-v1.8 from the patches that add
them), field by field with C's natural alignment, independently of gpuwatch/gpus/gpu_metrics_layouts.py,
so an offset wrong on either side fails the decoder tests.

``CARD_TABLES`` holds one v1.3/v2.1/v3.0 table per real capture in tests/fixtures/amdgpu whose card
publishes one, with values chosen to equal that capture's own hwmon and sysfs files (°C, W, MHz, mV,
RPM; APUs in centi-°C and mW): these are built, not captured, and say so in tests/fixtures/amdgpu/README.md.
"""

from __future__ import annotations

import struct

# (format, content) -> (sizeof, {field: (offset, struct code)}) for the fields tests set.
_DGPU_1_1 = {
    "temperature_edge": (4, "H"), "temperature_hotspot": (6, "H"), "temperature_mem": (8, "H"),
    "temperature_vrgfx": (10, "H"), "temperature_vrsoc": (12, "H"), "temperature_vrmem": (14, "H"),
    "average_gfx_activity": (16, "H"), "average_umc_activity": (18, "H"), "average_socket_power": (22, "H"),
    "energy_accumulator": (24, "Q"), "system_clock_counter": (32, "Q"), "average_gfxclk_frequency": (40, "H"),
    "average_uclk_frequency": (44, "H"), "current_gfxclk": (54, "H"), "current_socclk": (56, "H"),
    "current_uclk": (58, "H"), "throttle_status": (68, "I"), "current_fan_speed": (72, "H"),
    "pcie_link_width": (74, "H"), "pcie_link_speed": (76, "H"),
}
_MI_HEAD = {"temperature_hotspot": (4, "H"), "temperature_mem": (6, "H"), "temperature_vrsoc": (8, "H"),
            "curr_socket_power": (10, "H"), "average_gfx_activity": (12, "H"), "average_umc_activity": (14, "H")}
_MI_1_7 = {**_MI_HEAD, "energy_accumulator": (24, "Q"), "system_clock_counter": (32, "Q"),
           "pcie_link_width": (68, "H"), "pcie_link_speed": (70, "H"), "current_gfxclk": (296, "H"),
           "current_socclk": (312, "H"), "current_uclk": (336, "H")}
_APU_2_1 = {
    "temperature_gfx": (4, "H"), "temperature_soc": (6, "H"), "average_gfx_activity": (28, "H"),
    "system_clock_counter": (32, "Q"), "average_socket_power": (40, "H"), "average_gfxclk_frequency": (64, "H"),
    "average_socclk_frequency": (66, "H"), "average_uclk_frequency": (68, "H"), "average_fclk_frequency": (70, "H"),
    "current_gfxclk": (76, "H"), "current_socclk": (78, "H"), "current_uclk": (80, "H"), "throttle_status": (108, "I"),
}
LAYOUTS: dict[tuple[int, int], tuple[int, dict[str, tuple[int, str]]]] = {
    (1, 0): (80, {
        "system_clock_counter": (8, "Q"), "temperature_edge": (16, "H"), "temperature_hotspot": (18, "H"),
        "temperature_mem": (20, "H"), "temperature_vrgfx": (22, "H"), "temperature_vrsoc": (24, "H"),
        "temperature_vrmem": (26, "H"), "average_gfx_activity": (28, "H"), "average_umc_activity": (30, "H"),
        "average_socket_power": (34, "H"), "energy_accumulator": (36, "I"), "average_gfxclk_frequency": (40, "H"),
        "average_uclk_frequency": (44, "H"), "current_gfxclk": (54, "H"), "current_socclk": (56, "H"),
        "current_uclk": (58, "H"), "throttle_status": (68, "I"), "current_fan_speed": (72, "H"),
        "pcie_link_width": (74, "B"), "pcie_link_speed": (75, "B"),
    }),
    (1, 1): (96, _DGPU_1_1),
    (1, 2): (104, _DGPU_1_1),
    (1, 3): (120, {**_DGPU_1_1, "voltage_soc": (104, "H"), "voltage_gfx": (106, "H"), "voltage_mem": (108, "H"),
                   "indep_throttle_status": (112, "Q")}),
    (1, 4): (288, {**_MI_HEAD, "energy_accumulator": (24, "Q"), "system_clock_counter": (32, "Q"),
                   "throttle_status": (40, "I"), "pcie_link_width": (48, "H"), "pcie_link_speed": (50, "H"),
                   "current_gfxclk": (240, "H"), "current_socclk": (256, "H"), "current_uclk": (280, "H")}),
    (1, 5): (360, {**_MI_HEAD, "energy_accumulator": (88, "Q"), "system_clock_counter": (96, "Q"),
                   "throttle_status": (104, "I"), "pcie_link_width": (112, "H"), "pcie_link_speed": (114, "H"),
                   "current_gfxclk": (312, "H"), "current_socclk": (328, "H"), "current_uclk": (352, "H")}),
    (1, 6): (1664, {**_MI_HEAD, "energy_accumulator": (16, "Q"), "system_clock_counter": (24, "Q"),
                    "pcie_link_width": (60, "H"), "pcie_link_speed": (62, "H"), "current_gfxclk": (264, "H"),
                    "current_socclk": (280, "H"), "current_uclk": (304, "H")}),
    (1, 7): (2208, _MI_1_7),
    (1, 8): (3872, _MI_1_7),
    (2, 0): (120, {
        "system_clock_counter": (8, "Q"), "temperature_gfx": (16, "H"), "temperature_soc": (18, "H"),
        "average_gfx_activity": (40, "H"), "average_socket_power": (44, "H"), "average_gfxclk_frequency": (68, "H"),
        "average_socclk_frequency": (70, "H"), "average_uclk_frequency": (72, "H"),
        "average_fclk_frequency": (74, "H"), "current_gfxclk": (80, "H"), "current_socclk": (82, "H"),
        "current_uclk": (84, "H"), "throttle_status": (112, "I"),
    }),
    (2, 1): (120, _APU_2_1),
    (2, 2): (128, {**_APU_2_1, "indep_throttle_status": (120, "Q")}),
    (2, 3): (152, {**_APU_2_1, "indep_throttle_status": (120, "Q")}),
    (2, 4): (168, {**_APU_2_1, "indep_throttle_status": (120, "Q"), "average_soc_voltage": (154, "H"),
                   "average_gfx_voltage": (156, "H")}),
    (3, 0): (264, {
        "temperature_gfx": (4, "H"), "temperature_soc": (6, "H"), "average_gfx_activity": (42, "H"),
        "system_clock_counter": (104, "Q"), "average_socket_power": (112, "I"),
        "average_gfxclk_frequency": (174, "H"), "average_socclk_frequency": (176, "H"),
        "average_fclk_frequency": (182, "H"), "average_uclk_frequency": (186, "H"),
    }),
}


def table(revision: tuple[int, int], **values: int) -> bytes:
    """A table of layout ``revision`` holding ``values`` (raw integers, the struct's units), the rest 0xFF."""
    size, offsets = LAYOUTS[revision]
    data = bytearray(b"\xff" * size)
    struct.pack_into("<HBB", data, 0, size, *revision)
    for name, value in values.items():
        offset, code = offsets[name]
        struct.pack_into("<" + code, data, offset, value)
    return bytes(data)


def dgpu_v1_3(edge: int, hotspot: int, mem: int, power: int, busy: int, sclk: int, mclk: int, fan: int,
              vddgfx: int, link: tuple[int, int] = (16, 160), vr: tuple[int, int, int] = (0, 0, 0),
              indep: int = 0, throttle: int = 0, **more: int) -> bytes:
    """A consumer dGPU's v1.3 table (whole °C, W, %, MHz, RPM, mV; link = (lanes, 0.1 GT/s))."""
    return table((1, 3), temperature_edge=edge, temperature_hotspot=hotspot, temperature_mem=mem,
                 temperature_vrgfx=vr[0], temperature_vrsoc=vr[1], temperature_vrmem=vr[2],
                 average_gfx_activity=busy, average_umc_activity=0, average_socket_power=power,
                 average_gfxclk_frequency=sclk, current_gfxclk=sclk, current_uclk=mclk,
                 average_uclk_frequency=mclk, throttle_status=throttle, current_fan_speed=fan,
                 pcie_link_width=link[0], pcie_link_speed=link[1], voltage_gfx=vddgfx, indep_throttle_status=indep,
                 **{"energy_accumulator": 0, **more})


# One table per capture (tests/fixtures/amdgpu/cards/<name>.json), its values equal to the capture's files.
CARD_TABLES: dict[str, bytes] = {
    # RDNA2 fills the energy accumulator (2^-16 J counts); VR temperatures as the board reports them.
    "navi21-rx6900xt-sapphire-nitro": dgpu_v1_3(56, 59, 54, 36, 3, 500, 1000, 0, 775, vr=(49, 49, 51),
                                                energy_accumulator=17_000_000),
    # RDNA3 at idle: the firmware's TEMP_HOTSPOT bit (36) is set although the hotspot is at 61 °C (the
    # quirk), and here PPT0 (bit 0) too: the card holds its power limit.
    "navi31-rx7900xtx-sapphire-nitro": dgpu_v1_3(53, 61, 68, 68, 3, 31, 1249, 0, 686, vr=(40, 38, 44),
                                                 indep=1 << 36 | 1, throttle=1 << 16 | 1 << 1),
    "navi32-rx7800xt-powercolor-hellhound": dgpu_v1_3(24, 31, 48, 32, 2, 2011, 456, 868, 985, vr=(34, 32, 34)),
    # A laptop: no VR sensors (0), the hotspot quirk bit at 54 °C and 1 W, a x8 link.
    "navi33-rx7600s-laptop": dgpu_v1_3(53, 54, 60, 1, 0, 0, 96, 0, 0, link=(8, 160), indep=1 << 36, throttle=0b10),
    "navi48-rx9070-sapphire-pulse": dgpu_v1_3(48, 52, 72, 49, 25, 900, 1124, 1944, 790, vr=(46, 49, 54)),
    # RDNA4 on a launch-era kernel: hwmon has no fan1_input, the table has the fan (zero-RPM at idle).
    "navi48-rx9070xt-early-kernel": dgpu_v1_3(39, 42, 62, 19, 9, 59, 96, 0, 696, vr=(43, 43, 44)),
    "apu-phoenix-lenovo": table((2, 1), temperature_gfx=2500, temperature_soc=2737, average_gfx_activity=0,
                                average_socket_power=3103, average_gfxclk_frequency=800, average_uclk_frequency=400,
                                average_fclk_frequency=400, throttle_status=0),
    "apu-strixpoint-lenovo": table((3, 0), temperature_gfx=3800, temperature_soc=4062, average_gfx_activity=3,
                                   average_socket_power=9087, average_gfxclk_frequency=848,
                                   average_uclk_frequency=836, average_fclk_frequency=1162),
}
