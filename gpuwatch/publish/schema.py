"""The typed shape of the status document, schema 1: what ``document.to_document`` builds and the CLI reads.

Field names are the model's field names (units in the name); absent values are ``null``, never 0. The
README's "JSON schema" section documents it; a test keeps these TypedDicts equal to what ``to_document``
builds. Additions are allowed, renames are not.
"""

from __future__ import annotations

from typing import Literal, TypedDict

# Every reader imports the document's types from here; the deciding parts' are written in schema_states.py
# only to keep each module under 300 lines.
from gpuwatch.publish.schema_states import ClockCeilingDoc as ClockCeilingDoc
from gpuwatch.publish.schema_states import DaemonDoc as DaemonDoc
from gpuwatch.publish.schema_states import FanControllerDoc as FanControllerDoc
from gpuwatch.publish.schema_states import GpuResetDoc as GpuResetDoc
from gpuwatch.publish.schema_states import HealthDoc as HealthDoc
from gpuwatch.publish.schema_states import HealthFaultDoc as HealthFaultDoc
from gpuwatch.publish.schema_states import JobGpuReceiptDoc as JobGpuReceiptDoc
from gpuwatch.publish.schema_states import JobReceiptDoc as JobReceiptDoc
from gpuwatch.publish.schema_states import PowerGovernorDoc as PowerGovernorDoc
from gpuwatch.publish.schema_states import TrainerDoc as TrainerDoc
from gpuwatch.publish.schema_states import TrainerGpuUseDoc as TrainerGpuUseDoc
from gpuwatch.publish.schema_states import UnmanagedDoc as UnmanagedDoc

SCHEMA_VERSION = 1

Source = Literal["daemon", "sysfs"]  # who read the GPUs: the running daemon, or this CLI from sysfs


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
