"""Prometheus metric families rendered from the latest PublishedState (a custom Collector; no I/O).

A scrape only reads what the daemon already published (the thermal limits in force included), so a
slow or hung sysfs read can never hang it and no setting of its own can drift from the daemon's.
Names are in base units with the ``gpuwatch_`` prefix (families.py); every per-GPU series has one
``gpu`` label (the PCI slot, the GPU's stable identity); identity strings live only in
``gpuwatch_gpu_info``. A value the GPU does not report is an absent series, never 0. This module
renders the exporter's and the GPUs' own families; control_metrics.py, health_metrics.py and
use_metrics.py the rest. docs/metrics.md is the reference.

One bad series never costs the others (issue 31: a 400-digit fdinfo value made every scrape a 500):
a value that no float can carry is left out of the exposition, and a part whose families fail to
render is left out whole (logged once); both are counted in ``gpuwatch_metrics_dropped_series``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator
from operator import attrgetter

from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from gpuwatch.limits import over_limit
from gpuwatch.model import GpuReading, PublishedState
from gpuwatch.publish.clock_metrics import clock_families
from gpuwatch.publish.control_metrics import fan_families, power_families, trainer_families
from gpuwatch.publish.families import Family, GpuGauge, counter, gauge, gpu_gauges
from gpuwatch.publish.health_metrics import health
from gpuwatch.publish.node_metrics import node_families
from gpuwatch.publish.unmanaged_metrics import unmanaged_families
from gpuwatch.publish.use_metrics import process_families, reset_families

log = logging.getLogger("gpuwatch.http")
GPU_INFO_LABELS = ("gpu", "card", "backend", "name", "device_id", "subsystem_id", "unique_id", "vbios_version")

_GPU_GAUGES: tuple[GpuGauge, ...] = (
    ("gpu_busy_ratio", "GPU engine busy, 0-1 (gpu_busy_percent).", "gpu_busy_ratio", 1.0),
    ("gpu_memory_busy_ratio", "VRAM controller busy, 0-1 (mem_busy_percent).", "mem_busy_ratio", 1.0),
    ("gpu_vram_used_bytes", "VRAM in use.", "vram_used_bytes", 1.0),
    ("gpu_vram_total_bytes", "VRAM size.", "vram_total_bytes", 1.0),
    ("gpu_vram_reserved_bytes", "VRAM the driver reserves for itself, not counted as used (NVIDIA).",
     "vram_reserved_bytes", 1.0),
    ("gpu_gtt_used_bytes", "GTT (system memory mapped for the GPU) in use.", "gtt_used_bytes", 1.0),
    ("gpu_gtt_total_bytes", "GTT size.", "gtt_total_bytes", 1.0),
    ("gpu_power_watts", "Package power (average or instantaneous, whichever the card reports).", "power_w", 1.0),
    ("gpu_power_cap_watts", "Current power cap.", "power_cap_w", 1.0),
    ("gpu_power_cap_min_watts", "Lowest settable power cap.", "power_cap_min_w", 1.0),
    ("gpu_power_cap_max_watts", "Highest settable power cap.", "power_cap_max_w", 1.0),
    ("gpu_power_cap_default_watts", "Default power cap.", "power_cap_default_w", 1.0),
    ("gpu_fan_rpm", "Fan speed read back from the card, revolutions per minute.", "fan_rpm", 1.0),
    ("gpu_fan_min_rpm", "Lowest fan speed the card reports.", "fan_min_rpm", 1.0),
    ("gpu_fan_max_rpm", "Highest fan speed the card reports.", "fan_max_rpm", 1.0),
    ("gpu_fan_duty_ratio", "Fan duty as sampled (pwm1, or the board's fan speed where no pwm exists), 0-1.",
     "fan_duty", 1.0),
    ("gpu_fan_pwm_enable", "hwmon pwm1_enable: 0 full speed, 1 manual, 2 automatic (firmware).", "pwm_enable", 1.0),
    ("gpu_pcie_link_speed_transfers_per_second", "Current PCIe link speed.", "pcie_link_speed_gts", 1e9),
    ("gpu_pcie_link_max_speed_transfers_per_second", "Maximum PCIe link speed.", "pcie_max_link_speed_gts", 1e9),
    ("gpu_pcie_link_width_lanes", "Current PCIe link width.", "pcie_link_width", 1.0),
    ("gpu_pcie_link_max_width_lanes", "Maximum PCIe link width.", "pcie_max_link_width", 1.0),
    ("gpu_busy_sampled_ratio", "Graphics pipe busy, 0-1, sampled from its status register (pyamdgpuinfo).",
     "gpu_busy_sampled_ratio", 1.0),
)
# (clock label, GpuReading attribute): hwmon's sclk/mclk, then the gpu_metrics clocks.
_CLOCK_FIELDS = (("sclk", "sclk_hz"), ("mclk", "mclk_hz"), ("sclk_average", "sclk_average_hz"),
                 ("mclk_average", "mclk_average_hz"), ("socclk", "socclk_hz"), ("fclk_average", "fclk_average_hz"))
_RAIL_FIELDS = (("vddgfx", "vddgfx_v"), ("vddsoc", "vddsoc_v"), ("vddmem", "vddmem_v"))
_TEMP_FIELDS = (
    ("gpu_temperature_celsius", "Temperature by sensor (edge, junction, mem).", "temp_c"),
    ("gpu_temperature_crit_celsius", "Critical temperature: the card throttles hard here.", "crit_c"),
    ("gpu_temperature_crit_hyst_celsius", "Hysteresis of the critical temperature.", "crit_hyst_c"),
    ("gpu_temperature_emergency_celsius", "Emergency temperature: the card shuts down here.", "emergency_c"),
)


class GpuwatchCollector(Collector):
    """Renders ``latest()`` (the StateHolder's PublishedState) into metric families on every scrape."""

    def __init__(self, latest: Callable[[], PublishedState | None]) -> None:
        self._latest = latest

    def describe(self) -> Iterable[Metric]:
        return []  # unchecked collector: the series depend on the GPUs found

    def collect(self) -> Iterator[Metric]:
        state = self._latest()
        if state is None:
            return iter(())
        return iter(render(state))


def render(state: PublishedState) -> list[Family]:
    """Every family for one published state, in a fixed order (the golden file depends on it)."""
    parts: tuple[tuple[str, Callable[[], list[Family]]], ...] = (
        ("exporter", lambda: _exporter(state)), ("gpus", lambda: _gpus(state)), ("fans", lambda: fan_families(state)),
        ("trainers", lambda: trainer_families(state.trainers, [gpu.gpu_id for gpu in state.snapshot.gpus])),
        ("power", lambda: power_families(state)), ("resets", lambda: reset_families(state)),
        ("processes", lambda: process_families(state)),
        ("unmanaged", lambda: unmanaged_families(state)),
        ("health", lambda: node_families(state)), ("clock", lambda: clock_families(state)),
    )
    families: list[Family] = []
    dropped: dict[str, int] = {}
    for part, build in parts:
        try:
            built = build()
        except Exception:  # one part's bug must not cost the others their series
            if part not in _failed_parts:
                _failed_parts.add(part)
                log.exception("/metrics: the %s families failed to render; left out", part)
            dropped[f"render:{part}"] = 1
            continue
        for family in built:
            if not family.rows:  # an empty family is left out (half of a render's: no trainer, no fault), unchecked
                continue
            if family.packed() is None:  # one C pass; the values one by one only when one fails it
                kept = [row for row in family.rows if _carried(row[1])]
                if len(kept) < len(family.rows):
                    dropped[family.name] = dropped.get(family.name, 0) + len(family.rows) - len(kept)
                    family.rows = kept
                    if not kept:
                        continue
            families.append(family)
    counted = gauge("metrics_dropped_series", "Series left out of this exposition because their value is no number "
                    "a float can carry (per family), or because a part failed to render (family render:<part>).",
                    ["family"])
    for name, count in sorted(dropped.items()):
        counted.add_metric([name], count)
    if counted.rows:
        families.append(counted)
    return families


_failed_parts: set[str] = set()  # parts whose failure was logged (once per process: every scrape renders)


def _carried(value: object) -> bool:
    """Whether the exposition can print ``value``: a float or an int a float can hold (NaN and the
    infinities are valid Prometheus values; ``10**400`` raises OverflowError in ``float()``)."""
    try:
        float(value)  # type: ignore[arg-type]
    except (OverflowError, TypeError, ValueError):
        return False
    return True


def _exporter(state: PublishedState) -> list[Family]:
    snap, daemon = state.snapshot, state.daemon
    out: list[Family] = []
    last = gauge("last_sample_timestamp_seconds", "Wall time of the latest sample (Unix seconds).", ())
    last.add_metric([], snap.taken_unix)
    duration = gauge("sample_duration_seconds", "How long reading every GPU took in the latest tick.", ())
    duration.add_metric([], snap.sample_duration_s)
    gpus = gauge("gpus", "GPUs known to the daemon, by state (up: readable, down: gone or unreadable).", ["state"])
    up = sum(1 for g in snap.gpus if g.up)
    gpus.add_metric(["up"], up)
    gpus.add_metric(["down"], len(snap.gpus) - up)
    out += [last, duration, gpus]
    if daemon is not None:
        info = gauge("build_info", "Version of the running daemon (always 1).", ["version"])
        info.add_metric([daemon.version], 1)
        start = gauge("daemon_start_time_seconds", "When the daemon started (Unix seconds).", ())
        start.add_metric([], daemon.started_unix)
        interval = gauge("tick_interval_seconds", "Configured sampling interval.", ())
        interval.add_metric([], daemon.interval_s)
        ticks = counter("ticks", "Ticks (sample + control + publish) completed since start.", ())
        ticks.add_metric([], daemon.ticks_total)
        failing = gauge("daemon_part_failing", "1 for each daemon part whose last run raised (see /status).",
                        ["part"])
        for failure in daemon.failures:
            failing.add_metric([failure.split(":", 1)[0]], 1)
        out += [info, start, interval, ticks, failing]
    unsupported = gauge("unsupported_card_info", "DRM cards gpuwatch lists but never reads (another driver).",
                        ["card", "driver", "gpu"])
    for card in snap.unsupported:
        unsupported.add_metric([card.card, card.driver or "", card.gpu_id or ""], 1)
    out.append(unsupported)
    return out


def _gpus(state: PublishedState) -> list[Family]:
    gpus = state.snapshot.gpus
    info = gauge("gpu_info", "GPU identity (always 1); join on gpu for names.", GPU_INFO_LABELS)
    up = gauge("gpu_up", "1 when the GPU was read this tick, 0 when it is gone (reset, fell off the bus).")
    suspended = gauge("gpu_suspended", "1 when the GPU is runtime-suspended (values then come from before).")
    for gpu in gpus:  # straight into the rows, label values as a tuple (an add_metric call per series: issue 52)
        info.rows.append(((gpu.gpu_id, gpu.card, gpu.backend, *(value or "" for value in _INFO_VALUES(gpu))), 1))
        up.rows.append(((gpu.gpu_id,), 1 if gpu.up else 0))
        if gpu.runtime_status is not None:
            suspended.rows.append(((gpu.gpu_id,), 1 if gpu.suspended else 0))
    out: list[Family] = [info, up, suspended, *_temperatures(state)]
    out += gpu_gauges(_GPU_GAUGES, gpus)
    out += _clocks(gpus)
    out += health(gpus)
    failing = gauge("gpu_read_failing", "1 for each sensor file that exists but failed to read this tick.",
                    ["gpu", "sensor"])
    for gpu in gpus:
        if gpu.up:
            for error in gpu.errors:
                failing.add_metric([gpu.gpu_id, error.sensor], 1)
    errors = counter("gpu_read_errors", "Failed reads of a sensor file since the daemon started.",
                     ["gpu", "sensor"])
    for gpu_id, sensor, count in state.read_errors_total:
        errors.add_metric([gpu_id, sensor], count)
    return [*out, failing, errors]


def _temperatures(state: PublishedState) -> list[Family]:
    """The sensors' families in one pass over each GPU's sensors (each family's rows in the same order as one pass
    per family made them), the limits looked up in a dict made once (``PublishedState.limit_c``'s first match)."""
    out: list[Family] = [gauge(suffix, doc, ["gpu", "sensor"]) for suffix, doc, _ in _TEMP_FIELDS]
    limit = gauge("gpu_temperature_limit_celsius",
                  "gpuwatch's pause/alarm limit per sensor (configured, or crit minus a margin).", ["gpu", "sensor"])
    over = gauge("gpu_thermal_over_limit", "1 when the sensor is at or above its gpuwatch limit.", ["gpu", "sensor"])
    limits: dict[tuple[str, str], float] = {}
    for known in state.limits_c:
        limits.setdefault((known.gpu_id, known.sensor), known.limit_c)
    columns = tuple(family.rows for family in out)
    for gpu in state.snapshot.gpus:
        for temp in gpu.temps:
            labels = (gpu.gpu_id, temp.label)
            for rows, value in zip(columns, _TEMP_VALUES(temp), strict=True):
                if value is not None:
                    rows.append((labels, value))
            limit_c = limits.get(labels)
            if limit_c is None:
                continue
            limit.rows.append((labels, limit_c))
            above = over_limit(temp.temp_c, limit_c)
            if above is not None:
                over.rows.append((labels, 1 if above else 0))
    return [*out, limit, over]


_TEMP_VALUES = attrgetter(*(attr for _, _, attr in _TEMP_FIELDS))
_INFO_VALUES = attrgetter(*GPU_INFO_LABELS[3:])  # the identity strings of gpu_info after gpu, card and backend


def _clocks(gpus: tuple[GpuReading, ...]) -> list[Family]:
    # Help texts kept as they were (the golden file changes by additions only); the gpu_metrics clocks
    # and rails are listed in docs/metrics.md.
    clock = gauge("gpu_clock_hertz", "Current clock: sclk (shader) and mclk (memory).", ["gpu", "clock"])
    volts = gauge("gpu_voltage_volts", "Voltage by rail.", ["gpu", "rail"])
    for gpu in gpus:
        for family, pairs in ((clock, _CLOCK_FIELDS), (volts, _RAIL_FIELDS)):
            for name, attr in pairs:
                value = getattr(gpu, attr)
                if value is not None:
                    family.rows.append(((gpu.gpu_id, name), value))
    return [clock, volts]

