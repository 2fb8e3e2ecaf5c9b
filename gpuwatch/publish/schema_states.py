"""The status document's shape of what the deciding parts publish (states.py's states), schema 1.

The fan controller, the power governor and the clock ceiling of each GPU, the trainers and their GPU
use, the processes not run under gpuwatch stopped on a GPU, a GPU's resets, the daemon, the node's
health verdict and the jobs' receipts. Apart from schema.py (which re-exports every name: readers import
from there) only to keep each module under 300 lines, as states.py is apart from model.py; the same rules
hold: the model's field names, ``null`` for absent values, additions allowed, renames not.
"""

from __future__ import annotations

from typing import TypedDict


class FanControllerDoc(TypedDict):  # model.FanState
    gpu_id: str
    backend: str
    mode: str
    sensor: str | None
    sensor_temp_c: float | None
    target_ratio: float | None
    applied_pwm: int | None
    readback_pwm: int | None
    rpm: int | None
    stalled: bool
    mode_resets_total: int
    write_errors_total: int
    stalls_total: int
    message: str | None
    failsafe_reason: str | None
    can_rise: bool


class PowerGovernorDoc(TypedDict):  # model.PowerState
    gpu_id: str
    mode: str
    backend: str | None
    cap_w: float | None
    target_cap_w: float | None
    original_cap_w: float | None
    floor_cap_w: float | None
    pause_allowed: bool
    capped_seconds_total: float
    throughput_kept_ratio: float | None
    writes_total: int
    write_errors_total: int
    reason: str | None


class ClockCeilingDoc(TypedDict):  # model.ClockState
    gpu_id: str
    mode: str
    backend: str | None
    ceiling_mhz: float | None
    target_ceiling_mhz: float | None
    original_mhz: float | None
    floor_mhz: float | None
    pause_allowed: bool
    limited_seconds_total: float
    writes_total: int
    write_errors_total: int
    resets_total: int
    reason: str | None


class TrainerGpuUseDoc(TypedDict):  # model.TrainerGpuUse
    gpu_id: str
    processes: int
    vram_bytes: int | None
    gtt_bytes: int | None
    engine_busy_ratio: float | None
    kfd_vram_bytes: int | None
    kfd_cu_occupancy_ratio: float | None


class TrainerDoc(TypedDict):  # model.TrainerState
    name: str
    phase: str
    gpus: list[str]
    pid: int | None
    started_unix: float | None
    restarts_total: int
    restarts_by_reason: list[list[str | int]]
    pauses_total: int
    resumes_total: int
    last_exit_code: int | None
    last_exit_reason: str | None
    steps_total: int | None
    steps_per_s: float | None
    last_step_age_s: float | None
    epoch: int | None
    reason: str | None
    paused_since_unix: float | None
    next_start_unix: float | None
    log_path: str | None
    run_energy_j: float | None
    energy_total_j: float
    steps_per_kj: float | None
    gpus_used: list[str]
    gpu_use: list[TrainerGpuUseDoc]
    stuck_pids: list[int]
    heartbeat_read_errors_total: int
    ranks: int | None
    ranks_held: int | None
    world_size: int | None
    paused_by: str | None
    origin: str
    user: str | None
    command: str | None
    job_id: str | None


class GpuResetDoc(TypedDict):  # model.GpuResetState without gpu_id
    resets_total: int
    last_reset_unix: float | None
    last_source: str | None
    last_summary: str | None
    dump_path: str | None
    recovering: bool
    stuck_pids: list[int]


class UnmanagedDoc(TypedDict):  # model.UnmanagedState without gpu_id
    on_hot: str  # "report" | "stop"
    stopped_pids: list[int]  # processes not run under gpuwatch held SIGSTOPped past crit now
    stops_total: int
    stopped_since_unix: float | None
    reason: str | None


class DaemonDoc(TypedDict):  # model.DaemonInfo
    pid: int
    version: str
    started_unix: float
    ticks_total: int
    interval_s: float
    failures: list[str]
    boot_id: str | None  # the kernel's boot id: a restarted daemon takes receipts back only from its own boot
    taken_boottime_s: float | None  # CLOCK_BOOTTIME at the tick: staleness on the same boot (publish/state.py)


class HealthFaultDoc(TypedDict):  # model.HealthFault
    code: str
    gpu_id: str | None
    detail: str
    line: str  # gpuwatch:G006 0000:03:00.0 junction 108C>105C fan failsafe


class HealthDoc(TypedDict):  # model.NodeHealth
    healthy: bool
    faults: list[HealthFaultDoc]
    notes: list[str]
    drain_after_checks: int
    resume_after_checks: int


class JobGpuReceiptDoc(TypedDict):  # model.JobGpuReceipt
    gpu_id: str
    energy_j: float
    max_temps_c: dict[str, float]
    governed_s: float
    throttled_s: dict[str, float]
    resets: int
    gap_energy_j: float
    energy_unseen_s: float


class JobReceiptDoc(TypedDict):  # model.JobReceipt
    job_id: str
    user: str | None
    first_seen_unix: float
    last_seen_unix: float
    active: bool
    paused_s: float
    gpus: list[JobGpuReceiptDoc]
    unobserved_s: float
    gaps: list[list[float]]  # [from_unix, to_unix]
    unseen_from: str | None  # "scheduler" | "processes": where the first gap's start came from (receipt_resume)
