"""The configuration boundary: pydantic v2 models (extra keys forbidden) loaded from TOML.

Every other module receives these validated objects. A bad file raises ``ConfigError`` whose message
names the key, the offending value and the rule; the CLI turns it into exit code 2.
"""

from __future__ import annotations

import os
import re
import tomllib
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

import tomli_w
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

DEFAULT_CONFIG_PATH = Path("/etc/gpuwatch/gpuwatch.toml")
DEFAULT_HTTP_PORT = 9840
CONFIG_ERROR_EXIT = 2
# A GPU's id everywhere in gpuwatch: its PCI slot as sysfs names it (domain:bus:device.function, lower
# case), e.g. 0000:28:00.0; lspci's short form 28:00.0 leaves out the domain.
PCI_SLOT = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
# The systemd unit's RuntimeDirectory=gpuwatch, and root's default runtime_dir.
SYSTEM_RUNTIME_DIR = Path("/run/gpuwatch")
# In the runtime directory: the published state (`gpuwatch status`) and the supervisor's control socket.
STATE_FILE_NAME = "state.json"
CONTROL_SOCKET_NAME = "control.sock"
# The longest one GPU's sysfs reads (or its fan's writes) may hold a tick before the GPU counts as
# unresponsive (docs/robustness.md). A whole GPU reads in well under 10 ms (benchmarks/poll_cycle.py);
# only a driver that is really stuck (an SMU message that never completes, a reset) waits this out.
DEFAULT_SYSFS_DEADLINE_S = 1.0


class ConfigError(Exception):
    """The configuration file cannot be used; the message is meant for the user as is."""


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ThermalConfig(Strict):
    """Thermal limits shared by `gpuwatch status` (exit code 1) and the supervisor's pause policy.

    A limit left unset is derived from the card's own crit temperature (junction crit - margin,
    mem crit - margin); edge has a fixed default because its crit is often far above a sane limit.
    """

    edge_limit_c: float | None = Field(default=90.0, gt=0, le=150)
    junction_limit_c: float | None = Field(default=None, gt=0, le=150)
    mem_limit_c: float | None = Field(default=None, gt=0, le=150)
    junction_crit_margin_c: float = Field(default=10.0, ge=0, le=50)
    mem_crit_margin_c: float = Field(default=5.0, ge=0, le=50)
    hysteresis_c: float = Field(default=5.0, ge=0, le=30)


Point = tuple[float, float]  # (temp_c, speed_percent)
SensorChoice = Literal["auto", "junction", "edge", "mem"]  # the sensor a fan curve follows

# The curve the seeds ran by hand: below 65 °C 50 %, then 60-70, 70-85, 85-100, >= 95 °C 100 %.
# The 64 °C point makes "below 65 -> 50 %" a 1 °C ramp, since temperatures must strictly increase.
DEFAULT_CURVE: tuple[Point, ...] = ((64.0, 50.0), (65.0, 60.0), (75.0, 70.0), (85.0, 85.0), (95.0, 100.0))


def validate_points(points: Sequence[Sequence[float]]) -> list[str]:
    """Human-readable problems with a curve; empty when it is usable."""
    problems = []
    if not points:
        return ["needs at least one point"]
    for i, point in enumerate(points):
        if len(point) != 2:
            problems.append(f"point {i} {list(point)!r} must be [temp_c, speed_percent]")
    if problems:
        return problems
    for i, (temp_c, speed) in enumerate(points):
        if not 0 <= speed <= 100:
            problems.append(f"point {i} speed {speed} must be within 0..100 %")
        if not -50 <= temp_c <= 150:
            problems.append(f"point {i} temperature {temp_c} must be within -50..150 °C")
        if i:
            prev_t, prev_s = points[i - 1]
            if temp_c <= prev_t:
                problems.append(f"point {i} temperature {temp_c} must be above the previous point's {prev_t}")
            if speed < prev_s:
                problems.append(f"point {i} speed {speed} must not be below the previous point's {prev_s}")
    return problems


