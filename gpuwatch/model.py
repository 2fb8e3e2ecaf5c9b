"""Frozen readings and states shared by every layer; units live in the field names.

Nothing here does I/O. ``None`` always means "not available" (file absent, sensor unsupported, read
failed); a failed read is additionally recorded in ``GpuReading.errors``. The readings and what one
tick publishes live here, the deciding parts' own states in states.py (re-exported below), a GPU's resets
and the limits in force among them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

# Every layer imports its shared types from here; the states are written in states.py only to keep
# each module under 300 lines.
from gpuwatch.states import ClockBackendName as ClockBackendName
from gpuwatch.states import ClockMode as ClockMode
from gpuwatch.states import ClockState as ClockState
from gpuwatch.states import DaemonInfo as DaemonInfo
from gpuwatch.states import FanBackendName as FanBackendName
from gpuwatch.states import FanMode as FanMode
from gpuwatch.states import FanState as FanState
from gpuwatch.states import GpuResetState as GpuResetState
from gpuwatch.states import HealthFault as HealthFault
from gpuwatch.states import JobGpuReceipt as JobGpuReceipt
from gpuwatch.states import JobReceipt as JobReceipt
from gpuwatch.states import NodeHealth as NodeHealth
from gpuwatch.states import PowerCapBackendName as PowerCapBackendName
from gpuwatch.states import PowerMode as PowerMode
from gpuwatch.states import PowerState as PowerState
from gpuwatch.states import SensorLimit as SensorLimit
from gpuwatch.states import TrainerGpuUse as TrainerGpuUse
from gpuwatch.states import TrainerPhase as TrainerPhase
from gpuwatch.states import TrainerState as TrainerState
from gpuwatch.states import UnmanagedState as UnmanagedState

# Which source read a GPU; published as the reading's "backend" (JSON document, gpuwatch_gpu_info).
SourceName = Literal["amdgpu", "nvml"]
# Where a GPU's energy counter comes from (gpus/accounting.py).
EnergySource = Literal["accumulator", "integrated"]
# Why a card throttles itself: the groups of the kernel's SMU_THROTTLER_* bits (gpus/throttle.py).
THROTTLE_REASONS = ("power", "current", "thermal", "other")
# The pwm range hwmon defines when a card does not say otherwise: the kernel's sysfs-interface
# (Documentation/hwmon/sysfs-interface.rst) has pwm[1-*] "Integer value in the range 0 to 255".
# amdgpu also exposes pwm1_min/pwm1_max; the fan backends fall back to this range without them.
PWM_MAX_DEFAULT = 255


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
        return self.runtime_status == "suspended"

    def temp(self, label: str) -> TempReading | None:
        for reading in self.temps:
            if reading.label == label:
                return reading
        return None

    @property
    def pwm_ratio(self) -> float | None:
        """The sampled pwm as 0-1 of the range the card reports; None without ``pwm1_max``.

        Unlike a duty the fan controller wrote (publish's fan families read those on
        PWM_MAX_DEFAULT's scale, the one the backend wrote on), a sampled pwm of a card that does not
        report its range is not guessed: missing is None (/status ``pwm_ratio``, gpuwatch_gpu_fan_duty_ratio).
        """
        if self.pwm is None or not self.pwm_max:
            return None
        return pwm_ratio(self.pwm, self.pwm_min, self.pwm_max)

    @property
    def fan_duty(self) -> float | None:
        """The fan's duty as sampled, 0-1: pwm1 where the card has one, else the board's own duty (NVML)."""
        return fan_duty(self.pwm_ratio, self.fan_duty_ratio)

    def gone(self, why: str, unresponsive: bool = False) -> GpuReading:
        """This GPU's identity alone, ``up=False``: how a GPU that vanished (or hangs) stays visible to alerts."""
        return GpuReading(
            gpu_id=self.gpu_id, card=self.card, backend=self.backend, name=self.name, device_id=self.device_id,
            subsystem_id=self.subsystem_id, unique_id=self.unique_id, vbios_version=self.vbios_version,
            up=False, unresponsive=unresponsive, errors=(ReadError(sensor="device", error=why),),
        )


def pwm_ratio(pwm: int, pwm_min: int | None, pwm_max: int) -> float | None:
    """A raw pwm value as 0-1 of the card's pwm range (``pwm1_min`` absent: 0); None for an empty range."""
    low = pwm_min or 0
    if pwm_max <= low:
        return None
    return max(0.0, min(1.0, (pwm - low) / (pwm_max - low)))


def fan_duty(pwm_duty_ratio: float | None, board_duty_ratio: float | None) -> float | None:
    """pwm1 wins: it is what the fan is driven by; a board without one (NVML) reports a duty instead.

    A function beside ``GpuReading.fan_duty`` because a remote /status document (cli/fleet.py) carries
    both values (``pwm_ratio``, ``fan_duty_ratio``) but no reading."""
    return pwm_duty_ratio if pwm_duty_ratio is not None else board_duty_ratio


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


@dataclass(frozen=True)
class Acted:
    """What the ladder's rungs published this tick, in their order (empty where a part is off or failed). Each
    rung's ``tick(snapshot, below, config)`` sees the rungs below it in one ``Acted``: a new rung is one field."""

    fans: tuple[FanState, ...] = ()
    powers: tuple[PowerState, ...] = ()
    clocks: tuple[ClockState, ...] = ()
    trainers: tuple[TrainerState, ...] = ()
    unmanaged: tuple[UnmanagedState, ...] = ()
