"""The metric families of what the deciding parts publish: the fan controller, the trainers, the power governor.

Rendered by metrics.py after the GPUs' own families, from the PublishedState only (no I/O);
docs/metrics.md is the reference.
"""

from __future__ import annotations

from gpuwatch.derived import pwm_ratio
from gpuwatch.model import (
    PWM_MAX_DEFAULT,
    FanMode,
    FanState,
    GpuReading,
    PowerMode,
    PublishedState,
    TrainerPhase,
    TrainerState,
)
from gpuwatch.publish.families import Family, counter, gauge
from gpuwatch.publish.redact import reason_class

_RUNNING_PHASES = {TrainerPhase.RUNNING}


# Each mode with its label value, listed once: a per-GPU series per mode every render (issue 52).
_FAN_MODES = tuple((known, known.value) for known in FanMode)
_TRAINER_PHASES = tuple((known, known.value) for known in TrainerPhase)
_POWER_MODES = tuple((known, known.value) for known in PowerMode)


def _duty(pwm: int | None, gpu: GpuReading | None) -> float | None:
    """A pwm value the fan controller wrote (or read back), as 0-1 of the card's own pwm range.

    A card that does not report pwm1_max gets PWM_MAX_DEFAULT: the scale the backend itself wrote
    on (fan/pwm1.py falls back to it, fan/gpu_od.py always writes on it). A sampled pwm is not
    guessed that way (``GpuReading.pwm_ratio``): there the range is the card's to say.
    """
    if pwm is None:
        return None
    return pwm_ratio(pwm, gpu.pwm_min if gpu else None, (gpu.pwm_max if gpu else None) or PWM_MAX_DEFAULT)


def fan_families(state: PublishedState) -> list[Family]:
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
    # Straight into the rows (label values as a tuple): an add_metric call per series was a tenth of the render.
    mode_rows = mode.rows
    for fan in state.fans:
        gpu = state.snapshot.gpu(fan.gpu_id)
        labels = (fan.gpu_id,)
        for known, label in _FAN_MODES:
            mode_rows.append(((fan.gpu_id, label), 1 if fan.mode == known else 0))
        backend.rows.append(((fan.gpu_id, fan.backend), 1))
        for family, value in (
            (target, fan.target_ratio), (applied, _duty(fan.applied_pwm, gpu)),
            (readback, _duty(fan.readback_pwm, gpu)), (applied_pwm, fan.applied_pwm),
            (readback_pwm, fan.readback_pwm),
        ):
            if value is not None:
                family.rows.append((labels, value))
        if fan.sensor is not None and fan.sensor_temp_c is not None:
            sensor.rows.append(((fan.gpu_id, fan.sensor), fan.sensor_temp_c))
        stalled.rows.append((labels, 1 if fan.stalled else 0))
        resets.rows.append((labels, fan.mode_resets_total))
        write_errors.rows.append((labels, fan.write_errors_total))
        stalls.rows.append((labels, fan.stalls_total))
    return [mode, backend, target, applied, readback, applied_pwm, readback_pwm, sensor, stalled, resets,
            write_errors, stalls]


