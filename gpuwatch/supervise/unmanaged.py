"""GPU processes not run under gpuwatch (pure): which to SIGSTOP past crit, which to SIGCONT, and why.

A process holding a GPU that is neither a configured trainer's nor an attached run's (``GpuProcess.trainer``
is None) is only listed, unless ``[unmanaged] on_hot = "stop"``. Then it is the ladder's last rung: when its
GPU is at the card's own crit (``model.at_crit``) and the other rungs are spent (the fan cannot rise, the
power governor does not hold the card above its floor), it is SIGSTOPped. It is SIGCONTed when:

* its GPU is cool (every sensor below its pause limit less the hysteresis, as for trainers), read this tick;
* the stop reached its bound, ``supervise.actions.pause_limit_s`` for a SIGSTOP of a program that never said
  which job it is (its collectives in flight, an NCCL watchdog), or ``[unmanaged] max_pause_s`` if shorter;
  it is then not stopped again for ``restop_after_s`` (it finishes what was in flight; the card's firmware
  still throttles it);
* the policy becomes "report" (a reload), or the daemon exits (the effects: supervise/unmanaged_stops.py).

Never stopped: the daemon itself, pid 1, kernel threads, a process something else stopped (state T or t:
its SIGCONT would not be ours to send), a zombie, and processes of uid 0 unless ``stop_root``. A stop is
kept by pid *and* start time: a process gone, or a pid now another process's, is forgotten, never signalled.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from gpuwatch.config.cooling import ThermalConfig
from gpuwatch.config.sections import UnmanagedConfig
from gpuwatch.model import Acted, GpuProcess, Snapshot, UnmanagedState, at_crit
from gpuwatch.supervise.actions import gpu_heat, pause_limit_s

NEVER_STATES = frozenset({"T", "t", "Z", "X"})  # stopped or traced by someone else, dead


@dataclass(frozen=True)
class GpuVerdict:
    """One GPU this tick, as the last rung sees it."""

    gpu_id: str
    critical: bool  # a sensor at the card's crit
    exhausted: bool  # the fan cannot rise and the power governor does not hold the card above its floor
    cool: bool  # read this tick, every sensor below its pause limit less the hysteresis
    reason: str | None = None


@dataclass(frozen=True)
class Identity:
    """What /proc says of a process now (the effects read it)."""

    pid: int
    start_ticks: int
    state: str
    uid: int | None
    kernel_thread: bool = False


@dataclass(frozen=True)
class Stopped:
    pid: int
    start_ticks: int
    gpu_ids: tuple[str, ...]  # the GPUs at crit it was stopped for: it resumes when all are cool
    since: float  # monotonic
    since_unix: float
    reason: str


@dataclass(frozen=True)
class Resting:
    """A process resumed at its bound: not stopped again before ``until`` (monotonic)."""

    pid: int
    start_ticks: int
    until: float


@dataclass(frozen=True)
class Book:
    """The policy's memory between ticks."""

    stopped: tuple[Stopped, ...] = ()
    resting: tuple[Resting, ...] = ()
    stops_total: tuple[tuple[str, int], ...] = ()  # per GPU


@dataclass(frozen=True)
class Decision:
    book: Book
    stop: tuple[Stopped, ...] = ()
    resume: tuple[tuple[Stopped, str], ...] = ()  # with why
    forget: tuple[Stopped, ...] = ()  # gone, or its pid is another process now: no signal


def verdicts(snapshot: Snapshot, below: Acted, thermal: ThermalConfig) -> tuple[GpuVerdict, ...]:
    """Every GPU of ``snapshot``: at crit, the other rungs spent (the fan cannot rise, neither the power cap nor
    the clock ceiling holds the card above its floor: the trainers' rule, actions.thermal_verdict), cool."""
    cannot_rise = {f.gpu_id for f in below.fans if not f.can_rise}
    driven = {f.gpu_id for f in below.fans}
    holding = {p.gpu_id for p in below.powers if not p.pause_allowed}
    holding |= {c.gpu_id for c in below.clocks if not c.pause_allowed}
    found = []
    for gpu in snapshot.gpus:
        # The GPU's own share of the trainers' verdict (no fans: the fan failsafe, a sensor that cannot be
        # read, is not "past crit" here).
        heat = gpu_heat(gpu, thermal)
        crit = [t for t in gpu.temps if at_crit(t.temp_c, t.crit_c)]
        read = gpu.up and any(t.temp_c is not None for t in gpu.temps)
        found.append(GpuVerdict(
            gpu_id=gpu.gpu_id, critical=bool(crit) and gpu.up,
            exhausted=(gpu.gpu_id in cannot_rise or gpu.gpu_id not in driven) and gpu.gpu_id not in holding,
            cool=read and not heat.warm,
            reason=", ".join(f"{t.label} {t.temp_c:.0f}°C at crit {t.crit_c:.0f}°C" for t in crit
                             if t.temp_c is not None and t.crit_c is not None) or None))
    return tuple(found)