def pci_slot_problem(text: str) -> str | None:
    """Why ``text`` is not a PCI slot as gpuwatch names GPUs, or None when it is one."""
    if PCI_SLOT.match(text):
        return None
    if PCI_SLOT.match(f"0000:{text}".lower()):
        return f"{text!r} is a short PCI slot: write it with its domain, as 0000:{text.lower()}"
    if PCI_SLOT.match(text.lower()):
        return f"{text!r}: write the PCI slot in lower case, as {text.lower()}"
    return f"{text!r} is not a PCI slot (domain:bus:device.function, like 0000:28:00.0; see gpuwatch sensors)"


def _check_slot(text: str) -> str:
    problem = pci_slot_problem(text)
    if problem:
        raise ValueError(problem)
    return text


PciSlot = Annotated[str, AfterValidator(_check_slot)]


def _check_curve(points: list[list[float]] | None) -> list[list[float]] | None:
    if points is not None:
        problems = validate_points(points)
        if problems:
            raise ValueError("invalid fan curve: " + "; ".join(problems))
    return points


class FanCurveSettings(Strict):
    """The per-GPU tunables; every key may be overridden under ``[fan.gpus."<pci slot>"]``."""

    sensor: SensorChoice | None = None
    curve: list[list[float]] | None = None
    floor_percent: float | None = Field(default=None, ge=0, le=100)
    dead_band_c: float | None = Field(default=None, ge=0, le=30)
    spindown_delay_s: float | None = Field(default=None, ge=0, le=3600)
    slew_down_percent_per_s: float | None = Field(default=None, gt=0, le=100)

    @field_validator("curve")
    @classmethod
    def _curve_ok(cls, points: list[list[float]] | None) -> list[list[float]] | None:
        return _check_curve(points)


class FanConfig(Strict):
    """Fan control: the curve, its hysteresis, failsafe and per-GPU overrides (docs/fan-control.md)."""

    mode: Literal["curve", "dry-run", "monitor-only", "off"] = "curve"
    sensor: SensorChoice = "auto"
    curve: list[list[float]] = Field(default_factory=lambda: [list(p) for p in DEFAULT_CURVE])
    floor_percent: float = Field(default=50.0, ge=0, le=100)
    dead_band_c: float = Field(default=4.0, ge=0, le=30)
    spindown_delay_s: float = Field(default=10.0, ge=0, le=3600)
    slew_down_percent_per_s: float | None = Field(default=None, gt=0, le=100)
    failsafe_after_ticks: int = Field(default=3, ge=1, le=3600)
    frozen_after_ticks: int = Field(default=300, ge=0, le=86400)
    stall_after_ticks: int = Field(default=5, ge=1, le=3600)
    verify_tolerance_percent: float = Field(default=5.0, ge=0, le=100)
    gpus: dict[PciSlot, FanCurveSettings] = Field(default_factory=dict)

    @field_validator("curve")
    @classmethod
    def _curve_ok(cls, points: list[list[float]] | None) -> list[list[float]] | None:
        return _check_curve(points)

    def for_gpu(self, gpu_id: str) -> "FanConfig":
        """This config with the GPU's overrides applied (validated on their own when loaded)."""
        override = self.gpus.get(gpu_id)
        if override is None:
            return self
        return self.model_copy(update=override.model_dump(exclude_none=True))


PowerConfigMode = Literal["govern", "dry-run", "off"]  # what the power-cap governor may do


class PowerCapSettings(Strict):
    """The per-GPU tunables; every key may be overridden under ``[power.gpus."<pci slot>"]``."""

    mode: PowerConfigMode | None = None
    engage_margin_c: float | None = Field(default=None, gt=0, le=30)
    hold_margin_c: float | None = Field(default=None, ge=0.5, le=20)
    floor_percent: float | None = Field(default=None, ge=20, le=100)
    min_step_percent: float | None = Field(default=None, gt=0, le=20)
    reverse_step_percent: float | None = Field(default=None, gt=0, le=40)
    raise_percent_per_s: float | None = Field(default=None, gt=0, le=100)
    release_after_s: float | None = Field(default=None, ge=0, le=86400)
    idle_restore_after_s: float | None = Field(default=None, ge=0, le=86400)


