"""The typed shape of the status document, schema 1: what ``document.to_document`` builds and the CLI reads.

Field names are the model's field names (units in the name); absent values are ``null``, never 0. The
README's "JSON schema" section documents it; a test keeps these TypedDicts equal to what ``to_document``
builds. Additions are allowed, renames are not.
"""

from __future__ import annotations

from typing import Literal, TypedDict

SCHEMA_VERSION = 1

Source = Literal["daemon", "sysfs"]  # who read the GPUs: the running daemon, or this CLI from sysfs


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


class TemperatureDoc(TypedDict):
    temp_c: float | None
    crit_c: float | None
    crit_hyst_c: float | None
    emergency_c: float | None
    limit_c: float | None  # gpuwatch's pause/alarm limit in force (PublishedState.limits_c)


class ErrorDoc(TypedDict):
    sensor: str
    error: str


class ProcessDoc(TypedDict):  # model.GpuProcess
    pid: int
    gpu_id: str
    command: str
    user: str | None
    trainer: str | None
    state: str | None
    vram_bytes: int | None
    gtt_bytes: int | None
    engine_busy_ratio: float | None
    kfd: bool
    kfd_vram_bytes: int | None
    kfd_cu_occupancy_ratio: float | None
    sampled_unix: float | None
    job_id: str | None  # the scheduler job (Slurm cgroup, else the GPU's job mapping file)


class GpuDoc(TypedDict):  # model.GpuReading without temps/errors, plus what is derived from it
    gpu_id: str
    card: str
    backend: str
    name: str | None
    device_id: str | None
    subsystem_id: str | None
    unique_id: str | None
    vbios_version: str | None
    up: bool
    unresponsive: bool
    runtime_status: str | None
    gpu_busy_ratio: float | None
    mem_busy_ratio: float | None
    vram_used_bytes: int | None
    vram_total_bytes: int | None
    vram_reserved_bytes: int | None
    gtt_used_bytes: int | None
    gtt_total_bytes: int | None
    power_w: float | None
    power_cap_w: float | None
    power_cap_min_w: float | None
    power_cap_max_w: float | None
    power_cap_default_w: float | None
    sclk_hz: float | None
    mclk_hz: float | None
    vddgfx_v: float | None
    fan_rpm: int | None
    fan_min_rpm: int | None
    fan_max_rpm: int | None
    pwm: int | None
    pwm_min: int | None
    pwm_max: int | None
    pwm_enable: int | None
    fan_duty_ratio: float | None
    pcie_link_speed_gts: float | None
    pcie_link_width: int | None
    pcie_max_link_speed_gts: float | None
    pcie_max_link_width: int | None
    gpu_metrics_revision: str | None
    sclk_average_hz: float | None
    mclk_average_hz: float | None
    socclk_hz: float | None
    fclk_average_hz: float | None
    vddsoc_v: float | None
    vddmem_v: float | None
    throttle_status: int | None
    indep_throttle_status: int | None
    throttle_flags: list[str] | None
    throttle_reasons: list[str] | None
    energy_accumulator_j: float | None
    energy_joules: float | None
    energy_source: str | None
    throttled_s: dict[str, float]  # seconds throttled per reason since the daemon started
    pcie_slot_link_speed_gts: float | None
    pcie_slot_link_width: int | None
    pcie_slot_max_link_speed_gts: float | None
    pcie_slot_max_link_width: int | None
    pcie_aer_correctable_total: int | None
    pcie_aer_nonfatal_total: int | None
    pcie_aer_fatal_total: int | None
    pcie_replays_total: int | None
    gpu_busy_sampled_ratio: float | None
    sources: dict[str, str]  # field -> where it came from when not its usual file
    suspended: bool
    pwm_ratio: float | None
    temperatures: dict[str, TemperatureDoc]
    over_limit: list[str]
    fan_controller: FanControllerDoc | None
    power_governor: PowerGovernorDoc | None
    clock_ceiling: ClockCeilingDoc | None  # the clock rung (issue 36); None: no clock controller
    errors: list[ErrorDoc]
    reset: GpuResetDoc | None  # None: reset detection is off (or not an amdgpu GPU)
    unmanaged: UnmanagedDoc | None  # None: no daemon ([unmanaged], docs/supervisor.md)


class UnsupportedDoc(TypedDict):  # model.UnsupportedCard
    card: str
    driver: str | None
    gpu_id: str | None


class _Optional(TypedDict, total=False):
    # Present (true) only in a document whose sensitive fields were blanked for its reader (publish/redact.py).
    # (A total=False base: NotRequired is not seen under ``from __future__ import annotations`` on 3.11.)
    redacted: bool


class StatusDocument(_Optional):
    schema: int
    source: Source
    taken_unix: float
    sample_duration_s: float
    daemon: DaemonDoc | None
    gpus: list[GpuDoc]
    unsupported: list[UnsupportedDoc]
    trainers: list[TrainerDoc]
    processes: list[ProcessDoc]
    processes_unreadable: int
    health: HealthDoc | None  # None: not judged (a direct read without a daemon)
    jobs: list[JobReceiptDoc]
