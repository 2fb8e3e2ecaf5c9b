"""Frozen readings and states shared by every layer; units live in the field names.

Nothing here does I/O. ``None`` always means "not available" (file absent, sensor unsupported, read
failed); a failed read is additionally recorded in ``GpuReading.errors``. The readings, the deciding parts'
states (fan, power cap, clock, trainer, the daemon's health), a GPU's resets and the limits in force, and
what one tick publishes: a module of declarations, long by design.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Literal, TypeVar

from gpuwatch import derived

# Which source read a GPU; published as the reading's "backend" (JSON document, gpuwatch_gpu_info).
SourceName = Literal["amdgpu", "nvml"]
# Where a GPU's energy counter comes from (gpus/accounting.py).
EnergySource = Literal["accumulator", "integrated"]
_Frozen = TypeVar("_Frozen")
_PLAIN_FIELDS: dict[type, frozenset[str] | None] = {}  # a dataclass's field names; None: not plain (``replaced``)


def replaced(instance: _Frozen, **changes: Any) -> _Frozen:
    """``dataclasses.replace(instance, **changes)``, cheaper for the dataclasses of plain fields (every field set by
    ``__init__``, no ``__post_init__``, no slots, as this module's): the instance's fields copied as they are and
    the changes set. replace runs the generated ``__init__`` again, an ``object.__setattr__`` per field when frozen:
    37 µs for a GpuReading's 65, several a GPU every tick (docs/performance.md, issue 52). Any other class goes
    to replace itself; a name that is no field raises replace's TypeError."""
    cls = type(instance)
    if cls not in _PLAIN_FIELDS:
        _PLAIN_FIELDS[cls] = _plain_fields(cls)
    names = _PLAIN_FIELDS[cls]
    if names is None or not names.issuperset(changes):  # not plain, or replace's TypeError for a name
        return dataclasses.replace(instance, **changes)  # type: ignore[type-var]
    copied: _Frozen = object.__new__(cls)
    copied.__dict__.update(instance.__dict__, **changes)
    return copied


def _plain_fields(cls: type) -> frozenset[str] | None:
    if not dataclasses.is_dataclass(cls) or hasattr(cls, "__post_init__") or "__slots__" in cls.__dict__:
        return None
    every = dataclasses.fields(cls)  # an InitVar is not a field: without __post_init__ nothing reads one
    if any(not f.init for f in every):
        return None
    return frozenset(f.name for f in every)


# Why a card throttles itself: the groups of the kernel's SMU_THROTTLER_* bits (gpus/throttle.py).
THROTTLE_REASONS = ("power", "current", "thermal", "other")
# The pwm range hwmon defines when a card does not say otherwise: the kernel's sysfs-interface
# (Documentation/hwmon/sysfs-interface.rst) has pwm[1-*] "Integer value in the range 0 to 255".
# amdgpu also exposes pwm1_min/pwm1_max; the fan backends fall back to this range without them.
PWM_MAX_DEFAULT = 255


# How the fan controller drives a GPU's fan; "none": monitor-only.
FanBackendName = Literal["pwm1", "gpu_od", "none"]
# Where the power governor sets a GPU's cap: amdgpu's hwmon power1_cap, or NVML's power management limit.
PowerCapBackendName = Literal["hwmon", "nvml"]
# How the clock ceiling is set (gpuwatch/clock/): amdgpu's overdrive table, a pp_dpm_sclk level mask, NVML's
# locked clocks.
ClockBackendName = Literal["od_table", "dpm_mask", "nvml"]


class FanMode(str, Enum):
    """What the fan controller is doing for one GPU."""

    CURVE = "curve"
    FAILSAFE = "failsafe"
    MONITOR_ONLY = "monitor-only"
    DRY_RUN = "dry-run"
    # Never produced by the controller, but a value of the published state set
    # gpuwatch_fan_mode{mode=...} (every known value is exported, 0 or 1): removing it removes a series.
    DISABLED = "disabled"
    # The fan should be driven but cannot be written (files gone, writes failing or blocked): it runs
    # on whatever the firmware or the last write left, not on the curve. Not "failsafe" (no 100 %).
    UNCONTROLLED = "uncontrolled"


class PowerMode(str, Enum):
    """What the power-cap governor is doing for one GPU (docs/power.md)."""

    IDLE = "idle"  # the cap found at start is in force; a hot card pauses as without the governor
    GOVERNING = "governing"  # the cap is lowered to hold the hottest sensor under its pause limit
    FLOOR = "floor"  # governing at the floor cap: a card still over its limit is paused
    UNAVAILABLE = "unavailable"  # no writable cap on this GPU (``PowerState.reason`` says why): pause only
    DRY_RUN = "dry-run"  # decisions are logged, nothing is written: pause only
    OFF = "off"  # power.mode = "off" for this GPU


class ClockMode(str, Enum):
    """What the clock-ceiling rung is doing for one GPU (docs/power.md, "The clock rung")."""

    IDLE = "idle"  # no ceiling of ours in force
    LIMITING = "limiting"  # a ceiling below the card's own maximum is in force
    FLOOR = "floor"  # the ceiling is at its own floor: a card still over its limit is paused
    UNAVAILABLE = "unavailable"  # no settable ceiling (``ClockState.reason`` says why): pause at the cap floor
    DRY_RUN = "dry-run"  # decisions are logged, nothing is written
    OFF = "off"  # power.clock = "off" for this GPU


class TrainerPhase(str, Enum):
    """Supervisor state of one training command."""

    STARTING = "starting"
    RUNNING = "running"
    PAUSING = "pausing"
    PAUSED = "paused"
    STOPPING = "stopping"
    BACKOFF = "backoff"
    FAILED = "failed"
    STOPPED = "stopped"
    FINISHED = "finished"
    SUSPENDED = "suspended"  # an attached run its user stopped (Ctrl-Z on `gpuwatch train`): not running, not hung


@dataclass(frozen=True)
class FanState:
    """What the fan controller decided and observed for one GPU this tick."""

    gpu_id: str
    backend: FanBackendName
    mode: FanMode
    sensor: str | None = None
    sensor_temp_c: float | None = None
    target_ratio: float | None = None
    applied_pwm: int | None = None
    readback_pwm: int | None = None
    rpm: int | None = None
    stalled: bool = False
    mode_resets_total: int = 0
    write_errors_total: int = 0
    stalls_total: int = 0
    message: str | None = None
    failsafe_reason: str | None = None
    # False when a hotter card would get no more air from this fan: at the curve's top, failsafe, stalled,
    # or not driven by gpuwatch. The power governor acts only then.
    can_rise: bool = True


@dataclass(frozen=True)
class PowerState:
    """What the power-cap governor decided and observed for one GPU this tick (watts throughout)."""

    gpu_id: str
    mode: PowerMode
    backend: PowerCapBackendName | None = None
    cap_w: float | None = None  # the cap in force, as read back
    target_cap_w: float | None = None  # the cap the governor wants (what dry-run would write)
    original_cap_w: float | None = None  # found at start (or in the restore file); restored on exit
    floor_cap_w: float | None = None
    pause_allowed: bool = True  # False while it holds a hot card above the floor: the supervisor waits
    capped_seconds_total: float = 0.0  # time with a cap below the original in force
    throughput_kept_ratio: float | None = None  # estimate: (cap / original) ** (1/3) while the cap binds
    writes_total: int = 0
    write_errors_total: int = 0
    reason: str | None = None  # why unavailable, or what the last write did wrong


@dataclass(frozen=True)
class ClockState:
    """What the clock-ceiling rung decided and observed for one GPU this tick (MHz throughout)."""

    gpu_id: str
    mode: ClockMode
    backend: ClockBackendName | None = None
    ceiling_mhz: float | None = None  # the ceiling of ours in force, as read back (None: none of ours)
    target_ceiling_mhz: float | None = None  # the one the law wants (what dry-run would write)
    original_mhz: float | None = None  # the card's own maximum found at start; restored on exit
    floor_mhz: float | None = None  # the lowest ceiling it sets; still hot there: pause
    # The lowest ceiling the card took; it refused the step under it (EINVAL: its unprinted GfxclkFmax
    # minimum): the ladder ends here for this run (None: no refusal seen).
    card_floor_mhz: float | None = None
    pause_allowed: bool = True  # False while it holds a hot card above its floor: the supervisor waits
    limited_seconds_total: float = 0.0  # time with a ceiling of ours in force
    writes_total: int = 0
    write_errors_total: int = 0
    resets_total: int = 0  # our ceiling found gone (a GPU reset, another tool) and taken again
    # The card runs above our ceiling under load after a second commit (the firmware ignores it): pause allowed.
    not_in_force: bool = False
    reason: str | None = None  # why unavailable, or what the last write did wrong


@dataclass(frozen=True)
class TrainerGpuUse:
    """What one trainer's process tree holds on one GPU this tick (its GpuProcess rows summed)."""

    gpu_id: str
    processes: int = 0
    vram_bytes: int | None = None
    gtt_bytes: int | None = None
    engine_busy_ratio: float | None = None
    kfd_vram_bytes: int | None = None
    kfd_cu_occupancy_ratio: float | None = None


@dataclass(frozen=True)
class TrainerState:
    """Published state of one supervised training command."""

    name: str
    phase: TrainerPhase
    gpus: tuple[str, ...] = ()
    pid: int | None = None
    started_unix: float | None = None
    restarts_total: int = 0
    restarts_by_reason: tuple[tuple[str, int], ...] = ()
    pauses_total: int = 0
    resumes_total: int = 0
    last_exit_code: int | None = None
    last_exit_reason: str | None = None
    steps_total: int | None = None
    steps_per_s: float | None = None
    last_step_age_s: float | None = None
    epoch: int | None = None
    reason: str | None = None
    paused_since_unix: float | None = None
    next_start_unix: float | None = None
    log_path: str | None = None
    # Energy of the GPUs the trainer runs on (supervise/energy.py): this run, every run since the
    # daemon started, and training steps per kilojoule of this run.
    run_energy_j: float | None = None
    energy_total_j: float = 0.0
    steps_per_kj: float | None = None
    gpus_used: tuple[str, ...] = ()  # the GPUs its tree was seen using (what a trainer without `gpus` is judged on)
    gpu_use: tuple[TrainerGpuUse, ...] = ()
    stuck_pids: tuple[int, ...] = ()  # left behind after SIGKILL (D state): the host may need a reboot
    # Heartbeat files refused or unreadable since the daemon started (a FIFO, a link, too large: heartbeat.py).
    heartbeat_read_errors_total: int = 0
    ranks: int | None = None  # a distributed job's ranks on this machine (None: not one)
    ranks_held: int | None = None  # of those, holding at the job's pause
    world_size: int | None = None  # the job's ranks on every machine
    paused_by: str | None = None  # "node-b: hot ..." while held: the node that asked and why
    # Where the run comes from: "configured" ([[trainer]], started by the daemon) or "attached" (`gpuwatch
    # train` from any user's shell, supervise/attached_runs.py); who runs it (the kernel's peer credentials,
    # None for a configured trainer without `user`), its argv joined (attached only) and its Slurm job.
    origin: str = "configured"
    user: str | None = None
    command: str | None = None
    job_id: str | None = None


@dataclass(frozen=True)
class UnmanagedState:
    """GPU processes not run under gpuwatch that the daemon holds SIGSTOPped on one GPU past crit
    (supervise/unmanaged.py); ``on_hot`` is the policy in force ("report" never stops any)."""

    gpu_id: str
    on_hot: str
    stopped_pids: tuple[int, ...] = ()
    stops_total: int = 0  # processes stopped on this GPU since the daemon started
    stopped_since_unix: float | None = None  # the oldest stop in force
    reason: str | None = None  # why they are stopped: the crit reading


@dataclass(frozen=True)
class GpuResetState:
    """Resets of one GPU seen since the daemon started, and whether it is usable again."""

    gpu_id: str
    resets_total: int = 0
    last_reset_unix: float | None = None
    last_source: str | None = None  # "devcoredump" or "wedged uevent"
    last_summary: str | None = None  # what the dump (or the uevent) says, one line
    dump_path: str | None = None  # the kept copy of the kernel's devcoredump
    recovering: bool = False  # since the last reset: not answering yet, or held by a stuck process
    stuck_pids: tuple[int, ...] = ()  # processes in D state holding it after the reset
    # One of them has held it past resets.recovery.STUCK_REPORT_S: a normal recovery has processes in D for a
    # few seconds; only this one is a recovery that failed (and may need a reboot).
    stuck_past_deadline: bool = False


@dataclass(frozen=True)
class SensorLimit:
    """The pause/alarm limit in force for one sensor of one GPU (``limits.limits_in_force``)."""

    gpu_id: str
    sensor: str  # the TempReading's label: edge, junction, mem
    limit_c: float


@dataclass(frozen=True)
class DaemonInfo:
    """Health of the daemon itself, published with every tick."""

    pid: int
    version: str
    started_unix: float
    ticks_total: int = 0
    interval_s: float = 1.0
    failures: tuple[str, ...] = ()
    boot_id: str | None = None  # /proc/sys/kernel/random/boot_id: the next daemon trusts only its own boot
    # CLOCK_BOOTTIME at the tick: a reader on the same boot judges staleness by it, not by wall clocks that can
    # step (publish/state.py, state_age).
    taken_boottime_s: float | None = None


@dataclass(frozen=True)
class HealthFault:
    """One reason the node is not healthy (publish/verdict.py): a stable code per fault class (docs/cluster.md)."""

    code: str  # "G006"
    gpu_id: str | None  # None: the node (the daemon)
    detail: str  # "junction 108C>105C fan failsafe"; the line readers parse: publish.health_codes.fault_line


@dataclass(frozen=True)
class NodeHealth:
    """The node's verdict for a scheduler: healthy unless a fault class that is on found a fault. ``notes``
    are normal operation worth a warning (a cap governing, a trainer paused): never unhealthy."""

    healthy: bool
    faults: tuple[HealthFault, ...] = ()
    notes: tuple[str, ...] = ()
    drain_after_checks: int = 2  # the [health] settings `gpuwatch health --slurm` counts with
    resume_after_checks: int = 2


@dataclass(frozen=True)
class JobGpuReceipt:
    """What one job's time on one GPU cost and saw (publish/receipts.py): counters are increases while it ran."""

    gpu_id: str
    energy_j: float = 0.0
    max_temps_c: tuple[tuple[str, float], ...] = ()  # (sensor, highest temperature seen)
    governed_s: float = 0.0  # with a power cap below the original in force
    throttled_s: tuple[tuple[str, float], ...] = ()  # (reason, seconds the card throttled itself)
    resets: int = 0
    gap_energy_j: float = 0.0  # of energy_j: what the GPU's own counter grew by while no daemon ran (receipt_resume.py)
    energy_unseen_s: float = 0.0  # seconds no daemon ran whose energy is not in energy_j (the counter not continuous)


@dataclass(frozen=True)
class JobStart:
    """When a job started on this node, and who said so: its cgroup's creation by the scheduler, else the
    earliest start of its processes seen on a GPU."""

    start_unix: float
    source: Literal["scheduler", "processes"]


@dataclass(frozen=True)
class JobReceipt:
    """A scheduler job's thermal and energy receipt, kept while its processes use a GPU and after (the last K)."""

    job_id: str
    user: str | None = None
    first_seen_unix: float = 0.0
    last_seen_unix: float = 0.0
    active: bool = True  # a process of the job used a GPU at the last tick
    paused_s: float = 0.0  # its trainer held at a pause
    gpus: tuple[JobGpuReceipt, ...] = ()
    unobserved_s: float = 0.0  # seconds of the job while no daemon ran (restarts, crashes): nothing seen then
    gaps: tuple[tuple[float, float], ...] = ()  # (from_unix, to_unix) of those times, the last few
    # A job already running when a daemon that took no receipts back first saw it: where the start of its first
    # gap came from, "scheduler" (its Slurm cgroup's creation) or "processes" (their earliest start); else None.
    unseen_from: str | None = None


@dataclass(frozen=True)
class TempReading:
    """One labelled temperature sensor (edge, junction or mem)."""

    label: str
    temp_c: float | None
    crit_c: float | None = None
    crit_hyst_c: float | None = None
    emergency_c: float | None = None


def at_crit(temp_c: float | None, crit_c: float | None) -> bool:
    """At or above the card's own crit temperature; False when either is unknown. The one rule behind the
    fan's full speed (fan/curve.py) and the supervisor's emergency stop (supervise/actions.py)."""
    return temp_c is not None and crit_c is not None and temp_c >= crit_c


@dataclass(frozen=True)
class ReadError:
    """A file that exists but could not be read or parsed this tick."""

    sensor: str
    error: str


@dataclass(frozen=True)
class GpuReading:
    """Everything sampled from one GPU in one tick. Identity is the PCI slot (``gpu_id``)."""

    gpu_id: str
    card: str
    backend: SourceName
    name: str | None = None
    device_id: str | None = None
    subsystem_id: str | None = None
    unique_id: str | None = None
    vbios_version: str | None = None
    up: bool = True
    # Down because its sysfs reads hang (they missed the read deadline), not because it is gone: the
    # fan controller then runs its fan at full speed instead of leaving it alone.
    unresponsive: bool = False
    runtime_status: str | None = None
    temps: tuple[TempReading, ...] = ()
    gpu_busy_ratio: float | None = None
    mem_busy_ratio: float | None = None
    vram_used_bytes: int | None = None
    vram_total_bytes: int | None = None
    # Memory the driver keeps for itself, not in vram_used_bytes (NVML's v2 memory query; nvidia-smi's "reserved").
    vram_reserved_bytes: int | None = None
    gtt_used_bytes: int | None = None
    gtt_total_bytes: int | None = None
    power_w: float | None = None
    power_cap_w: float | None = None
    power_cap_min_w: float | None = None
    power_cap_max_w: float | None = None
    power_cap_default_w: float | None = None
    sclk_hz: float | None = None
    mclk_hz: float | None = None
    vddgfx_v: float | None = None
    fan_rpm: int | None = None
    fan_min_rpm: int | None = None
    fan_max_rpm: int | None = None
    pwm: int | None = None
    pwm_min: int | None = None
    pwm_max: int | None = None
    pwm_enable: int | None = None
    # Fan duty as the board reports it when there is no pwm register to read (NVML's fan speed %).
    fan_duty_ratio: float | None = None
    pcie_link_speed_gts: float | None = None
    pcie_link_width: int | None = None
    pcie_max_link_speed_gts: float | None = None
    pcie_max_link_width: int | None = None
    # What hwmon lacks, from amdgpu's gpu_metrics table (gpus/gpu_metrics.py, merged by gpus/telemetry.py).
    gpu_metrics_revision: str | None = None
    sclk_average_hz: float | None = None
    mclk_average_hz: float | None = None
    socclk_hz: float | None = None
    fclk_average_hz: float | None = None
    vddsoc_v: float | None = None
    vddmem_v: float | None = None
    throttle_status: int | None = None  # the firmware's raw bits
    indep_throttle_status: int | None = None  # the kernel's SMU_THROTTLER_* bits, raw
    throttle_flags: tuple[str, ...] | None = None  # named bits set (hotspot quirk applied); None: unknown
    throttle_reasons: tuple[str, ...] | None = None  # power, current, thermal, other; None: unknown
    energy_accumulator_j: float | None = None  # the firmware's counter (wraps at 65 536 J on RX 6000)
    # Kept across ticks by the sampler (gpus/accounting.py): joules since the daemon started, and
    # seconds throttled per reason.
    energy_joules: float | None = None
    energy_source: EnergySource | None = None
    throttled_s: tuple[tuple[str, float], ...] = ()
    # PCIe health (gpus/pcie.py): the link at the slot (behind the card's own switch), AER totals.
    pcie_slot_link_speed_gts: float | None = None
    pcie_slot_link_width: int | None = None
    pcie_slot_max_link_speed_gts: float | None = None
    pcie_slot_max_link_width: int | None = None
    pcie_aer_correctable_total: int | None = None
    pcie_aer_nonfatal_total: int | None = None
    pcie_aer_fatal_total: int | None = None
    pcie_replays_total: int | None = None
    # pyamdgpuinfo (gpus/amdgpuinfo.py): the graphics pipe's busy bit sampled from its register.
    gpu_busy_sampled_ratio: float | None = None
    # Values not read from their usual file, as (field, source): ("fan_rpm", "gpu_metrics").
    sources: tuple[tuple[str, str], ...] = ()
    errors: tuple[ReadError, ...] = ()

    @property
    def suspended(self) -> bool:
        return derived.suspended(self.runtime_status)

    def temp(self, label: str) -> TempReading | None:
        for reading in self.temps:
            if reading.label == label:
                return reading
        return None

    @property
    def pwm_ratio(self) -> float | None:
        """The sampled pwm as 0-1 of the range the card reports (``derived.sampled_pwm_ratio``)."""
        return derived.sampled_pwm_ratio(self.pwm, self.pwm_min, self.pwm_max)

    @property
    def fan_duty(self) -> float | None:
        """The fan's duty as sampled, 0-1: pwm1 where the card has one, else the board's own duty (NVML)."""
        return derived.fan_duty(self.pwm_ratio, self.fan_duty_ratio)

    def gone(self, why: str, unresponsive: bool = False) -> GpuReading:
        """This GPU's identity alone, ``up=False``: how a GPU that vanished (or hangs) stays visible to alerts."""
        return GpuReading(
            gpu_id=self.gpu_id, card=self.card, backend=self.backend, name=self.name, device_id=self.device_id,
            subsystem_id=self.subsystem_id, unique_id=self.unique_id, vbios_version=self.vbios_version,
            up=False, unresponsive=unresponsive, errors=(ReadError(sensor="device", error=why),),
        )


@dataclass(frozen=True)
class UnsupportedCard:
    """A DRM card that gpuwatch lists but never reads (another driver)."""

    card: str
    driver: str | None
    gpu_id: str | None = None


@dataclass(frozen=True)
class GpuProcess:
    """One process's use of one GPU, from its DRM fdinfo (and KFD's per-process files for ROCm).

    A DRM client shared by several fds or processes (dup, fork: DataLoader workers) is counted once, in
    the process listed first (a supervised tree's, then the lowest pid). ``engine_busy_ratio`` is the
    client's drm-engine-* time over wall time between two reads: ROCm compute submitted through
    /dev/kfd never shows there (it bypasses the kernel scheduler), ``kfd_*`` do.
    """

    pid: int
    gpu_id: str
    command: str
    user: str | None = None
    trainer: str | None = None  # the supervised trainer whose process tree it belongs to
    state: str | None = None  # /proc stat letter; "D" if any thread is in uninterruptible sleep (checked after a reset)
    vram_bytes: int | None = None  # resident VRAM of its DRM clients
    gtt_bytes: int | None = None
    engine_busy_ratio: float | None = None  # None until the second read; may exceed 1 (several engines)
    kfd: bool = False  # it has /dev/kfd open (ROCm)
    kfd_vram_bytes: int | None = None  # /sys/class/kfd/kfd/proc/<pid>/vram_<gpu_id>
    kfd_cu_occupancy_ratio: float | None = None  # stats_<gpu_id>/cu_occupancy over the GPU's compute units
    sampled_unix: float | None = None  # when read; unsupervised processes are re-read every scan_all_every_s
    job_id: str | None = None  # the scheduler job it runs in: its Slurm cgroup, else the GPU's job mapping file


@dataclass(frozen=True)
class Snapshot:
    """One tick's readings of every GPU. ``taken_unix`` is wall time, ``taken_monotonic`` for ages.

    ``processes`` and ``resets`` are filled after sampling, by the process monitor and the reset
    watch (daemon/sense.py), from the same tick."""

    taken_unix: float
    taken_monotonic: float
    gpus: tuple[GpuReading, ...]
    unsupported: tuple[UnsupportedCard, ...] = ()
    sample_duration_s: float = 0.0
    processes: tuple[GpuProcess, ...] = ()
    processes_unreadable: int = 0  # processes whose fds may not be read (another user's, without CAP_SYS_PTRACE)
    resets: tuple[GpuResetState, ...] = ()

    def gpu(self, gpu_id: str) -> GpuReading | None:
        for reading in self.gpus:
            if reading.gpu_id == gpu_id:
                return reading
        return None


@dataclass(frozen=True)
class PublishedState:
    """What one tick publishes: read by /metrics, /status and the state file for the CLI.

    ``limits_c`` are the thermal limits in force at this tick: /metrics and the document read them
    here and keep no ``[thermal]`` of their own, so a reload's new one reaches both with the next tick.
    A sensor without a limit (neither configured nor derivable from crit) has no entry.
    """

    snapshot: Snapshot
    daemon: DaemonInfo | None = None
    fans: tuple[FanState, ...] = ()
    trainers: tuple[TrainerState, ...] = ()
    powers: tuple[PowerState, ...] = ()
    read_errors_total: tuple[tuple[str, str, int], ...] = field(default=())
    limits_c: tuple[SensorLimit, ...] = ()
    unmanaged: tuple[UnmanagedState, ...] = ()  # per GPU: processes not run under gpuwatch, stopped past crit
    health: NodeHealth | None = None  # the node's verdict (publish/verdict.py); None: not judged (a direct read)
    jobs: tuple[JobReceipt, ...] = ()  # the receipts of the jobs seen on the GPUs, the last [health] jobs_kept
    clocks: tuple[ClockState, ...] = ()  # per GPU: the clock rung (issue 36)
    # (gpu_id, rung) per GPU that is up: the highest rung of fan -> cap -> clock -> pause in use (publish.live.rung_of,
    # which needs the tick's fan settings: computed when the state is built, daemon/loop.py)
    ladder_rungs: tuple[tuple[str, str], ...] = ()

    def limit_c(self, gpu_id: str, sensor: str) -> float | None:
        """The limit in force for one sensor; None when it has none."""
        for limit in self.limits_c:
            if limit.gpu_id == gpu_id and limit.sensor == sensor:
                return limit.limit_c
        return None


# The status document as a reader decodes it (publish/view.py from publish/document.py's JSON): model's own
# dataclasses wherever the document carries one, and below what the document adds around them. A new published
# field is one line in its dataclass (plus its encoding in publish/document.py when it is derived).

# Who read the GPUs of a status document: the running daemon, or the CLI itself from sysfs.
Source = Literal["daemon", "sysfs"]


@dataclass(frozen=True)
class PublishedTemp:
    """One sensor of a GPU as published: the reading (its label is the key) and the limit in force for it."""

    temp_c: float | None = None
    crit_c: float | None = None
    crit_hyst_c: float | None = None
    emergency_c: float | None = None
    limit_c: float | None = None  # gpuwatch's pause/alarm limit in force (PublishedState.limits_c)


@dataclass(frozen=True)
class PublishedGpu(GpuReading):
    """One GPU as the document publishes it: its reading (``temps`` as ``temperatures``, by label, with their
    limits) and, per GPU, the sensors over their limit and what the daemon does with it (None: not done)."""

    temperatures: dict[str, PublishedTemp] = field(default_factory=dict)
    over_limit: tuple[str, ...] = ()
    fan_controller: FanState | None = None
    power_governor: PowerState | None = None
    clock_ceiling: ClockState | None = None
    reset: GpuResetState | None = None  # None: reset detection is off (or not an amdgpu GPU)
    unmanaged: UnmanagedState | None = None  # None: no daemon ([unmanaged], docs/supervisor.md)


@dataclass(frozen=True)
class StatusView:
    """A status document (schema 1) decoded: what `gpuwatch status`, its process table and the fleet view render."""

    schema: int
    taken_unix: float
    source: Source = "daemon"
    sample_duration_s: float = 0.0
    daemon: DaemonInfo | None = None
    gpus: tuple[PublishedGpu, ...] = ()
    unsupported: tuple[UnsupportedCard, ...] = ()
    trainers: tuple[TrainerState, ...] = ()
    processes: tuple[GpuProcess, ...] = ()
    processes_unreadable: int = 0
    health: NodeHealth | None = None  # None: not judged (a direct read without a daemon)
    jobs: tuple[JobReceipt, ...] = ()
    redacted: bool = False  # its sensitive fields were blanked for its reader (publish/redact.py)


@dataclass(frozen=True)
class Acted:
    """What the ladder's rungs published this tick, in their order (empty where a part is off or failed). Each
    rung's ``tick(snapshot, below, config)`` sees the rungs below it in one ``Acted``: a new rung is one field."""

    fans: tuple[FanState, ...] = ()
    powers: tuple[PowerState, ...] = ()
    clocks: tuple[ClockState, ...] = ()
    trainers: tuple[TrainerState, ...] = ()
    unmanaged: tuple[UnmanagedState, ...] = ()