class PowerConfig(Strict):
    """The power-cap governor between the fan curve and the pause (docs/power.md).

    Margins are below the pause limit of the hottest sensor (the same limits as [thermal] and the
    trainers'); power settings are percent of the board's default cap (``power1_cap_default``), so one
    set fits a 95 W laptop part and a 330 W board.
    """

    # govern: lower the cap when the fan cannot rise and the card nears its pause limit (default: it acts
    # only where the alternative is a pause, stays inside the vendor's range and is restored on every
    # exit path); dry-run: log what would be written; off: never touch the cap, pause as before.
    mode: PowerConfigMode = "govern"
    # Take over when the filtered headroom to the pause limit is at most this (and the fan is at its top).
    engage_margin_c: float = Field(default=8.0, gt=0, le=30)
    # Hold the hottest sensor this far below its pause limit (readings flicker by 1 °C).
    hold_margin_c: float = Field(default=2.0, ge=0.5, le=20)
    # Never below this share of the default cap (nor under power1_cap_min): below ~60 % the clock
    # falls linearly with power and a pause becomes the better trade.
    floor_percent: float = Field(default=60.0, ge=20, le=100)
    # Write only when the cap moves this much (percent of the default cap)...
    min_step_percent: float = Field(default=2.0, gt=0, le=20)
    # ...and this much against the direction of the previous write (no hunting on sensor noise).
    reverse_step_percent: float = Field(default=4.0, gt=0, le=40)
    # Raising is never urgent: at most this many percent of the default cap per second.
    raise_percent_per_s: float = Field(default=0.7, gt=0, le=100)
    # Back to idle once the cap has been at its original value this long with the card cool.
    release_after_s: float = Field(default=300.0, ge=0, le=86400)
    # The cap has not limited the card this long (the job ended): write the original back, idle.
    idle_restore_after_s: float = Field(default=600.0, ge=0, le=86400)
    # The supervisor's safety net: while the governor holds a hot GPU above its floor cap, a trainer is
    # paused only after the limit has been exceeded this long (a firmware that ignores the cap).
    pause_backstop_s: float = Field(default=60.0, ge=0, le=3600)
    gpus: dict[PciSlot, PowerCapSettings] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _margins_and_steps_agree(self) -> "PowerConfig":
        for where, settings in [("power", self)] + [(f"power.gpus.{gpu}", self.for_gpu(gpu)) for gpu in self.gpus]:
            if settings.hold_margin_c >= settings.engage_margin_c:
                raise ValueError(f"{where}: hold_margin_c {settings.hold_margin_c:g} must be below "
                                 f"engage_margin_c {settings.engage_margin_c:g}")
            if settings.reverse_step_percent < settings.min_step_percent:
                raise ValueError(f"{where}: reverse_step_percent {settings.reverse_step_percent:g} must not be "
                                 f"below min_step_percent {settings.min_step_percent:g}")
        return self

    def for_gpu(self, gpu_id: str) -> "PowerConfig":
        """This config with the GPU's overrides applied."""
        override = self.gpus.get(gpu_id)
        if override is None:
            return self
        return self.model_copy(update=override.model_dump(exclude_none=True))


class BackoffConfig(Strict):
    """Crash restart delay: initial_s * 2**(crashes-1), capped at max_s, +/- jitter_ratio."""

    initial_s: float = Field(default=10.0, ge=0, le=86400)
    max_s: float = Field(default=600.0, ge=0, le=86400)
    jitter_ratio: float = Field(default=0.2, ge=0, le=1)