def at_rest(book: Book, config: UnmanagedConfig) -> bool:
    """Nothing stopped, nothing resting, and nothing to stop (``on_hot = "report"``): ``decide`` would hand back
    ``book`` and no signal whatever the tick's processes, and ``published`` depends only on the GPUs, ``on_hot``
    and the totals (the daemon's tick skips both while they are the same: unmanaged_stops.tick)."""
    return config.on_hot != "stop" and not book.stopped and not book.resting


def candidates(processes: Iterable[GpuProcess], gpus: Iterable[GpuVerdict], config: UnmanagedConfig) -> set[int]:
    """The pids that may be stopped this tick (their identity is read for ``decide``): not a trainer's or an
    attached run's, on a GPU at crit with the other rungs spent, under ``on_hot = "stop"``."""
    if config.on_hot != "stop":
        return set()
    last_rung = {g.gpu_id for g in gpus if g.critical and g.exhausted}
    return {p.pid for p in processes if p.trainer is None and p.gpu_id in last_rung}


def decide(book: Book, config: UnmanagedConfig, gpus: tuple[GpuVerdict, ...], processes: Iterable[GpuProcess],
           identities: Mapping[int, Identity], own_pid: int, now: float, now_unix: float) -> Decision:
    """This tick's stops and resumes. ``identities``: /proc's word on every candidate and stopped pid (a pid
    missing there is gone)."""
    by_gpu = {g.gpu_id: g for g in gpus}
    limit_s = pause_limit_s(config.max_pause_s, "sigstop", heartbeat_seen=False, ranks=None)
    kept: list[Stopped] = []
    resume: list[tuple[Stopped, str]] = []
    forget: list[Stopped] = []
    resting = [r for r in book.resting if r.until > now]
    for stop in book.stopped:
        ident = identities.get(stop.pid)
        if ident is None or ident.start_ticks != stop.start_ticks:
            forget.append(stop)
        elif config.on_hot != "stop":
            resume.append((stop, 'the policy is now on_hot = "report"'))
        elif all(by_gpu[g].cool for g in stop.gpu_ids if g in by_gpu) and any(g in by_gpu for g in stop.gpu_ids):
            resume.append((stop, "its GPU is cool again"))
        elif limit_s is not None and now - stop.since >= limit_s:
            resume.append((stop, f"stopped {limit_s:.0f}s, the bound; not stopped again for "
                                 f"{config.restop_after_s:.0f}s"))
            resting.append(Resting(stop.pid, stop.start_ticks, now + config.restop_after_s))
        else:
            kept.append(stop)
    held = {s.pid for s in kept} | {s.pid for s, _ in resume}
    rests = {(r.pid, r.start_ticks) for r in resting}
    pending: dict[int, list[str]] = {}
    for row in processes:
        gpu = by_gpu.get(row.gpu_id)
        if (row.pid in held or row.pid not in identities or row.trainer is not None or gpu is None
                or not (gpu.critical and gpu.exhausted) or config.on_hot != "stop"):
            continue
        if _spared(identities[row.pid], config, own_pid) is None and (
                (row.pid, identities[row.pid].start_ticks) not in rests):
            pending.setdefault(row.pid, []).append(row.gpu_id)
    new = tuple(Stopped(pid=pid, start_ticks=identities[pid].start_ticks, gpu_ids=tuple(sorted(set(ids))), since=now,
                        since_unix=now_unix, reason="; ".join(f"{g} {by_gpu[g].reason}" for g in sorted(set(ids))))
                for pid, ids in sorted(pending.items()))
    totals = dict(book.stops_total)
    for stop in new:
        for gpu_id in stop.gpu_ids:
            totals[gpu_id] = totals.get(gpu_id, 0) + 1
    return Decision(book=Book(stopped=(*kept, *new), resting=tuple(resting), stops_total=tuple(sorted(totals.items()))),
                    stop=new, resume=tuple(resume), forget=tuple(forget))


def _spared(ident: Identity, config: UnmanagedConfig, own_pid: int) -> str | None:
    """Why this process is never stopped (None: it may be)."""
    if ident.pid == own_pid:
        return "the daemon itself"
    if ident.pid <= 1 or ident.kernel_thread:
        return "init or a kernel thread"
    if ident.state in NEVER_STATES:
        return f"state {ident.state}: stopped, traced or dead already"
    if ident.uid == 0 and not config.stop_root:
        return "root's (stop_root = false)"
    return None


def without(book: Book) -> Book:
    """The book once every stop is given back (the daemon's exit)."""
    return replace(book, stopped=())


def published(book: Book, gpus: Iterable[str], on_hot: str) -> tuple[UnmanagedState, ...]:
    """One state per GPU: the pids stopped for it, the stops counted, the oldest stop's time and reason."""
    totals = dict(book.stops_total)
    states = []
    for gpu_id in gpus:
        mine = [s for s in book.stopped if gpu_id in s.gpu_ids]
        oldest = min(mine, key=lambda s: s.since) if mine else None
        states.append(UnmanagedState(
            gpu_id=gpu_id, on_hot=on_hot, stopped_pids=tuple(sorted(s.pid for s in mine)),
            stops_total=totals.get(gpu_id, 0), stopped_since_unix=oldest.since_unix if oldest else None,
            reason=oldest.reason if oldest else None))
    return tuple(states)
