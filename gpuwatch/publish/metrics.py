"""Prometheus metric families rendered from the latest PublishedState (a custom Collector; no I/O).

A scrape only reads what the daemon already published (the thermal limits in force included), so a
slow or hung sysfs read can never hang it and no setting of its own can drift from the daemon's.
Names are in base units with the ``gpuwatch_`` prefix (families.py); every per-GPU series has one ``gpu`` label
(the PCI slot, the GPU's stable identity); identity strings live only in ``gpuwatch_gpu_info``.
A value the GPU does not report is an absent series, never 0. docs/metrics.md is the reference.
"""

from __future__ import annotations

from typing import Callable, Iterable, Iterator

from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from gpuwatch.limits import over_limit
from gpuwatch.publish.families import GpuGauge, counter, gauge, gpu_gauges
from gpuwatch.publish.health_metrics import health
from gpuwatch.model import (
    PWM_MAX_DEFAULT,
    FanMode,
    FanState,
    GpuReading,
    PowerMode,
    PublishedState,
    TrainerPhase,
    TrainerState,
    pwm_ratio,
)
from gpuwatch.publish.use_metrics import process_families, reset_families

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
_RUNNING_PHASES = {TrainerPhase.RUNNING}


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


def render(state: PublishedState) -> list[Metric]:
    """Every family for one published state, in a fixed order (the golden file depends on it)."""
    families = [*_exporter(state), *_gpus(state), *_fans(state),
                *_trainers(state.trainers, [gpu.gpu_id for gpu in state.snapshot.gpus]), *_power(state),
                *reset_families(state), *process_families(state)]
    return [family for family in families if family.samples]


def _exporter(state: PublishedState) -> list[Metric]:
    snap, daemon = state.snapshot, state.daemon
    out: list[Metric] = []
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


def _gpus(state: PublishedState) -> list[Metric]:
    gpus = state.snapshot.gpus
    info = gauge("gpu_info", "GPU identity (always 1); join on gpu for names.", GPU_INFO_LABELS)
    up = gauge("gpu_up", "1 when the GPU was read this tick, 0 when it is gone (reset, fell off the bus).")
    suspended = gauge("gpu_suspended", "1 when the GPU is runtime-suspended (values then come from before).")
    for gpu in gpus:
        info.add_metric([gpu.gpu_id, gpu.card, gpu.backend, *(getattr(gpu, k) or "" for k in GPU_INFO_LABELS[3:])], 1)
        up.add_metric([gpu.gpu_id], 1 if gpu.up else 0)
        if gpu.runtime_status is not None:
            suspended.add_metric([gpu.gpu_id], 1 if gpu.suspended else 0)
    out: list[Metric] = [info, up, suspended, *_temperatures(state)]
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


def _temperatures(state: PublishedState) -> list[Metric]:
    gpus = state.snapshot.gpus
    out: list[Metric] = []
    for suffix, doc, attr in _TEMP_FIELDS:
        family = gauge(suffix, doc, ["gpu", "sensor"])
        for gpu in gpus:
            for temp in gpu.temps:
                value = getattr(temp, attr)
                if value is not None:
                    family.add_metric([gpu.gpu_id, temp.label], value)
        out.append(family)
    limit = gauge("gpu_temperature_limit_celsius",
                  "gpuwatch's pause/alarm limit per sensor (configured, or crit minus a margin).", ["gpu", "sensor"])
    over = gauge("gpu_thermal_over_limit", "1 when the sensor is at or above its gpuwatch limit.", ["gpu", "sensor"])
    for gpu in gpus:
        for temp in gpu.temps:
            limit_c = state.limit_c(gpu.gpu_id, temp.label)
            if limit_c is None:
                continue
            limit.add_metric([gpu.gpu_id, temp.label], limit_c)
            above = over_limit(temp.temp_c, limit_c)
            if above is not None:
                over.add_metric([gpu.gpu_id, temp.label], 1 if above else 0)
    return [*out, limit, over]


def _clocks(gpus: tuple[GpuReading, ...]) -> list[Metric]:
    # Help texts kept as they were (the golden file changes by additions only); the gpu_metrics clocks
    # and rails are listed in docs/metrics.md.
    clock = gauge("gpu_clock_hertz", "Current clock: sclk (shader) and mclk (memory).", ["gpu", "clock"])
    volts = gauge("gpu_voltage_volts", "Voltage by rail.", ["gpu", "rail"])
    for gpu in gpus:
        for family, pairs in ((clock, _CLOCK_FIELDS), (volts, _RAIL_FIELDS)):
            for name, attr in pairs:
                value = getattr(gpu, attr)
                if value is not None:
                    family.add_metric([gpu.gpu_id, name], value)
    return [clock, volts]