class TrainerConfig(Strict):
    """One supervised training command (`[[trainer]]`); see docs/supervisor.md."""

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
    command: list[str] = Field(min_length=1)
    cwd: Path | None = None
    env: dict[str, str] = {}
    # This machine's name in a job that spans several (GPUWATCH_NODE; "paused by node-b: ..."); None: hostname.
    node: str | None = Field(default=None, min_length=1, max_length=64)
    user: str | None = None
    group: str | None = None
    gpus: list[str] = []
    restart_command: list[str] | None = None
    checkpoint_glob: str | None = None
    # None: use [thermal]. Limits are the pause line; resume below limit - hysteresis.
    edge_limit_c: float | None = Field(default=None, gt=0, le=150)
    junction_limit_c: float | None = Field(default=None, gt=0, le=150)
    mem_limit_c: float | None = Field(default=None, gt=0, le=150)
    hysteresis_c: float | None = Field(default=None, ge=0, le=30)
    debounce_s: float = Field(default=5.0, ge=0)
    # None: a cooperative hold is unbounded (nothing is in flight); a SIGSTOP pause is bounded by the
    # job's own process-group timeout where that matters (supervise/actions.pause_limit_s).
    max_pause_s: float | None = Field(default=None, gt=0)
    # A hot card cools ~15 °C within seconds of a pause (simulator, H200 run in docs/nvidia.md), so
    # without a minimum a card that cannot hold its limit flaps between pause and resume.
    min_pause_s: float = Field(default=30.0, ge=0)
    cooperative_pause: Literal["auto", "always", "never"] = "auto"
    pause_ack_timeout_s: float = Field(default=60.0, gt=0)
    grace_s: float = Field(default=120.0, ge=0)
    backoff: BackoffConfig = BackoffConfig()
    give_up_after_crashes: int = Field(default=5, ge=1)
    # A GPU reset of one of its GPUs ends the run (its GPU context is lost): TERM, then KILL after this.
    gpu_reset_grace_s: float = Field(default=5.0, ge=0)
    # Still there this long after SIGKILL (uninterruptible sleep in the driver): reported and left behind.
    stuck_after_s: float = Field(default=30.0, gt=0)
    stable_after_s: float = Field(default=1800.0, gt=0)
    hang_timeout_s: float | None = Field(default=1800.0, gt=0)
    progress_file: Path | None = None
    log_is_progress: bool = True
    restart_after_emergency: bool = True
    log_dir: Path | None = None
    log_max_bytes: int = Field(default=20 * 1024 * 1024, ge=4096)
    log_backups: int = Field(default=3, ge=0, le=100)

    def thermal(self, base: ThermalConfig) -> ThermalConfig:
        """The global thermal limits with this trainer's overrides applied."""
        keys = ("edge_limit_c", "junction_limit_c", "mem_limit_c", "hysteresis_c")
        update = {key: getattr(self, key) for key in keys if getattr(self, key) is not None}
        return base.model_copy(update=update)


class HttpConfig(Strict):
    """The read-only HTTP endpoint: /metrics, /healthz, /status."""

    enabled: bool = True
    listen: str = "0.0.0.0"
    port: int = Field(default=DEFAULT_HTTP_PORT, ge=0, le=65535)


def remote_base_url(host: str) -> str:
    """A machine's gpuwatch HTTP endpoint as `status --remote` and [status] remote name it, normalised:
    ``box3`` -> ``http://box3:9840`` (no scheme and no port: gpuwatch's default port),
    ``box3:9841``, ``http://box3:9840/status`` -> ``http://box3:9840``, ``https://gw.lab/box3`` (a proxy
    prefix) as is. Raises ValueError with the reason for anything else."""
    text = host.strip()
    if not text or any(c.isspace() for c in text):
        raise ValueError(f"{host!r} is not a host or URL")
    bare = "://" not in text
    parts = urllib.parse.urlsplit(f"http://{text}" if bare else text)
    try:
        port = parts.port
    except ValueError:
        raise ValueError(f"{host!r}: the port must be a number from 0 to 65535") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{host!r}: expected host, host:port or http(s)://host[:port][/prefix]")
    if parts.query or parts.fragment or parts.username:
        raise ValueError(f"{host!r}: no query, fragment or user in the URL")
    netloc = parts.netloc if port is not None or not bare else f"{parts.netloc}:{DEFAULT_HTTP_PORT}"
    path = parts.path.rstrip("/").removesuffix("/status")
    return f"{parts.scheme}://{netloc}{path}"


