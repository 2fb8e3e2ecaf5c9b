"""The supervisor's vocabulary: what policy.step is told (Inputs, with the Thermal verdict, which
``thermal_verdict`` derives from a tick's snapshot) and what it decides (the Actions). The effects
layer (supervisor.py) builds the one and carries out the other.

A verdict over several GPUs is made of each GPU's share (``gpu_heat``: its sensors against the limits), so a
tick's readers (every trainer and attached run, the processes not run under gpuwatch) compute each GPU's share
once per set of limits (``Heat``) and combine them (``combined_verdict``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from gpuwatch.config.cooling import ThermalConfig
from gpuwatch.limits import LimitBreach, breaches
from gpuwatch.model import ClockState, FanMode, FanState, GpuReading, PowerState, Snapshot, at_crit
from gpuwatch.supervise.ranks import RankView

# A SIGSTOP pause of a job stays this share below its process-group timeout; of a program that never
# said which job it is, below NCCL's default timeout (600 s), which a frozen NCCL watchdog may enforce.
TIMEOUT_SHARE = 0.9
UNKNOWN_JOB_TIMEOUT_S = 600.0

Command = Literal["pause", "resume", "restart", "stop"]  # manual, from `gpuwatch pause|resume|restart|stop`
# pause file (the launcher holds at a step), SIGSTOP, or held at another node's request (a job's ranks)
PauseMode = Literal["cooperative", "sigstop", "remote"]
# "stop": `gpuwatch stop` (the trainer stays STOPPED until `gpuwatch restart`, so never a restart's reason).
AfterStop = Literal["restart", "max-pause", "hang", "crash", "emergency", "shutdown", "gpu_reset", "stop"]
# What a restart counts as (``restarts_by_reason``): the stop before it, a manual restart, or torchrun
# restarting its workers within the run.
RestartReason = AfterStop | Literal["manual", "torchrun"]


# ---- actions -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Spawn:
    resume: bool  # use restart_command with the newest complete checkpoint when there is one


@dataclass(frozen=True)
class RequestPause:
    """Create the pause file: the launcher holds at its next optimizer step (every rank of a job)."""

    reason: str  # written into the file: a distributed job shows it on every node


@dataclass(frozen=True)
class CancelPause:
    """Remove the pause file."""


@dataclass(frozen=True)
class Freeze:
    """SIGSTOP the whole process tree."""


@dataclass(frozen=True)
class Thaw:
    """SIGCONT the whole process tree."""


@dataclass(frozen=True)
class Terminate:
    reason: str  # SIGCONT then SIGTERM to the whole tree


@dataclass(frozen=True)
class Kill:
    reason: str  # SIGKILL to the whole tree


@dataclass(frozen=True)
class CollectEvidence:
    reason: str


@dataclass(frozen=True)
class Abandon:
    reason: str  # still alive long after SIGKILL (D state): report it, stop waiting for it


Action = Spawn | RequestPause | CancelPause | Freeze | Thaw | Terminate | Kill | CollectEvidence | Abandon


# ---- inputs --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Thermal:
    hot: bool = False  # some sensor at/above its pause limit
    cool: bool = True  # every sensor below limit - hysteresis
    critical: bool = False  # at crit, or fan failsafe
    reason: str | None = None
    # Every hot GPU is held by its power governor above the floor cap: a pause waits until the limit has
    # been exceeded this long (the governor's safety net, power.pause_backstop_s); None: debounce_s only.
    governed_backstop_s: float | None = None


@dataclass(frozen=True)
class Inputs:
    now: float
    thermal: Thermal = Thermal()
    alive: bool = False  # leader still running
    exit_code: int | None = None  # leader's exit status once it is gone (negative: signal)
    exit_reason: str | None = None  # e.g. "spawn failed: ..."
    spawn_failed: bool = False  # the command could not be started, and will not be until the config changes
    steps_total: int | None = None  # from the heartbeat (a job's: the minimum over its ranks)
    heartbeat_paused: bool = False  # the trainer holds (a job: every local rank)
    ranks: RankView | None = None  # a distributed job's ranks on this node
    progress_mtime: float | None = None  # the progress file's mtime
    log_bytes: int = 0  # output captured so far in this run
    command: Command | None = None
    shutdown: bool = False
    jitter: float = 0.0  # uniform in [-1, 1], drawn by the caller
    gpu_reset: str | None = None  # a GPU it uses was reset since the last tick (why, for the log)
    gpus_ready: bool = True  # every GPU it uses answers and is held by no stuck process
    gpus_wait: str | None = None  # why not


@dataclass(frozen=True)
class GpuHeat:
    """One GPU's share of a thermal verdict under one set of limits."""

    gpu_id: str
    hot: tuple[LimitBreach, ...]  # sensors at or above their limit
    warm: bool  # some sensor within the hysteresis of its limit (not cool)
    crit: tuple[str, ...]  # sensors at crit, said for the log


