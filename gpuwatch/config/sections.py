"""The daemon's other sections: ``[http]``, ``[status]`` (remote machines), ``[simulate]``, ``[amdgpuinfo]``,
``[processes]``, ``[resets]``, ``[unmanaged]``, ``[control]``, ``[attached]`` and ``[health]``."""

from __future__ import annotations

import logging
import urllib.parse
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator, model_validator

from gpuwatch.config.base import DEFAULT_HTTP_PORT, Strict
from gpuwatch.config.trainer import DEBOUNCE_S, HANG_TIMEOUT_S, MIN_PAUSE_S
from gpuwatch.publish.health_codes import NAMES, OFF_BY_DEFAULT

_log = logging.getLogger(__name__)
# The one boolean per check of the releases before `[health] off`, still read (into off): these only, a new check
# has its name in off and no boolean.
_SWITCHES_BEFORE_OFF = ("gpu_down", "fan_uncontrolled", "fan_failsafe", "fan_stalled", "over_crit", "reset_stuck",
                        "reset_recovering", "pcie_width", "pcie_speed", "aer_fatal", "daemon_down")

ExposeSensitive = Literal["none", "local", "authenticated", "all"]


class HttpConfig(Strict):
    """The read-only HTTP endpoint: /metrics, /healthz, /status."""

    enabled: bool = True
    listen: str = "0.0.0.0"
    port: int = Field(default=DEFAULT_HTTP_PORT, ge=0, le=65535)
    # TLS, basic auth and response headers: the exporter-toolkit's web config file (config/web.py,
    # docs/security.md); None: plain HTTP, no authentication.
    web_config: Path | None = None
    # Who gets /status with processes' command lines and users, trainers' log paths (publish/redact.py):
    # "authenticated" loopback and authenticated clients, "local" loopback only, "all" everyone, "none" nobody
    # over HTTP (behind a reverse proxy on this machine every client is loopback).
    expose_sensitive: ExposeSensitive = "authenticated"


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
    # https hosts: the CA that signs their certificates (None: the system's); basic auth: the user and a
    # file holding the password (never the password itself: docs/security.md). GPUWATCH_REMOTE_USER,
    # GPUWATCH_REMOTE_PASSWORD_FILE and GPUWATCH_REMOTE_CA_FILE win over these.
    ca_file: Path | None = None
    user: str | None = None
    password_file: Path | None = None

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


class SimulatedKernelConfig(Strict):
    """What the simulated card's OD firmware does that its files do not print (sim/kernel.Board, issue 49)."""

    firmware: Literal["smu13", "sienna_cichlid", "navi10"] = "smu13"
    # GfxclkFmax's minimum, which OD_RANGE does not print: an `s 1` under it is EINVAL.
    fmax_min_mhz: int | None = Field(default=None, ge=0, le=10_000)
    # The PMFW takes a committed maximum and keeps running at the old one (RDNA3, drm/amd #3625).
    ignores_fmax: bool = False
    # An OD commit drops a forced performance level to this one (LACT #294, #675), e.g. "auto".
    commit_sets_level: Literal["auto", "low", "high", "manual"] | None = None


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
    # The simulated card: "rx5600xt" (cap floor 50 %) or "navi31", a Navi 31-like card whose cap floor is 90 %
    # and whose shader clock ceiling is set through the overdrive table (gpuwatch/sim/navi31.py, issue 36).
    card: Literal["rx5600xt", "navi31"] = "rx5600xt"
    faults: SimulatedFaultsConfig = SimulatedFaultsConfig()
    kernel: SimulatedKernelConfig = SimulatedKernelConfig()


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


class UnmanagedConfig(Strict):
    """GPU processes that are neither a trainer nor an attached run: reported, or SIGSTOPped past crit
    (docs/supervisor.md, "Processes not run under gpuwatch")."""

    # report: listed only. stop: SIGSTOP them while their GPU is at its crit and neither the fan nor the
    # power cap can do more, SIGCONT when it is cool again (the last rung of the ladder).
    on_hot: Literal["report", "stop"] = "report"
    # The stop's own bound; the SIGSTOP bound of supervise.actions.pause_limit_s applies anyway.
    max_pause_s: float | None = Field(default=None, gt=0)
    # A process resumed because its stop reached the bound is not stopped again before this many seconds.
    restop_after_s: float = Field(default=120.0, ge=0, le=86400)
    # Processes of uid 0 (Xorg, a display manager, system services) are never stopped unless this is true.
    stop_root: bool = False


class ControlConfig(Strict):
    """The control socket (mode 0666: every local user may connect; each request is authorized from the
    kernel's peer credentials, supervise/access.py)."""

    # Members of this group may do what root may (pause, resume, stop any run; restart configured trainers).
    admin_group: str | None = Field(default=None, min_length=1)