class StatusConfig(Strict):
    """`gpuwatch status --remote`: the machines to show in one table (their /status endpoints)."""

    remote: list[str] = []  # each as remote_base_url accepts it; stored normalised
    timeout_s: float = Field(default=3.0, gt=0, le=60)

    @field_validator("remote")
    @classmethod
    def _hosts(cls, hosts: list[str]) -> list[str]:
        return [remote_base_url(host) for host in hosts]


class SimulatedFaultsConfig(Strict):
    """Hardware faults the simulator injects (docs/simulator.md); times are simulated seconds."""

    fan_stuck_percent: float | None = Field(default=None, ge=0, le=100)
    sensor_garbage: bool = False
    firmware_reset_every_s: float | None = Field(default=None, gt=0)
    disappear_after_s: float | None = Field(default=None, ge=0)
    # A GPU reset: a devcoredump appears, the card stops answering for gpu_reset_outage_s, the processes
    # on it hang; a leftover process stays in D state holding the card for gpu_reset_stuck_s.
    gpu_reset_at_s: list[float] = Field(default_factory=list)
    gpu_reset_outage_s: float = Field(default=5.0, ge=0, le=600)
    gpu_reset_stuck_s: float | None = Field(default=None, gt=0)
    # power1_cap is mode 0444 and a write is reverted, as a firmware that ignores the cap behaves.
    power_cap_readonly: bool = False
    cards: list[int] = Field(default_factory=list)


class SimulateConfig(Strict):
    """`gpuwatch run --simulate`: simulated RX 5600 XT cards instead of /sys (docs/simulator.md)."""

    enabled: bool = False
    gpus: int = Field(default=1, ge=1, le=16)
    # None: <runtime_dir>/simulated-sysfs, recreated at every start.
    tree_dir: Path | None = None
    time_scale: float = Field(default=1.0, gt=0, le=1000)
    ambient_c: float = Field(default=30.0, ge=-20, le=60)
    # Multiplies the fan's cooling; below 1 = a hot case or clogged heatsink (the demo uses 0.4).
    cooling_scale: float = Field(default=1.0, gt=0, le=5)
    # Load when no [[trainer]] is supervised: 1.0 keeps the GPU busy so the fan curve shows.
    load_without_trainer: float = Field(default=1.0, ge=0, le=1)
    # false: the cards have no hwmon fan1_input (RDNA4 before Linux 6.15); the RPM is in gpu_metrics only.
    fan1_input: bool = True
    # An unsupervised desktop client (a compositor) on the first card, for `gpuwatch status --processes`.
    desktop_client: bool = False
    faults: SimulatedFaultsConfig = SimulatedFaultsConfig()


class AmdgpuInfoConfig(Strict):
    """pyamdgpuinfo, the optional extra ``gpuwatch[amdgpuinfo]`` (GPL-3.0-only): ioctl readings merged into
    sysfs' (gpus/amdgpuinfo.py). Used only when installed and reading the real /sys."""

    mode: Literal["auto", "off"] = "auto"
    # Graphics-pipe busy sampling; each poll is an ioctl that keeps the GPU awake: 0 lets GPUs sleep.
    polls_per_second: int = Field(default=10, ge=0, le=100)


class ProcessesConfig(Strict):
    """Who uses which GPU (DRM fdinfo per process): the supervised trees every tick, the rest less often."""

    enabled: bool = True
    # Every process's fds are listed once per this many seconds, spread over the ticks (one that had no GPU
    # file open every fourth time; a ROCm process at once, through KFD's process list); 0: the supervised
    # trees only. benchmarks/process_scan.py
    scan_all_every_s: float = Field(default=30.0, ge=0, le=3600)


