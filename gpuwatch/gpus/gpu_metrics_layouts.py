"""The layouts of amdgpu's ``device/gpu_metrics`` table, written down in the kernel's struct order.

Source: ``struct gpu_metrics_vF_C`` in drivers/gpu/drm/amd/include/kgd_pp_interface.h (v1.0-v3.0 as in
Linux 6.11; v1.6 final, v1.7 and v1.8 from the patches that added them: "drm/amd/pm: Add
gpu_metrics_v1_6/7/8", Linux 6.13 and 6.15). The first Linux release of each is in ``LAYOUTS``.

The structs are *not* packed: C's natural alignment applies (u16 at even, u32 at 4, u64 at 8 byte
offsets, the size rounded up to the largest alignment), and v1.0, v2.0 and v3.0 rely on it (implicit
padding after the header). So the offsets are computed here from the field order the way gcc does on
x86-64 and arm64; a Python ``struct`` format string with ``<`` would pack them and be wrong. The kernel
fills the whole table with 0xFF before writing the fields an ASIC knows, so a field of all ones is
"not supported" (smu_cmn_init_soft_gpu_metrics). tests/gpus/test_gpu_metrics.py checks every size
and the offsets of every field gpuwatch decodes against numbers taken from the header by hand.

v1.9 (2025, MI-class only) is a self-describing attribute stream, not a struct: it is not listed, so
it reads as an unknown revision.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from dataclasses import dataclass

_ALIGN = {"B": 1, "H": 2, "I": 4, "Q": 8}
HEADER_SIZE = 4  # struct metrics_table_header: u16 structure_size, u8 format_revision, u8 content_revision


@dataclass(frozen=True)
class Field:
    name: str
    code: str  # struct code (B, H, I, Q); "x" for an opaque array of structs
    offset: int
    size: int  # of one element
    count: int


@dataclass(frozen=True)
class Layout:
    format_revision: int
    content_revision: int
    since: str  # first Linux release that publishes it
    size: int
    fields: Mapping[str, Field]

    @property
    def revision(self) -> str:
        return f"{self.format_revision}.{self.content_revision}"


def _layout(frev: int, crev: int, since: str, spec: str) -> Layout:
    """``spec``: the struct's fields after the header, in order. A type token (B, H, I, Q, or X<bytes>
    for an array of 8-byte aligned structs) applies to the names that follow it; ``name[n]`` is an array."""
    fields: dict[str, Field] = {}
    offset, align_max, code, size, align = HEADER_SIZE, 2, "H", 2, 2
    for token in spec.split():
        if token in _ALIGN:
            code, size, align = token, _ALIGN[token], _ALIGN[token]
            continue
        if token.startswith("X"):
            code, size, align = "x", int(token[1:]), 8
            continue
        name, _, rest = token.partition("[")
        count = int(rest.rstrip("]")) if rest else 1
        offset = -(-offset // align) * align
        fields[name] = Field(name, code, offset, size, count)
        offset += size * count
        align_max = max(align_max, align)
    return Layout(frev, crev, since, -(-offset // align_max) * align_max, fields)


_TEMPS_DGPU = (
    "H temperature_edge temperature_hotspot temperature_mem temperature_vrgfx temperature_vrsoc temperature_vrmem"
)
_ACTIVITY_DGPU = "H average_gfx_activity average_umc_activity average_mm_activity average_socket_power"
_CLOCKS_DGPU = (
    "H average_gfxclk_frequency average_socclk_frequency average_uclk_frequency average_vclk0_frequency"
    " average_dclk0_frequency average_vclk1_frequency average_dclk1_frequency"
    " current_gfxclk current_socclk current_uclk current_vclk0 current_dclk0 current_vclk1 current_dclk1"
)
_V1_1 = (
    f"{_TEMPS_DGPU} {_ACTIVITY_DGPU} Q energy_accumulator system_clock_counter {_CLOCKS_DGPU}"
    " I throttle_status H current_fan_speed pcie_link_width pcie_link_speed padding"
    " I gfx_activity_acc mem_activity_acc H temperature_hbm[4]"
)
_V1_2 = f"{_V1_1} Q firmware_timestamp"
_V1_3 = f"{_V1_2} H voltage_soc voltage_gfx voltage_mem padding1 Q indep_throttle_status"
# MI-class (v1.4+): hotspot/mem/vrsoc, per-instance clock arrays, XGMI and PCIe accumulators.
_MI_HEAD = (
    "H temperature_hotspot temperature_mem temperature_vrsoc curr_socket_power"
    " average_gfx_activity average_umc_activity"
)
_MI_PCIE = (
    "H pcie_link_width pcie_link_speed xgmi_link_width xgmi_link_speed I gfx_activity_acc mem_activity_acc"
    " Q pcie_bandwidth_acc pcie_bandwidth_inst pcie_l0_to_recov_count_acc pcie_replay_count_acc"
    " pcie_replay_rover_count_acc"
)
_MI_XGMI = "Q xgmi_read_data_acc[8] xgmi_write_data_acc[8]"
_MI_CLOCKS = "H current_gfxclk[8] current_socclk[4] current_vclk0[4] current_dclk0[4] current_uclk"
_MI_RESIDENCY = (
    "I accumulation_counter prochot_residency_acc ppt_residency_acc socket_thm_residency_acc"
    " vr_thm_residency_acc hbm_thm_residency_acc gfxclk_lock_status"
)
_MI_NAK = "I pcie_nak_sent_count_acc pcie_nak_rcvd_count_acc"
_V1_7_BODY = (
    f"{_MI_HEAD} Q mem_max_bandwidth energy_accumulator system_clock_counter {_MI_RESIDENCY} {_MI_PCIE} {_MI_NAK}"
    f" {_MI_XGMI} H xgmi_link_status[8] padding Q firmware_timestamp {_MI_CLOCKS} num_partition"
)
# APUs: centi-degrees, milliwatts, per-core arrays.
_APU_TEMPS = "H temperature_gfx temperature_soc temperature_core[8] temperature_l3[2]"
_APU_POWER = "H average_socket_power average_cpu_power average_soc_power average_gfx_power average_core_power[8]"
_APU_CLOCKS = (
    "H average_gfxclk_frequency average_socclk_frequency average_uclk_frequency average_fclk_frequency"
    " average_vclk_frequency average_dclk_frequency current_gfxclk current_socclk current_uclk current_fclk"
    " current_vclk current_dclk current_coreclk[8] current_l3clk[2]"
)
_V2_1 = (
    f"{_APU_TEMPS} average_gfx_activity average_mm_activity Q system_clock_counter {_APU_POWER} {_APU_CLOCKS}"
    " I throttle_status H fan_pwm padding[3]"
)
_V2_2 = f"{_V2_1} Q indep_throttle_status"
_V2_3 = (f"{_V2_2} H average_temperature_gfx average_temperature_soc average_temperature_core[8]"
         " average_temperature_l3[2]")

LAYOUTS: dict[tuple[int, int], Layout] = {
    (layout.format_revision, layout.content_revision): layout for layout in (
        _layout(1, 0, "5.10", f"Q system_clock_counter {_TEMPS_DGPU} {_ACTIVITY_DGPU} I energy_accumulator"
                f" {_CLOCKS_DGPU} I throttle_status H current_fan_speed B pcie_link_width pcie_link_speed"),
        _layout(1, 1, "5.13", _V1_1),
        _layout(1, 2, "5.14", _V1_2),
        _layout(1, 3, "5.14", _V1_3),
        _layout(1, 4, "6.7-rc", f"{_MI_HEAD} H vcn_activity[4] Q energy_accumulator system_clock_counter"
                f" I throttle_status gfxclk_lock_status {_MI_PCIE} {_MI_XGMI} Q firmware_timestamp {_MI_CLOCKS}"
                " padding"),
        _layout(1, 5, "6.7", f"{_MI_HEAD} H vcn_activity[4] jpeg_activity[32] Q energy_accumulator system_clock_counter"
                f" I throttle_status gfxclk_lock_status {_MI_PCIE} {_MI_NAK} {_MI_XGMI} Q firmware_timestamp"
                f" {_MI_CLOCKS} padding"),
        _layout(1, 6, "6.13", f"{_MI_HEAD} Q energy_accumulator system_clock_counter {_MI_RESIDENCY} {_MI_PCIE}"
                f" {_MI_NAK} {_MI_XGMI} Q firmware_timestamp {_MI_CLOCKS} num_partition X168 xcp_stats[8]"
                " I pcie_lc_perf_other_end_recovery"),
        _layout(1, 7, "6.13", f"{_V1_7_BODY} X232 xcp_stats[8] I pcie_lc_perf_other_end_recovery"),
        _layout(1, 8, "6.15", f"{_V1_7_BODY} X440 xcp_stats[8] I pcie_lc_perf_other_end_recovery"),
        _layout(2, 0, "5.10", f"Q system_clock_counter {_APU_TEMPS} average_gfx_activity average_mm_activity"
                f" {_APU_POWER} {_APU_CLOCKS} I throttle_status H fan_pwm padding"),
        _layout(2, 1, "5.13", _V2_1),
        _layout(2, 2, "5.14", _V2_2),
        _layout(2, 3, "6.1", _V2_3),
        _layout(2, 4, "6.6", f"{_V2_3} H average_cpu_voltage average_soc_voltage average_gfx_voltage"
                " average_cpu_current average_soc_current average_gfx_current"),
        _layout(3, 0, "6.7", "H temperature_gfx temperature_soc temperature_core[16] temperature_skin"
                " average_gfx_activity average_vcn_activity average_ipu_activity[8] average_core_c0_activity[16]"
                " average_dram_reads average_dram_writes average_ipu_reads average_ipu_writes Q system_clock_counter"
                " I average_socket_power H average_ipu_power I average_apu_power average_gfx_power average_dgpu_power"
                " average_all_core_power H average_core_power[16] average_sys_power stapm_power_limit"
                " current_stapm_power_limit average_gfxclk_frequency average_socclk_frequency average_vpeclk_frequency"
                " average_ipuclk_frequency average_fclk_frequency average_vclk_frequency average_uclk_frequency"
                " average_mpipu_frequency current_coreclk[16] current_core_maxfreq current_gfx_maxfreq"
                " I throttle_residency_prochot throttle_residency_spl throttle_residency_fppt throttle_residency_sppt"
                " throttle_residency_thm_core throttle_residency_thm_gfx throttle_residency_thm_soc"
                " time_filter_alphavalue"),
    )
}


def encode(layout: Layout, values: Mapping[str, int | tuple[int, ...]]) -> bytes:
    """A table as the kernel makes it: all 0xFF, the header, then ``values`` (field name -> raw value or
    a tuple for an array). The simulator writes its cards' tables with it."""
    data = bytearray(b"\xff" * layout.size)
    struct.pack_into("<HBB", data, 0, layout.size, layout.format_revision, layout.content_revision)
    for name, value in values.items():
        field = layout.fields[name]
        for index, element in enumerate(value if isinstance(value, tuple) else (value,)):
            struct.pack_into("<" + field.code, data, field.offset + index * field.size, element)
    return bytes(data)