class AttachedConfig(Strict):
    """Runs attached by `gpuwatch train` from any user's shell (supervise/attached_runs.py, docs/attached-runs.md)."""

    # As [[trainer]]'s: a hot GPU pauses after debounce_s; a pause lasts at least min_pause_s.
    debounce_s: float = Field(default=DEBOUNCE_S, ge=0)
    min_pause_s: float = Field(default=MIN_PAUSE_S, ge=0)
    # No new step in the run's heartbeats this long (while running): the run is reported hung, once.
    hang_timeout_s: float | None = Field(default=HANG_TIMEOUT_S, gt=0)
    # An ended run (finished, failed, stopped, gone) stays listed this long, then it is dropped.
    keep_ended_s: float = Field(default=300.0, ge=0)
    max_runs: int = Field(default=256, ge=1, le=4096)
    max_runs_per_user: int = Field(default=64, ge=1, le=4096)


class HistoryConfig(Strict):
    """The history kept on disk for the live page's charts, /history and `gpuwatch status --history` (docs/page.md)."""

    enabled: bool = True
    # None: <state directory>/history (config/runtime.default_state_dir: systemd's StateDirectory, /var/lib/gpuwatch
    # for the system daemon, else the runtime directory). Root-owned, writable by root only (else history is off).
    dir: Path | None = None


class HealthConfig(Strict):
    """`gpuwatch health` and the Slurm gate (docs/cluster.md): which checks make the node unhealthy (``off`` names
    those that do not), how long over crit counts, the drain/resume hysteresis, where jobs are mapped."""

    # The checks turned off, by name: publish/health_codes.py's table (docs/cluster.md's). The default turns off
    # those a healthy node can trip (pcie_speed: amdgpu's PCIe DPM lowers the link speed at idle; aer_nonfatal).
    # The daemon's own G001, G014 and G015 are never off; "daemon_down" turns off G002 (no daemon).
    off: list[str] = Field(default_factory=lambda: list(OFF_BY_DEFAULT))
    over_crit_s: float = Field(default=30.0, ge=0, le=3600)
    # `gpuwatch health --slurm`: drain after this many consecutive unhealthy checks, resume a node drained
    # by gpuwatch after this many consecutive healthy ones.
    drain_after_checks: int = Field(default=2, ge=1, le=100)
    resume_after_checks: int = Field(default=2, ge=1, le=100)
    # Directories of per-GPU job files written by a prolog, <dir>/<gpu index>: DCGM's (job ids, one per
    # line) or AMD device-metrics-exporter's (a JSON object of SLURM_* variables); both forms are read.
    job_mapping_dirs: list[Path] = []
    # Receipts of the last this many jobs kept (`gpuwatch receipt JOBID`).
    jobs_kept: int = Field(default=32, ge=1, le=1000)

    @model_validator(mode="before")
    @classmethod
    def _switches_into_off(cls, data: object) -> object:
        """The deprecated booleans, one per check (``fan_stalled = false``), read into ``off`` with one warning line;
        a boolean that contradicts an ``off`` also given is refused (two answers, neither can be preferred)."""
        if not isinstance(data, dict) or not any(name in data for name in _SWITCHES_BEFORE_OFF):
            return data
        given = data.get("off")
        off = list(given) if isinstance(given, list) else list(OFF_BY_DEFAULT)
        for name in (name for name in _SWITCHES_BEFORE_OFF if name in data):
            on = data[name]
            if not isinstance(on, bool):
                raise ValueError(f"{name} = {on!r}: not a boolean (deprecated: write off = [...] instead)")
            if isinstance(given, list) and (name in given) == on:
                raise ValueError(f"{name} = {str(on).lower()} contradicts off = {given!r} (deprecated: keep off only)")
            off = [other for other in off if other != name] if on else off + [name] * (name not in off)
        used = ", ".join(name for name in _SWITCHES_BEFORE_OFF if name in data)
        _log.warning("[health] %s: deprecated, read as off = %s; write that instead (docs/cluster.md)", used,
                     "[" + ", ".join(f'"{name}"' for name in off) + "]")
        return {**{key: value for key, value in data.items() if key not in _SWITCHES_BEFORE_OFF}, "off": off}

    @field_validator("off")
    @classmethod
    def _known_checks(cls, off: list[str]) -> list[str]:
        unknown = [name for name in off if name not in NAMES]
        if unknown:
            raise ValueError(f"not a health check: {', '.join(unknown)} (checks: {', '.join(NAMES)})")
        return list(dict.fromkeys(off))

    def on(self, name: str) -> bool:
        """Whether the check of this ``[health] off`` name is on."""
        return name not in self.off
