"""A trainer's supervisor state (the frozen ``Machine``) and the typed steps its transitions are made of (pure).

policy.py decides which transition a tick makes; the helpers here are how: every field a transition
changes is named in a ``dataclasses.replace`` call or one of these functions, so mypy checks each
name and type (no ``**changes: Any``). Counters that are published (restarts, pauses, resumes) live
here next to the run's progress tracking; ``TrainerState`` repeats them for the status document.
``Supervised`` holds the fields a configured trainer's ``Machine`` and an attached run's
``attached.RunState`` share, so that ``enter``, ``note`` and ``paused_for_s`` serve both, as does the
pause rule: ``hot_pause`` (when this node's thermal pause is due) and ``may_resume`` (when it may end),
called by pause.py for configured trainers and by attached.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TypeVar

from gpuwatch.model import TrainerPhase
from gpuwatch.supervise.actions import Action, AfterStop, Command, PauseMode, RestartReason, Thermal


@dataclass(frozen=True)
class Supervised:
    """What every supervised run has: its phase and why, its pause, its progress and its published counters."""
    phase: TrainerPhase = TrainerPhase.STARTING
    since: float = 0.0
    hot_since: float | None = None
    paused_since: float | None = None
    manual_pause: bool = False
    last_progress: float = 0.0  # when its step counter last moved (or it started, attached, resumed)
    heartbeat_seen: bool = False
    seen_steps: int | None = None
    pauses_total: int = 0
    resumes_total: int = 0
    last_exit_code: int | None = None
    reason: str | None = None
    events: tuple[str, ...] = field(default=(), compare=False)  # this tick's, for the log


S = TypeVar("S", bound=Supervised)


@dataclass(frozen=True)
class Machine(Supervised):
    run_started: float | None = None
    pause_mode: PauseMode | None = None
    stop_sent: float | None = None
    killed: bool = False
    after_stop: AfterStop | None = None  # why the current stop was asked for
    run_progressed: bool = False
    seen_mtime: float | None = None
    seen_log_bytes: int = 0
    seen_job: str | None = None  # the job incarnation its ranks report (torchrun restarts change it)
    crashes: int = 0  # consecutive crashes without progress
    next_start: float | None = None
    restarts_total: int = 0
    restarts_by_reason: tuple[tuple[str, int], ...] = ()
    last_exit_reason: str | None = None


# The phases with a process that may still be there (a run in flight).
LIVE = (TrainerPhase.RUNNING, TrainerPhase.PAUSING, TrainerPhase.PAUSED, TrainerPhase.STOPPING)
Transition = tuple[Machine, list[Action]]  # the machine after a tick and what to carry out


def enter(machine: S, phase: TrainerPhase, now: float, reason: str) -> S:
    """Into ``phase`` at ``now``; ``reason`` is published and logged as this tick's event. A transition that
    changes other fields does so before, with ``replace`` or a helper below."""
    return note(replace(machine, phase=phase, since=now, reason=reason), reason)


def note(machine: S, event: str | None = None) -> S:
    """Log ``event`` (default: the current reason) for this tick without changing phase."""
    return replace(machine, events=machine.events + (event or machine.reason or "",))


def hot_pause(hot_since: float | None, thermal: Thermal, now: float,
              debounce_s: float) -> tuple[float | None, str | None]:
    """When the hot spell started (None: not hot) and, when this node's thermal pause is due, why.

    Crit or fan failsafe is due at once (an attached run's; policy.step stops a configured trainer first); hot is
    due after ``debounce_s``, or while the power governor or the clock rung still holds every hot card above its
    floor, after the governor's backstop (docs/power.md)."""
    if thermal.critical:
        return hot_since, thermal.reason or "emergency"
    if not thermal.hot:
        return None, None
    hot_since = hot_since if hot_since is not None else now
    if now - hot_since >= max(debounce_s, thermal.governed_backstop_s or 0.0):
        return hot_since, thermal.reason or "hot"
    return hot_since, None


def may_resume(command: Command | None, thermal: Thermal, manual_pause: bool, held_s: float,
               min_pause_s: float) -> bool:
    """A pause ends by hand, or, when not made by hand, once every sensor is cool and it lasted ``min_pause_s``."""
    if command == "resume":
        return True
    cooled = thermal.cool and not thermal.hot and not thermal.critical
    return not manual_pause and cooled and held_s >= min_pause_s


def new_run(machine: Machine, now: float) -> Machine:
    """A new run starts its progress tracking afresh: its crashes count as without progress until it makes some."""
    return replace(machine, run_started=now, last_progress=now, run_progressed=False, seen_log_bytes=0,
                   seen_steps=None, seen_mtime=None, hot_since=None, seen_job=None)


def count_restart(machine: Machine, why: RestartReason) -> Machine:
    """One more restart, also counted by reason (kept sorted by reason: the published order)."""
    counts = dict(machine.restarts_by_reason)
    counts[why] = counts.get(why, 0) + 1
    return replace(machine, restarts_total=machine.restarts_total + 1,
                   restarts_by_reason=tuple(sorted(counts.items())))


def paused_for_s(machine: Supervised, now: float) -> float:
    """How long the current pause has lasted (from entering the phase when no pause start is known)."""
    return now - (machine.paused_since if machine.paused_since is not None else machine.since)


def next_run_paused(machine: Machine, pause: bool) -> Machine:
    """`gpuwatch pause|resume` with no run to hold now: the next run starts held (pause) or running (resume)."""
    if pause == machine.manual_pause:
        return machine
    why = "paused: the next run starts held" if pause else "resumed: the next run starts running"
    return note(replace(machine, manual_pause=pause, pauses_total=machine.pauses_total + int(pause),
                        resumes_total=machine.resumes_total + int(not pause)), why)