def trainer_families(trainers: tuple[TrainerState, ...], gpu_ids: list[str]) -> list[Family]:
    t = ["trainer"]
    # No user label: /metrics is read by anyone (publish/redact.py); who runs it is in the full /status.
    info = gauge("trainer_info", "Supervised training command and the GPUs it uses (always 1); origin: configured "
                 "([[trainer]]) or attached (`gpuwatch train`), job_id: an attached run's Slurm job (\"\": none).",
                 ["trainer", "gpus", "origin", "job_id"])
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
    heartbeat_errors = counter("trainer_heartbeat_read_errors", "Heartbeat files refused or unreadable (a FIFO, a "
                               "link, too large: not a regular file of at most 64 KiB).", t)
    steps = counter("trainer_steps", "Training steps reported by the trainer's heartbeat.", t)
    rate = gauge("trainer_steps_per_second", "Training speed from the heartbeat.", t)
    age = gauge("trainer_last_step_age_seconds", "Seconds since the trainer last reported a step.", t)
    epoch = gauge("trainer_epoch", "Current epoch reported by the trainer.", t)
    failed = gauge("trainer_failed_info", "1 while the trainer is failed (given up on), with why in the reason "
                   "label: its class, without the detail (spawn failed, failed; the detail is in `gpuwatch "
                   "status`); absent otherwise.", ["trainer", "reason"])
    run_energy = gauge("trainer_run_energy_joules", "Energy the trainer's GPUs used during its current "
                       "(or last) run.", t)
    energy = counter("trainer_energy_joules", "Energy the trainer's GPUs used over all its runs since the "
                     "daemon started.", t)
    per_kj = gauge("trainer_steps_per_kilojoule", "Training steps per kilojoule of GPU energy in the current run.", t)
    ranks = gauge("trainer_ranks", "Ranks of a distributed training job on this machine.", t)
    ranks_held = gauge("trainer_ranks_held", "Of the job's ranks on this machine, those holding at its pause.", t)
    job_ranks = gauge("trainer_job_ranks", "Ranks of a distributed training job on every machine (world size).", t)
    for trainer in trainers:  # straight into the rows, label values as a tuple (as fan_families)
        name = (trainer.name,)
        info.rows.append(((trainer.name, ",".join(trainer.gpus), trainer.origin, trainer.job_id or ""), 1))
        for gpu_id in trainer.gpus or gpu_ids:
            on_gpu.rows.append(((trainer.name, gpu_id), 1))
        for known, label in _TRAINER_PHASES:
            phase.rows.append(((trainer.name, label), 1 if trainer.phase == known else 0))
        running.rows.append((name, 1 if trainer.phase in _RUNNING_PHASES else 0))
        restarts.rows.append((name, trainer.restarts_total))
        for reason, count in trainer.restarts_by_reason:
            by_reason.rows.append(((trainer.name, reason), count))
        pauses.rows.append((name, trainer.pauses_total))
        resumes.rows.append((name, trainer.resumes_total))
        heartbeat_errors.rows.append((name, trainer.heartbeat_read_errors_total))
        if trainer.phase is TrainerPhase.FAILED:
            failed.rows.append(((trainer.name, reason_class(trainer.reason) or ""), 1))
        energy.rows.append((name, trainer.energy_total_j))
        for family, value in (
            (start, trainer.started_unix), (paused_since, trainer.paused_since_unix),
            (next_start, trainer.next_start_unix), (exit_code, trainer.last_exit_code), (steps, trainer.steps_total),
            (rate, trainer.steps_per_s), (age, trainer.last_step_age_s), (epoch, trainer.epoch),
            (run_energy, trainer.run_energy_j), (per_kj, trainer.steps_per_kj),
            (ranks, trainer.ranks), (ranks_held, trainer.ranks_held), (job_ranks, trainer.world_size),
        ):
            if value is not None:
                family.rows.append((name, value))
    return [info, on_gpu, phase, running, start, paused_since, next_start, exit_code, restarts, by_reason, pauses,
            resumes, heartbeat_errors, steps, rate, age, epoch, failed, run_energy, energy, per_kj, ranks, ranks_held,
            job_ranks]


def power_families(state: PublishedState) -> list[Family]:
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
    mode_rows = mode.rows  # straight into the rows, as fan_families
    for power in state.powers:
        labels = (power.gpu_id,)
        for known, label in _POWER_MODES:
            mode_rows.append(((power.gpu_id, label), 1 if power.mode == known else 0))
        for family, value in ((target, power.target_cap_w), (original, power.original_cap_w),
                              (floor, power.floor_cap_w), (kept, power.throughput_kept_ratio)):
            if value is not None:
                family.rows.append((labels, value))
        capped.rows.append((labels, power.capped_seconds_total))
        writes.rows.append((labels, power.writes_total))
        errors.rows.append((labels, power.write_errors_total))
    return [mode, target, original, floor, capped, kept, writes, errors]
