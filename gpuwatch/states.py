"""What the deciding parts publish every tick: fan, power-cap and trainer states, and the daemon's health.

Also a GPU's resets and recovery (resets/recovery.py decides; the Snapshot carries them) and each sensor's
limit in force (limits.py decides; the PublishedState carries them).

A leaf (imports nothing): model.py re-exports every name, so the layers import them from ``gpuwatch.model``
as before; they live apart only to keep the readings (model.py) and the decisions each under 300 lines.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Literal

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
    pause_allowed: bool = True  # False while it holds a hot card above its floor: the supervisor waits
    limited_seconds_total: float = 0.0  # time with a ceiling of ours in force
    writes_total: int = 0
    write_errors_total: int = 0
    resets_total: int = 0  # our ceiling found gone (a GPU reset, another tool) and taken again
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
