"""amdgpu's gpu_metrics table in a reading: when it is read, and how it fills what hwmon lacks.

Read policy (``GpuMetricsReader``): once per tick, in the same pass as the other files and through the
same ``Sysfs`` (so whatever bounds sysfs reads bounds this one too; a table found absent is looked for
again at the next discovery only, as any file found absent), and only while the GPU is awake:
``power/runtime_status`` active (or runtime PM off). Up to Linux 6.12 reading the file wakes a
runtime-suspended GPU (``pm_runtime_get_sync``), from 6.13 it fails with EPERM instead ("drm/amd/pm:
use pm_runtime_get_if_active for debugfs getters", 6e796cb4a972b), which also happens during a GPU reset:
EPERM is "asleep", not an error. EOPNOTSUPP (an ASIC without the table, Raven, DPM off) or an empty
read turns the table off for that GPU, logged once. A table that cannot be decoded is a read error of
sensor ``gpu_metrics`` (counted in ``gpuwatch_gpu_read_errors_total``), logged once per kind.

Merge (``merge``, pure): hwmon stays the primary source; the table fills a value hwmon does not give
(fan RPM on RDNA4 before Linux 6.15, where SMU 14.0.2 has no ``fan1_input``; temperatures, power,
busy, clocks, vddgfx) and records it in ``sources``, and adds what only it has: VR and SoC
temperatures, average and SoC/fabric clocks, vddsoc/vddmem, throttle bits and reasons, the energy
accumulator.
"""

from __future__ import annotations

import logging
from typing import Any

from gpuwatch.gpus.gpu_metrics import GpuMetrics, GpuMetricsError, decode
from gpuwatch.gpus.throttle import flags, reasons
from gpuwatch.model import GpuReading, ReadError, TempReading, replaced
from gpuwatch.sysfs import Sysfs, SysfsError

log = logging.getLogger("gpuwatch.amdgpu")

SENSOR = "gpu_metrics"
AWAKE = (None, "active", "unsupported")  # runtime_status values of a GPU that may be read
ENERGY_UNIT_J = 2.0**-16  # "Energy (15.259uJ (2^-16) units)", kgd_pp_interface.h
_NOT_SUPPORTED = ("ENOTSUP", "EOPNOTSUPP")
# Temperatures the table may add: label -> GpuMetrics attribute (hwmon's edge/junction/mem win).
_TEMPS = {"edge": "edge_c", "junction": "junction_c", "mem": "mem_c", "vrgfx": "vrgfx_c", "vrsoc": "vrsoc_c",
          "vrmem": "vrmem_c", "soc": "soc_c"}
_HWMON_TEMPS = ("edge", "junction", "mem")


class GpuMetricsReader:
    """Reads and decodes each GPU's table; remembers the GPUs that have none and what was logged."""

    def __init__(self) -> None:
        self.off: dict[str, str] = {}  # gpu_id -> why its table is not read
        self._logged: set[tuple[str, str]] = set()

    def read(self, sysfs: Sysfs, reading: GpuReading, device_dir: str,
             absent: dict[str, str | None] | None = None) -> GpuReading:
        """``reading`` merged with this tick's table (unchanged when there is none to read). ``absent``: the
        device directory's remembered texts (gpus/amdgpu.py's ``Directory``), where a table found absent is
        remembered as any file found absent until the next discovery: amdgpu registers gpu_metrics at probe
        (amdgpu_pm.c, amdgpu_device_attr_create_groups) or not at all, so an absent one was an open that failed
        every tick."""
        if reading.runtime_status not in AWAKE or reading.gpu_id in self.off:
            return reading
        if absent is not None and SENSOR in absent:
            return reading
        try:
            data = sysfs.read_bytes(f"{device_dir}/gpu_metrics")
        except SysfsError as exc:
            if exc.reason == "EPERM":
                return reading  # runtime-suspended (6.13+), in a reset or in system suspend
            if exc.reason in _NOT_SUPPORTED:
                self._off(reading.gpu_id, "the driver has no gpu_metrics table for this GPU (EOPNOTSUPP)")
                return reading
            return merge(reading, None, ReadError(SENSOR, exc.reason))
        if data is None:
            if absent is not None:
                absent[SENSOR] = None
            return reading
        if not data:
            self._off(reading.gpu_id, "gpu_metrics reads empty (no table from this power-management backend)")
            return reading
        try:
            table = decode(data)
        except GpuMetricsError as exc:
            if (reading.gpu_id, exc.kind) not in self._logged:
                self._logged.add((reading.gpu_id, exc.kind))
                log.warning("GPU %s: gpu_metrics not used: %s (counted as a read error of %s)", reading.gpu_id,
                            exc, SENSOR)
            return merge(reading, None, ReadError(SENSOR, str(exc)))
        return merge(reading, table)

    def _off(self, gpu_id: str, why: str) -> None:
        self.off[gpu_id] = why
        log.info("GPU %s: %s; not read again", gpu_id, why)


def merge(reading: GpuReading, table: GpuMetrics | None, error: ReadError | None = None) -> GpuReading:
    """``reading`` completed from ``table`` (pure): hwmon's values win, the table fills the gaps."""
    if table is None:
        return reading if error is None else replaced(reading, errors=reading.errors + (error,))
    sources = dict(reading.sources)
    fields: dict[str, Any] = {}
    for attr, value in (
        ("fan_rpm", table.fan_rpm), ("power_w", table.power_w), ("gpu_busy_ratio", table.gfx_busy_ratio),
        ("mem_busy_ratio", table.mem_busy_ratio), ("sclk_hz", _hz(table.sclk_mhz)),
        ("mclk_hz", _hz(table.mclk_mhz)), ("vddgfx_v", table.vddgfx_v),
    ):
        if getattr(reading, attr) is None and value is not None:
            fields[attr] = value
            sources[attr] = SENSOR
    temps = list(reading.temps)
    for label, attr in _TEMPS.items():
        value = getattr(table, attr)
        if value is not None and reading.temp(label) is None:
            temps.append(TempReading(label=label, temp_c=value))
            if label in _HWMON_TEMPS:
                sources[f"temp_{label}"] = SENSOR
    throttle_flags = None
    if table.indep_throttle_status is not None:
        throttle_flags = flags(table.indep_throttle_status, table.junction_c,
                               hotspot_quirk=(table.format_revision, table.content_revision) == (1, 3))
    return replaced(
        reading, **fields, temps=tuple(temps), sources=tuple(sorted(sources.items())),
        gpu_metrics_revision=table.revision,
        sclk_average_hz=_hz(table.sclk_average_mhz), mclk_average_hz=_hz(table.mclk_average_mhz),
        socclk_hz=_hz(table.socclk_mhz), fclk_average_hz=_hz(table.fclk_average_mhz),
        vddsoc_v=table.vddsoc_v, vddmem_v=table.vddmem_v,
        throttle_status=table.throttle_status, indep_throttle_status=table.indep_throttle_status,
        throttle_flags=throttle_flags, throttle_reasons=None if throttle_flags is None else reasons(throttle_flags),
        energy_accumulator_j=None if table.energy_accumulator is None else table.energy_accumulator * ENERGY_UNIT_J,
    )


def _hz(mhz: int | None) -> float | None:
    return None if mhz is None else mhz * 1e6