class ResetsConfig(Strict):
    """GPU reset detection (devcoredump, WEDGED uevents) and the kept kernel dumps."""

    enabled: bool = True
    # None: $STATE_DIRECTORY/gpu-resets under systemd (survives a reboot), else <runtime_dir>/gpu-resets.
    dump_dir: Path | None = None
    dumps_kept: int = Field(default=10, ge=0, le=1000)
    dump_max_bytes: int = Field(default=16 * 1024 * 1024, ge=4096)
    # Dismiss the kernel's dump once copied: it keeps one per device, so the next reset gets its own.
    dismiss_dumps: bool = True
    uevents: bool = True
    # Consecutive ticks the GPU must answer (temperatures read) before it is used again.
    answer_ticks: int = Field(default=3, ge=1, le=3600)


class Config(Strict):
    """The whole daemon configuration (`/etc/gpuwatch/gpuwatch.toml`)."""

    sysfs_root: Path = Path("/sys")
    proc_root: Path = Path("/proc")
    # auto: amdgpu always (it finds nothing, harmlessly, on NVIDIA boxes) plus NVML when it initialises.
    backend: Literal["auto", "amdgpu", "nvml", "simulated"] = "auto"
    runtime_dir: Path | None = None
    interval_s: float = Field(default=1.0, gt=0, le=60)
    sysfs_deadline_s: float = Field(default=DEFAULT_SYSFS_DEADLINE_S, gt=0, le=30)
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    thermal: ThermalConfig = ThermalConfig()
    fan: FanConfig = FanConfig()
    power: PowerConfig = PowerConfig()
    http: HttpConfig = HttpConfig()
    status: StatusConfig = StatusConfig()
    simulate: SimulateConfig = SimulateConfig()
    amdgpuinfo: AmdgpuInfoConfig = AmdgpuInfoConfig()
    processes: ProcessesConfig = ProcessesConfig()
    resets: ResetsConfig = ResetsConfig()
    trainer: list[TrainerConfig] = []

    @field_validator("trainer")
    @classmethod
    def _unique_trainer_names(cls, trainers: list[TrainerConfig]) -> list[TrainerConfig]:
        names = [trainer.name for trainer in trainers]
        twice = sorted({name for name in names if names.count(name) > 1})
        if twice:
            raise ValueError("; ".join(f"trainer name {name!r} is used twice; names must be unique" for name in twice))
        return trainers

    @property
    def control_socket(self) -> Path:
        return self.resolved_runtime_dir / CONTROL_SOCKET_NAME

    @property
    def simulating(self) -> bool:
        """``backend = "simulated"`` and ``[simulate] enabled = true`` mean the same."""
        return self.simulate.enabled or self.backend == "simulated"

    @property
    def simulated_tree_dir(self) -> Path:
        return self.simulate.tree_dir or self.resolved_runtime_dir / "simulated-sysfs"

    def with_effective_sysfs(self) -> "Config":
        """This config as everything that reads or writes sysfs must see it: when simulating, the
        simulator's trees are the sysfs and proc roots and amdgpu the only backend (the simulated cards
        and their processes are read like real ones, and only them). The daemon and every daemon-side command (status, sensors,
        curve, fans-auto) go through this one rule, so they all mean the same GPUs."""
        if not self.simulating:
            return self
        return self.model_copy(update={"sysfs_root": self.simulated_tree_dir, "proc_root": self.simulated_proc_dir,
                                       "backend": "amdgpu"})

    @property
    def simulated_proc_dir(self) -> Path:
        return self.simulated_tree_dir.with_name(self.simulated_tree_dir.name + "-proc")

    @property
    def reset_dump_dir(self) -> Path:
        """Where copies of the kernel's GPU dumps go: kept across reboots when systemd gives a state dir."""
        if self.resets.dump_dir is not None:
            return self.resets.dump_dir
        state = os.environ.get("STATE_DIRECTORY")
        if state:
            return Path(state.split(":")[0]) / "gpu-resets"
        return self.resolved_runtime_dir / "gpu-resets"

    @property
    def state_file(self) -> Path:
        return self.resolved_runtime_dir / STATE_FILE_NAME

    @property
    def resolved_runtime_dir(self) -> Path:
        """``runtime_dir``, else the default for this process (the CLI resolves it once, at load)."""
        return self.runtime_dir if self.runtime_dir is not None else default_runtime_dir(os.environ, os.geteuid())