def _duty(pwm: int | None, gpu: GpuReading | None) -> float | None:
    """A pwm value the fan controller wrote (or read back), as 0-1 of the card's own pwm range.

    A card that does not report pwm1_max gets PWM_MAX_DEFAULT: the scale the backend itself wrote
    on (fan/pwm1.py falls back to it, fan/gpu_od.py always writes on it). A sampled pwm is not
    guessed that way (``GpuReading.pwm_ratio``): there the range is the card's to say.
    """
    if pwm is None:
        return None
    return pwm_ratio(pwm, gpu.pwm_min if gpu else None, (gpu.pwm_max if gpu else None) or PWM_MAX_DEFAULT)


def _fans(state: PublishedState) -> list[Metric]:
    mode = gauge("fan_mode", "1 for the fan controller's current mode of the GPU, 0 for the others.",
                 ["gpu", "mode"])
    backend = gauge("fan_backend_info", "How the controller drives the fan (pwm1, gpu_od...); always 1.",
                    ["gpu", "backend"])
    target = gauge("fan_target_duty_ratio", "Duty the controller wants (curve output), 0-1.")
    applied = gauge("fan_applied_duty_ratio", "Duty the controller last wrote, 0-1.")
    readback = gauge("fan_readback_duty_ratio", "Duty read back after the write, 0-1.")
    applied_pwm = gauge("fan_applied_pwm", "Raw pwm value last written (the card's pwm1 scale).")
    readback_pwm = gauge("fan_readback_pwm", "Raw pwm value read back after the write.")
    sensor = gauge("fan_control_temperature_celsius", "The temperature the curve follows, by sensor.",
                   ["gpu", "sensor"])
    stalled = gauge("fan_stalled", "1 when the fan reads 0 RPM although driven above its floor.")
    resets = counter("fan_mode_resets", "Times the driver or firmware took fan control back (re-taken).")
    write_errors = counter("fan_write_errors", "Failed fan writes.")
    stalls = counter("fan_stalls", "Fan stall episodes detected.")
    fan: FanState
    for fan in state.fans:
        gpu = state.snapshot.gpu(fan.gpu_id)
        labels = [fan.gpu_id]
        for known in FanMode:
            mode.add_metric([fan.gpu_id, known.value], 1 if fan.mode == known else 0)
        backend.add_metric([fan.gpu_id, fan.backend], 1)
        for family, value in (
            (target, fan.target_ratio), (applied, _duty(fan.applied_pwm, gpu)),
            (readback, _duty(fan.readback_pwm, gpu)), (applied_pwm, fan.applied_pwm),
            (readback_pwm, fan.readback_pwm),
        ):
            if value is not None:
                family.add_metric(labels, value)
        if fan.sensor is not None and fan.sensor_temp_c is not None:
            sensor.add_metric([fan.gpu_id, fan.sensor], fan.sensor_temp_c)
        stalled.add_metric(labels, 1 if fan.stalled else 0)
        resets.add_metric(labels, fan.mode_resets_total)
        write_errors.add_metric(labels, fan.write_errors_total)
        stalls.add_metric(labels, fan.stalls_total)
    return [mode, backend, target, applied, readback, applied_pwm, readback_pwm, sensor, stalled, resets,
            write_errors, stalls]