def gpu_heat(gpu: GpuReading, thermal: ThermalConfig) -> GpuHeat:
    return GpuHeat(
        gpu_id=gpu.gpu_id, hot=tuple(breaches(gpu, thermal)),
        warm=bool(breaches(gpu, thermal, margin_c=thermal.hysteresis_c)),
        crit=tuple(f"{gpu.gpu_id} {t.label} {t.temp_c:.0f}°C at crit {t.crit_c:.0f}°C"
                   for t in gpu.temps if at_crit(t.temp_c, t.crit_c)))


class Heat:
    """One snapshot's GPU shares, each computed on first use per set of limits and kept for the snapshot's other
    readers (a trainer's limits are its own; attached runs and [thermal]'s readers share theirs)."""

    def __init__(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot
        self._shares: dict[ThermalConfig, dict[str, GpuHeat]] = {}  # by limits (one hash of them per ``of``), GPU

    def of(self, gpus: tuple[str, ...], thermal: ThermalConfig) -> list[GpuHeat]:
        """The shares of ``gpus`` (every GPU of the snapshot when empty), in the snapshot's order."""
        shares = self._shares.setdefault(thermal, {})
        found = []
        for gpu in self.snapshot.gpus:
            if not gpus or gpu.gpu_id in gpus:
                share = shares.get(gpu.gpu_id)
                if share is None:
                    share = shares[gpu.gpu_id] = gpu_heat(gpu, thermal)
                found.append(share)
        return found


def thermal_verdict(
    snapshot: Snapshot, gpus: tuple[str, ...], thermal: ThermalConfig, fans: tuple[FanState, ...],
    powers: tuple[PowerState, ...], backstop_s: float, clocks: tuple[ClockState, ...] = (),
) -> Thermal:
    """Hot/cool/critical for the GPUs a trainer uses (all GPUs when ``gpus`` is empty), and whether the
    power governor or the clock rung above it still holds every hot one (then the pause waits up to
    ``backstop_s``, the live ``power.pause_backstop_s``: no default here, its one home is the config)."""
    return combined_verdict(Heat(snapshot).of(gpus, thermal), fans, powers, backstop_s, clocks)


def combined_verdict(heats: Sequence[GpuHeat], fans: tuple[FanState, ...], powers: tuple[PowerState, ...],
                     backstop_s: float, clocks: tuple[ClockState, ...] = ()) -> Thermal:
    """``thermal_verdict`` of the GPUs whose shares are ``heats``."""
    hot = [b for h in heats for b in h.hot]
    crit = [c for h in heats for c in h.crit]
    used = {h.gpu_id for h in heats}
    crit += [f"{f.gpu_id} fan failsafe" for f in fans if f.mode == FanMode.FAILSAFE and f.gpu_id in used]
    holding = {p.gpu_id for p in powers if not p.pause_allowed}
    clocked = {c.gpu_id for c in clocks if not c.pause_allowed}  # the cap at its floor, the clock above its own
    governed = bool(hot) and {b.gpu_id for b in hot} <= holding | clocked
    reason = None
    if crit:
        reason = "emergency: " + ", ".join(crit)
    elif hot:
        reason = "hot: " + ", ".join(f"{b.gpu_id} {b.sensor} {b.temp_c:.0f}°C >= {b.limit_c:.0f}°C" for b in hot)
        if governed:
            hot_gpus = {b.gpu_id for b in hot}
            reason += (" (power cap governed above its floor)" if hot_gpus <= holding
                       else " (clock ceiling governed above its floor)")
    return Thermal(hot=bool(hot), cool=not any(h.warm for h in heats), critical=bool(crit), reason=reason,
                   governed_backstop_s=backstop_s if governed else None)


def pause_limit_s(max_pause_s: float | None, mode: PauseMode | None, heartbeat_seen: bool,
                  ranks: RankView | None) -> float | None:
    """How long a pause may last (None: unbounded), ``max_pause_s`` being the user's own bound.

    Nothing is in flight in a cooperative hold, and a hold another node asked for is that node's to
    bound. A SIGSTOP pause freezes collectives in flight: a job that spans nodes (the other nodes' ranks
    wait in one for ours) or runs NCCL (its watchdog compares wall-clock time) must be stopped cleanly
    before its process-group timeout, and a trainer that never sent a heartbeat may be such a job.
    """
    if mode == "remote":
        return None
    bound = None
    if mode == "sigstop":
        if ranks is None and not heartbeat_seen:
            bound = TIMEOUT_SHARE * UNKNOWN_JOB_TIMEOUT_S
        elif ranks is not None and ranks.pg_timeout_s is not None and (
                ranks.spans_nodes or "nccl" in (ranks.backend or "")):
            bound = TIMEOUT_SHARE * ranks.pg_timeout_s
    limits = [limit for limit in (max_pause_s, bound) if limit is not None]
    return min(limits) if limits else None