def default_runtime_dir(environ: Mapping[str, str], euid: int) -> Path:
    """Where a daemon started this way publishes when the config sets no ``runtime_dir``: systemd's
    RuntimeDirectory, /run/gpuwatch for root, else a per-user directory."""
    if environ.get("RUNTIME_DIRECTORY"):
        return Path(environ["RUNTIME_DIRECTORY"].split(":")[0])
    if euid == 0:
        return SYSTEM_RUNTIME_DIR
    base = environ.get("XDG_RUNTIME_DIR") or f"/tmp/gpuwatch-{euid}"
    return Path(base) / "gpuwatch" if environ.get("XDG_RUNTIME_DIR") else Path(base)


def client_runtime_dir(environ: Mapping[str, str], euid: int, holds_daemon: Callable[[Path], bool]) -> Path:
    """Where `status`, `pause`, `resume` and `restart` look for the daemon when the config sets no
    ``runtime_dir``: where this user's own daemon would publish (``default_runtime_dir``) if one is
    there, else the system service's /run/gpuwatch if one is there (a non-root user on a machine with
    the installed unit), else the user's own directory (and "daemon not running" is the truth).

    ``holds_daemon(dir)`` says whether a daemon publishes in ``dir`` (``daemon_files_in``).
    """
    own = default_runtime_dir(environ, euid)
    if own != SYSTEM_RUNTIME_DIR and not holds_daemon(own) and holds_daemon(SYSTEM_RUNTIME_DIR):
        return SYSTEM_RUNTIME_DIR
    return own


def daemon_files_in(runtime_dir: Path) -> bool:
    """A daemon's state file or control socket is in ``runtime_dir`` (a clean stop removes both)."""
    return (runtime_dir / STATE_FILE_NAME).exists() or (runtime_dir / CONTROL_SOCKET_NAME).exists()


def load_config(path: str | Path | None, overrides: dict[str, Any] | None = None) -> Config:
    """Read and validate ``path`` (None: defaults only); ``overrides`` win over the file's keys."""
    data: dict[str, Any] = {}
    source = "defaults"
    if path is not None:
        source = str(path)
        try:
            with open(path, "rb") as handle:
                data = tomllib.load(handle)
        except FileNotFoundError:
            raise ConfigError(f"{source}: no such config file") from None
        except OSError as exc:
            raise ConfigError(f"{source}: cannot read: {exc.strerror}") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{source}: not valid TOML: {exc}") from None
    data.update(overrides or {})
    return parse_config(data, source)


def parse_config(data: dict[str, Any], source: str = "config") -> Config:
    try:
        return Config.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, source)) from None


def format_validation_error(exc: ValidationError, source: str) -> str:
    lines = [f"{source}: invalid configuration ({exc.error_count()} problem(s)):"]
    for err in exc.errors():
        loc = [str(part) for part in err["loc"]]
        if loc[-1:] == ["[key]"]:  # a table's name is wrong, e.g. [fan.gpus."bogus"]: name the table
            loc = loc[:-2] + [f'"{loc[-2]}"']
        key = ".".join(loc) or "(top level)"
        rule = err["msg"]
        if err["type"] == "extra_forbidden":
            rule = "unknown key (not a gpuwatch setting; check spelling)"
        rule = rule.removeprefix("Value error, ")
        shown = err.get("input")
        if isinstance(shown, dict) or isinstance(shown, list) and any(isinstance(item, dict) for item in shown):
            # A whole section or a list of [[tables]]: the rule names what is wrong, a dump would bury it.
            lines.append(f"  {key}: {rule}")
        else:
            lines.append(f"  {key} = {shown!r}: {rule}")
    return "\n".join(lines)


def effective_config_toml(config: Config) -> str:
    """The effective configuration as TOML for `gpuwatch check-config`; unset (None) keys are omitted."""
    return tomli_w.dumps(config.model_dump(mode="json", exclude_none=True))