def _trainers(trainers: tuple[TrainerState, ...], gpu_ids: list[str]) -> list[Metric]:
    t = ["trainer"]
    info = gauge("trainer_info", "Supervised training command and the GPUs it uses (always 1).", ["trainer", "gpus"])
    # trainer_info's comma list cannot be joined per GPU in PromQL; this one can (the fleet overview).
    on_gpu = gauge("trainer_gpu_info", "One series per GPU a trainer uses (always 1); a trainer without "
                   "configured gpus uses every GPU.", ["trainer", "gpu"])
    phase = gauge("trainer_phase", "1 for the trainer's current supervisor phase, 0 for the others.",
                  ["trainer", "phase"])
    running = gauge("trainer_running", "1 while the trainer is running (not paused, backing off or stopped).", t)
    start = gauge("trainer_start_time_seconds", "When the current run of the trainer started (Unix seconds).", t)
    paused_since = gauge("trainer_pause_start_time_seconds", "When the current pause began (Unix seconds).", t)
    next_start = gauge("trainer_next_start_time_seconds", "When a backing-off trainer starts again (Unix seconds).", t)
    exit_code = gauge("trainer_last_exit_code", "Exit code of the trainer's last run (negative: signal).", t)
    restarts = counter("trainer_restarts", "Restarts of the training command.", t)
    by_reason = counter("trainer_restarts_by_reason", "Restarts of the training command by reason.",
                        ["trainer", "reason"])
    pauses = counter("trainer_pauses", "Thermal or manual pauses (SIGSTOP or pause file).", t)
    resumes = counter("trainer_resumes", "Resumes after a pause.", t)
    steps = counter("trainer_steps", "Training steps reported by the trainer's heartbeat.", t)
    rate = gauge("trainer_steps_per_second", "Training speed from the heartbeat.", t)
    age = gauge("trainer_last_step_age_seconds", "Seconds since the trainer last reported a step.", t)
    epoch = gauge("trainer_epoch", "Current epoch reported by the trainer.", t)
    failed = gauge("trainer_failed_info", "1 while the trainer is failed (given up on), with why in the reason "
                   "label (as `gpuwatch status` shows it); absent otherwise.", ["trainer", "reason"])
    run_energy = gauge("trainer_run_energy_joules", "Energy the trainer's GPUs used during its current "
                       "(or last) run.", t)
    energy = counter("trainer_energy_joules", "Energy the trainer's GPUs used over all its runs since the "
                     "daemon started.", t)
    per_kj = gauge("trainer_steps_per_kilojoule", "Training steps per kilojoule of GPU energy in the current run.", t)
    ranks = gauge("trainer_ranks", "Ranks of a distributed training job on this machine.", t)
    ranks_held = gauge("trainer_ranks_held", "Of the job's ranks on this machine, those holding at its pause.", t)
    job_ranks = gauge("trainer_job_ranks", "Ranks of a distributed training job on every machine (world size).", t)
    for trainer in trainers:
        name = [trainer.name]
        info.add_metric([trainer.name, ",".join(trainer.gpus)], 1)
        for gpu_id in trainer.gpus or gpu_ids:
            on_gpu.add_metric([trainer.name, gpu_id], 1)
        for known in TrainerPhase:
            phase.add_metric([trainer.name, known.value], 1 if trainer.phase == known else 0)
        running.add_metric(name, 1 if trainer.phase in _RUNNING_PHASES else 0)
        restarts.add_metric(name, trainer.restarts_total)
        for reason, count in trainer.restarts_by_reason:
            by_reason.add_metric([trainer.name, reason], count)
        pauses.add_metric(name, trainer.pauses_total)
        resumes.add_metric(name, trainer.resumes_total)
        if trainer.phase is TrainerPhase.FAILED:
            failed.add_metric([trainer.name, trainer.reason or ""], 1)
        energy.add_metric(name, trainer.energy_total_j)
        for family, value in (
            (start, trainer.started_unix), (paused_since, trainer.paused_since_unix),
            (next_start, trainer.next_start_unix), (exit_code, trainer.last_exit_code), (steps, trainer.steps_total),
            (rate, trainer.steps_per_s), (age, trainer.last_step_age_s), (epoch, trainer.epoch),
            (run_energy, trainer.run_energy_j), (per_kj, trainer.steps_per_kj),
            (ranks, trainer.ranks), (ranks_held, trainer.ranks_held), (job_ranks, trainer.world_size),
        ):
            if value is not None:
                family.add_metric(name, value)
    return [info, on_gpu, phase, running, start, paused_since, next_start, exit_code, restarts, by_reason, pauses, resumes,
            steps, rate, age, epoch, failed, run_energy, energy, per_kj, ranks, ranks_held, job_ranks]


def _power(state: PublishedState) -> list[Metric]:
    mode = gauge("power_governor_state", "1 for the power-cap governor's current state of the GPU, 0 for the "
                 "others (idle, governing, floor, unavailable, dry-run, off).", ["gpu", "state"])
    target = gauge("power_governor_target_cap_watts", "Power cap the governor wants in force (dry-run: would write).")
    original = gauge("power_governor_original_cap_watts", "Power cap found at start; restored on every exit.")
    floor = gauge("power_governor_floor_cap_watts", "Lowest cap the governor writes; still hot there: pause.")
    capped = counter("power_capped_seconds", "Time with a cap below the original in force.")
    kept = gauge("power_throughput_kept_ratio", "Estimated training speed kept under the cap, 0-1: "
                 "(cap / original) ** (1/3) while the cap binds (clock ~ power^(1/3) near the top of the V/F "
                 "curve), else 1.")
    writes = counter("power_cap_writes", "Power cap writes (each read back).")
    errors = counter("power_cap_write_errors", "Failed power cap writes.")
    for power in state.powers:
        labels = [power.gpu_id]
        for known in PowerMode:
            mode.add_metric([power.gpu_id, known.value], 1 if power.mode == known else 0)
        for family, value in ((target, power.target_cap_w), (original, power.original_cap_w),
                              (floor, power.floor_cap_w), (kept, power.throughput_kept_ratio)):
            if value is not None:
                family.add_metric(labels, value)
        capped.add_metric(labels, power.capped_seconds_total)
        writes.add_metric(labels, power.writes_total)
        errors.add_metric(labels, power.write_errors_total)
    return [mode, target, original, floor, capped, kept, writes, errors]
