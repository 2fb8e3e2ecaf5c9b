"""Decode amdgpu's binary ``device/gpu_metrics`` table (pure: bytes in, a GpuMetrics or an error out).

The 4-byte header names the layout (gpu_metrics_layouts.py); the fields gpuwatch uses are read at
their offsets and converted to the units in their names once. Units differ by family
(docs.kernel.org/gpu/amdgpu/thermal.html#gpu-metrics and the struct comments; checked against hwmon in
real captures, docs/telemetry.md): dGPU tables (format 1) carry whole °C, whole W and %; APU tables
(format 2) centi-°C, mW and centi-%; format 3 (Strix) centi-°C, mW and % (older PMFW: centi-%, told
apart by range). A field of all ones is "not supported" (the kernel fills the table with 0xFF first);
a VR temperature of 0 means the board has no such sensor (laptops); an energy accumulator of 0 is
one RDNA3/RDNA4 firmware never fills.

A table gpuwatch cannot trust raises GpuMetricsError: an unknown revision (v1.9 and anything newer), a
header size that does not match its layout, fewer bytes than the header says, bytes after the table
that are not NUL padding (a dump tool's 4096-byte NUL padding is accepted), or values no card reports
(garbage that happens to have a valid header).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

from gpuwatch.gpus.gpu_metrics_layouts import HEADER_SIZE, LAYOUTS, Layout

# Plausibility: what a real table never holds (decision-driving fields only).
MAX_TEMP_C = 150.0
MAX_FAN_RPM = 25000
_LINK_SPEEDS = {25, 50, 80, 160, 320, 640}  # 0.1 GT/s, smu_cmn.c link_speed[]
_LINK_WIDTHS = {1, 2, 4, 8, 12, 16, 32}
# (temperature, power, activity) divisors to °C, W and 0-1 by format revision.
_DIVISORS = {1: (1, 1, 100), 2: (100, 1000, 10000), 3: (100, 1000, 100)}
# GpuMetrics attribute, the struct fields that carry it (first present wins: dGPU, MI and APU names),
# and its kind: how the raw integer becomes the attribute's unit.
_ATTRIBUTES: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("edge_c", ("temperature_edge", "temperature_gfx"), "temp"),
    ("junction_c", ("temperature_hotspot",), "temp"),
    ("mem_c", ("temperature_mem",), "temp"),
    ("vrgfx_c", ("temperature_vrgfx",), "vr_temp"),
    ("vrsoc_c", ("temperature_vrsoc",), "vr_temp"),
    ("vrmem_c", ("temperature_vrmem",), "vr_temp"),
    ("soc_c", ("temperature_soc",), "temp"),
    ("gfx_busy_ratio", ("average_gfx_activity",), "gfx_activity"),
    ("mem_busy_ratio", ("average_umc_activity",), "activity"),
    ("power_w", ("average_socket_power", "curr_socket_power"), "power"),
    ("sclk_mhz", ("current_gfxclk",), "raw"),
    ("sclk_average_mhz", ("average_gfxclk_frequency",), "raw"),
    ("mclk_mhz", ("current_uclk",), "raw"),
    ("mclk_average_mhz", ("average_uclk_frequency",), "raw"),
    ("socclk_mhz", ("current_socclk",), "raw"),
    ("fclk_average_mhz", ("average_fclk_frequency",), "raw"),
    ("vddgfx_v", ("voltage_gfx", "average_gfx_voltage"), "millivolts"),
    ("vddsoc_v", ("voltage_soc", "average_soc_voltage"), "millivolts"),
    ("vddmem_v", ("voltage_mem",), "millivolts"),
    ("fan_rpm", ("current_fan_speed",), "raw"),
    ("pcie_link_width", ("pcie_link_width",), "raw"),
    ("pcie_link_speed_gts", ("pcie_link_speed",), "link_speed"),
    ("throttle_status", ("throttle_status",), "raw"),
    ("indep_throttle_status", ("indep_throttle_status",), "raw"),
    ("energy_accumulator", ("energy_accumulator",), "energy"),
    ("system_clock_ns", ("system_clock_counter",), "raw"),
)
_TEMPS = tuple(attr for attr, _, kind in _ATTRIBUTES if kind in ("temp", "vr_temp"))
# Per layout: (attribute, unpacker, offset, all-ones value, kind) of each attribute it has, built once.
_Plan = list[tuple[str, struct.Struct, int, int, str]]
_PLANS: dict[tuple[int, int], _Plan] = {}


class GpuMetricsError(Exception):
    """The table cannot be trusted; ``kind`` is a short key (truncated, unknown revision...)."""

    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(f"{kind}: {detail}")
        self.kind = kind


@dataclass(frozen=True)
class GpuMetrics:
    """One decoded table; None where the layout has no such field or the card does not fill it."""

    format_revision: int
    content_revision: int
    edge_c: float | None = None  # APUs: temperature_gfx (what hwmon's temp1 "edge" reads there)
    junction_c: float | None = None
    mem_c: float | None = None
    vrgfx_c: float | None = None
    vrsoc_c: float | None = None
    vrmem_c: float | None = None
    soc_c: float | None = None  # APUs
    gfx_busy_ratio: float | None = None
    mem_busy_ratio: float | None = None
    power_w: float | None = None
    sclk_mhz: int | None = None
    sclk_average_mhz: int | None = None
    mclk_mhz: int | None = None
    mclk_average_mhz: int | None = None
    socclk_mhz: int | None = None
    fclk_average_mhz: int | None = None
    vddgfx_v: float | None = None
    vddsoc_v: float | None = None
    vddmem_v: float | None = None
    fan_rpm: int | None = None
    pcie_link_width: int | None = None
    pcie_link_speed_gts: float | None = None
    throttle_status: int | None = None  # the firmware's own bits (numbering differs per SMU generation)
    indep_throttle_status: int | None = None  # the kernel's SMU_THROTTLER_* bits (v1.3, v2.2+)
    energy_accumulator: int | None = None  # counts of 2^-16 J; see gpus/accounting.py
    system_clock_ns: int | None = None

    @property
    def revision(self) -> str:
        return f"{self.format_revision}.{self.content_revision}"


def decode(data: bytes) -> GpuMetrics:
    """The table in ``data`` (one read of the sysfs file); raises GpuMetricsError."""
    if len(data) < HEADER_SIZE:
        raise GpuMetricsError("truncated", f"{len(data)} bytes, not even a header")
    size, frev, crev = struct.unpack_from("<HBB", data)
    layout = LAYOUTS.get((frev, crev))
    if layout is None:
        raise GpuMetricsError("unknown revision",
                              f"v{frev}.{crev} ({size} bytes) is not a published layout gpuwatch knows")
    if size != layout.size:
        raise GpuMetricsError("size mismatch", f"header says {size} bytes, v{layout.revision} is {layout.size}")
    if len(data) < size:
        raise GpuMetricsError("truncated", f"{len(data)} of {size} bytes")
    if data[size:].strip(b"\x00"):
        raise GpuMetricsError("trailing garbage", f"{len(data) - size} bytes after the {size}-byte table")
    return _check(_fields(data[:size], layout))


def _plan(layout: Layout) -> _Plan:
    key = (layout.format_revision, layout.content_revision)
    if key not in _PLANS:
        fields = [(attr, next((layout.fields[n] for n in names if n in layout.fields), None), kind)
                  for attr, names, kind in _ATTRIBUTES]
        # Arrays (MI per-XCC clocks): the first instance.
        _PLANS[key] = [(attr, struct.Struct("<" + f.code), f.offset, (1 << (8 * f.size)) - 1, kind)
                       for attr, f, kind in fields if f is not None]
    return _PLANS[key]


def _fields(data: bytes, layout: Layout) -> GpuMetrics:
    temp, power, activity = _DIVISORS[layout.format_revision]
    out: dict[str, Any] = {}
    for attr, unpack, offset, all_ones, kind in _plan(layout):
        raw: int = unpack.unpack_from(data, offset)[0]
        if raw == all_ones:
            continue
        if kind == "raw":
            out[attr] = raw
        elif kind in ("temp", "vr_temp"):
            # A VR temperature of 0: the board has no such sensor (laptops).
            out[attr] = None if kind == "vr_temp" and raw == 0 else raw / temp
        elif kind == "power":
            out[attr] = raw / power
        elif kind == "gfx_activity":
            if layout.format_revision == 3 and raw > 100:
                raw //= 100  # PMFW <= 0x5d4600 reports centi-% in the same field (smu_v14_0_0_ppt.c)
            out[attr] = raw / activity
        elif kind == "activity":
            out[attr] = raw / activity
        elif kind == "millivolts":
            out[attr] = raw / 1000
        elif kind == "link_speed":
            out[attr] = raw / 10  # 0.1 GT/s
        elif kind == "energy":
            out[attr] = raw or None  # RDNA3/RDNA4 firmware leaves it 0
    return GpuMetrics(layout.format_revision, layout.content_revision, **out)


def _check(table: GpuMetrics) -> GpuMetrics:
    """Reject a table whose decision-driving values no card reports: garbage with a valid header."""
    problems = [f"{key} {value:g}" for key in _TEMPS
                if (value := getattr(table, key)) is not None and value > MAX_TEMP_C]
    problems += [f"{key} {value:g}" for key in ("gfx_busy_ratio", "mem_busy_ratio")
                 if (value := getattr(table, key)) is not None and value > 1.0]
    if table.fan_rpm is not None and table.fan_rpm > MAX_FAN_RPM:
        problems.append(f"fan_rpm {table.fan_rpm}")
    if table.pcie_link_speed_gts is not None and round(table.pcie_link_speed_gts * 10) not in _LINK_SPEEDS:
        problems.append(f"pcie_link_speed {table.pcie_link_speed_gts:g} GT/s")
    if table.pcie_link_width is not None and table.pcie_link_width not in _LINK_WIDTHS:
        problems.append(f"pcie_link_width x{table.pcie_link_width}")
    if problems:
        raise GpuMetricsError("implausible", ", ".join(problems))
    return table
