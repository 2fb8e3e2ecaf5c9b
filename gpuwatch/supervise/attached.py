"""One attached run's supervisor state (pure): (state, inputs incl. now) -> (state, events to send).

A run started by `gpuwatch train` from a user's shell is governed like a configured trainer, but the
daemon is not its parent: it never spawns, signals or restarts it. What it decides reaches the run as
``attach.Event`` lines on the run's session, which its wrapper carries out (the pause file, a graceful
stop, a restart on ``hung`` when ``--restart`` allows). The rules it shares with configured trainers
are theirs, called here: the thermal verdict (``actions.thermal_verdict``, the governor's backstop
included), the pause rule (``machine.hot_pause``, ``machine.may_resume``), a job's ranks
(``ranks.aggregate``: paused only once every local rank holds).

* A GPU it uses hot for ``[attached] debounce_s`` (or past the power governor's backstop) -> ``pause``;
  PAUSED once the heartbeats acknowledge it; ``resume`` once every sensor is below limit - hysteresis
  and the pause lasted ``min_pause_s``. Crit or fan failsafe pauses at once (no debounce): the daemon
  cannot stop a run it did not start, and a held run no longer heats the card.
* No new step in its heartbeats for ``hang_timeout_s`` while running -> ``hung`` once (the phase stays
  running, the step age grows: the TrainerHung alert); a run that never wrote a heartbeat is never judged
  hung (nothing tells its progress).
* A job spanning nodes held at another node's request (its ranks say so: ``ranks.held_by``) is PAUSED here
  too (``remote``), as a configured trainer is: never counted, never resumed from here, never hung; it runs
  again when no node asks any more, and this node may still ask for its own pause meanwhile.
* Its user stopped it (Ctrl-Z on `gpuwatch train`: the wrapper's ``Beat`` says ``suspended`` before it stops)
  -> SUSPENDED from RUNNING: never hung, a pause asked meanwhile still sent; RUNNING again once continued.
* ``Exited`` (not restarting) -> FINISHED (code 0), FAILED, or STOPPED after a `gpuwatch stop` or when
  its wrapper passed on its user's signal (a Ctrl-C: ended on purpose, not a failure to alert on).
* The session ended without ``Exited``: while its pid lives the run is *detached* (kept, its phase
  unchanged, waiting for the wrapper to re-attach); once the pid is gone it is FAILED ("gone").
* A re-attach holding the pause (a new daemon) starts PAUSING with that pause: it is never released
  before the card is cool and ``min_pause_s`` passed, and acknowledged by the heartbeats it becomes PAUSED.
"""

from __future__ import annotations

import re
import signal
from dataclasses import dataclass, replace

from gpuwatch.attach import NAME_MAX_CHARS, Event
from gpuwatch.config.sections import AttachedConfig
from gpuwatch.model import TrainerPhase
from gpuwatch.supervise.actions import Command, Thermal
from gpuwatch.supervise.machine import Supervised, enter, hot_pause, may_resume, note, paused_for_s

ENDED = (TrainerPhase.FINISHED, TrainerPhase.FAILED, TrainerPhase.STOPPED)
_HELD = (TrainerPhase.PAUSING, TrainerPhase.PAUSED)


@dataclass(frozen=True)
class RunState(Supervised):
    """An attached run: what every supervised run has (``machine.Supervised``), and what only an attached one."""
    phase: TrainerPhase = TrainerPhase.RUNNING
    hung: bool = False  # ``hung`` was sent for the current silence
    remote: bool = False  # PAUSED because another node's request holds the job (``RunInputs.held_by``)
    ended: float | None = None  # when it ended (monotonic): dropped ``keep_ended_s`` later


@dataclass(frozen=True)
class RunInputs:
    now: float
    thermal: Thermal = Thermal()
    steps_total: int | None = None  # from the Beats (a job: the minimum over its ranks)
    acknowledged: bool = False  # it holds for our pause (a job: every local rank)
    heartbeat_seen: bool = False
    connected: bool = True  # its session is open
    alive: bool = True  # its pid still lives
    exit_code: int | None = None  # the wrapper's final Exited (not restarting)
    exit_signal: int | None = None  # ... ended by a signal its wrapper passed on (its user's Ctrl-C, a kill)
    command: Command | None = None
    held_by: str | None = None  # "node-b: hot ..." while another node's request holds the job (ranks.held_by)
    suspended: int | None = None  # its user stopped it (Ctrl-Z): the signal its wrapper's Beat names


def start(now: float, paused: bool = False, reason: str | None = None) -> RunState:
    """A new attachment; a re-attach that holds the pause keeps it (a manual one stays manual)."""
    if not paused:
        return RunState(since=now, last_progress=now, reason="attached", events=("attached",))
    why = reason or "paused"
    return RunState(phase=TrainerPhase.PAUSING, since=now, paused_since=now, last_progress=now,
                    manual_pause=why.startswith("manual"), reason=f"re-attached holding its pause: {why}",
                    events=(f"re-attached holding its pause: {why}",))


def reattached(run: RunState, now: float, paused: bool, reason: str | None) -> RunState:
    """A known run's wrapper back on a new session: the pause it holds wins where the two differ (it held on
    while it had no daemon, or let go after ``attach.HOLD_WITHOUT_DAEMON_S``); the counters are kept."""
    if paused == (run.phase in _HELD):
        return replace(run, reason="re-attached")
    fresh = start(now, paused, reason)
    return replace(fresh, pauses_total=run.pauses_total, resumes_total=run.resumes_total,
                   heartbeat_seen=run.heartbeat_seen, seen_steps=run.seen_steps)


def step(run: RunState, config: AttachedConfig, inputs: RunInputs) -> tuple[RunState, list[Event]]:
    """Advance one attached run by one tick."""
    if run.events:  # (a replace that changes nothing costs as much as one that does: every run, every tick)
        run = replace(run, events=())
    if run.phase in ENDED:
        return run, []
    run = _progress(run, inputs)
    if inputs.exit_code is not None:
        return _exited(run, inputs.now, inputs.exit_code, inputs.exit_signal), []
    if not inputs.connected:
        if inputs.alive:
            why = "detached: its wrapper's connection ended; waiting for it to re-attach"
            return (run if run.reason == why else note(replace(run, reason=why))), []
        return _end(run, TrainerPhase.FAILED, inputs.now, "gone: its wrapper went away without an exit status"), []
    if inputs.command == "stop":
        stopping = enter(run, TrainerPhase.STOPPING, inputs.now, "stopping: gpuwatch stop")
        return stopping, [Event("stop", "gpuwatch stop")]
    if run.phase is TrainerPhase.STOPPING:
        return run, []
    if run.phase is TrainerPhase.SUSPENDED or (inputs.suspended is not None and run.phase is TrainerPhase.RUNNING):
        return _suspended(run, config, inputs)
    if run.remote:
        return _held_remotely(run, config, inputs)
    if run.phase in _HELD:
        return _held(run, config, inputs)
    return _running(run, config, inputs)


def _progress(run: RunState, inputs: RunInputs) -> RunState:
    """A new step count is progress: the hang timer restarts and a reported hang is over."""
    if inputs.heartbeat_seen and not run.heartbeat_seen:
        run = replace(run, heartbeat_seen=True)
    if inputs.steps_total is not None and inputs.steps_total != run.seen_steps:
        return replace(run, seen_steps=inputs.steps_total, last_progress=inputs.now, hung=False)
    return run


def _own_pause(run: RunState, config: AttachedConfig,
               inputs: RunInputs) -> tuple[RunState, tuple[RunState, list[Event]] | None]:
    """This node's own pause, when it asks for one: by hand, or the thermal rule's (``machine.hot_pause``: crit at
    once, hot for ``debounce_s`` or the power governor's backstop)."""
    if inputs.command == "pause":
        return run, _pause(run, inputs.now, "manual pause", manual=True)
    hot_since, why = hot_pause(run.hot_since, inputs.thermal, inputs.now, config.debounce_s)
    if hot_since != run.hot_since:
        run = replace(run, hot_since=hot_since)
    return run, (_pause(run, inputs.now, why, manual=False) if why is not None else None)


def _running(run: RunState, config: AttachedConfig, inputs: RunInputs) -> tuple[RunState, list[Event]]:
    run, paused = _own_pause(run, config, inputs)
    if paused:
        return paused
    if inputs.held_by is not None:
        held = replace(run, remote=True, paused_since=inputs.now)
        return enter(held, TrainerPhase.PAUSED, inputs.now, f"paused by {inputs.held_by}"), []
    quiet_s = inputs.now - run.last_progress
    hang_s = config.hang_timeout_s
    if hang_s is not None and run.heartbeat_seen and not run.hung and quiet_s >= hang_s:
        why = f"hung: no step for {quiet_s:.0f}s"
        return note(replace(run, hung=True, reason=why)), [Event("hung", why)]
    return run, []


def _held(run: RunState, config: AttachedConfig, inputs: RunInputs) -> tuple[RunState, list[Event]]:
    if may_resume(inputs.command, inputs.thermal, run.manual_pause, paused_for_s(run, inputs.now), config.min_pause_s):
        resumed = replace(run, paused_since=None, manual_pause=False, hot_since=None, last_progress=inputs.now,
                          resumes_total=run.resumes_total + 1, hung=False)
        return enter(resumed, TrainerPhase.RUNNING, inputs.now, "resumed"), [Event("resume")]
    if inputs.command == "pause" and not run.manual_pause:
        return note(replace(run, manual_pause=True), "held by hand from now on"), []
    if run.phase is TrainerPhase.PAUSING and inputs.acknowledged:
        return enter(run, TrainerPhase.PAUSED, inputs.now, "paused at a step boundary"), []
    return replace(run, last_progress=inputs.now), []  # held is not hung


def _held_remotely(run: RunState, config: AttachedConfig, inputs: RunInputs) -> tuple[RunState, list[Event]]:
    """Held at another node's request: this node may ask too, but only that node releases its own request."""
    run, paused = _own_pause(run, config, inputs)
    if paused:
        return paused
    if inputs.held_by is None:
        released = replace(run, remote=False, paused_since=None, last_progress=inputs.now)
        return enter(released, TrainerPhase.RUNNING, inputs.now, "running again: no node asks for the pause"), []
    if inputs.command == "resume":
        return note(run, f"not resumed: paused by {inputs.held_by} (resume it there)"), []
    return replace(run, reason=f"paused by {inputs.held_by}", last_progress=inputs.now), []  # held is not hung


def _suspended(run: RunState, config: AttachedConfig, inputs: RunInputs) -> tuple[RunState, list[Event]]:
    """Stopped by its user (Ctrl-Z on its wrapper, which said so before it stopped): it makes no step and heats
    nothing, so it is never hung; running again (the hang timer restarted) once its wrapper beats continued. A
    pause asked meanwhile (by hand, a hot card) is sent as usual: its wrapper carries it out when continued."""
    if inputs.suspended is None:
        back = replace(run, last_progress=inputs.now, hung=False)
        return enter(back, TrainerPhase.RUNNING, inputs.now, "continued by its user"), []
    run, paused = _own_pause(run, config, inputs)
    if paused:
        return paused
    if run.phase is TrainerPhase.SUSPENDED:
        return replace(run, last_progress=inputs.now), []
    why = f"suspended by its user: {_signal_name(inputs.suspended)} (fg, bg or kill -CONT of its wrapper continue it)"
    return enter(replace(run, last_progress=inputs.now), TrainerPhase.SUSPENDED, inputs.now, why), []


def _pause(run: RunState, now: float, why: str, manual: bool) -> tuple[RunState, list[Event]]:
    paused = replace(run, paused_since=now, manual_pause=manual, hot_since=None, pauses_total=run.pauses_total + 1,
                     remote=False)
    return enter(paused, TrainerPhase.PAUSING, now, f"pausing: {why}"), [Event("pause", why)]


def _exited(run: RunState, now: float, code: int, signalled: int | None = None) -> RunState:
    if run.phase is TrainerPhase.STOPPING:
        return _end(replace(run, last_exit_code=code), TrainerPhase.STOPPED, now, f"stopped (exit {code})")
    if signalled is not None:  # its user ended it (Ctrl-C, a kill of the wrapper): not a failure to alert on
        return _end(replace(run, last_exit_code=code), TrainerPhase.STOPPED, now,
                    f"stopped by its user: {_signal_name(signalled)} (exit {code})")
    if code == 0:
        return _end(replace(run, last_exit_code=code), TrainerPhase.FINISHED, now, "finished")
    return _end(replace(run, last_exit_code=code), TrainerPhase.FAILED, now, f"failed: exit {code}")


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def _end(run: RunState, phase: TrainerPhase, now: float, why: str) -> RunState:
    return enter(replace(run, ended=now, paused_since=None), phase, now, why)


# ---- names ---------------------------------------------------------------------------------------
def sanitize(name: str) -> str:
    """[A-Za-z0-9._-] only (anything else becomes ``-``), at most ``NAME_MAX_CHARS``; "run" when nothing is left."""
    clean = re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-.")[:NAME_MAX_CHARS].strip("-.")
    return clean or "run"


def unique_name(wanted: str, taken: set[str]) -> str:
    """``wanted``, or ``wanted-2``, ``wanted-3``... the first not in ``taken`` (trimmed to fit the length)."""
    if wanted not in taken:
        return wanted
    n = 2
    while True:
        suffix = f"-{n}"
        candidate = wanted[: NAME_MAX_CHARS - len(suffix)] + suffix
        if candidate not in taken:
            return candidate
        n += 1


# ---- its GPUs ------------------------------------------------------------------------------------
def declared_gpus(declared: list[str], here: frozenset[str] | None) -> tuple[tuple[str, ...], str]:
    """The declared GPUs (`--gpu`) that are this machine's, and a note for the wrapper about the others.

    A slot that is not here (a typo, another box's) would leave the run judged on no GPU: never paused,
    silently. Dropped, the run is judged on the rest, else on the GPUs it is seen using, else on every GPU.
    """
    if here is None:
        return tuple(declared), ""
    kept, missing = [g for g in declared if g in here], [g for g in declared if g not in here]
    if not missing:
        return tuple(kept), ""
    what = "its other --gpu" if kept else "the GPUs it uses (every GPU until it is seen using one)"
    return tuple(kept), (f"--gpu {', '.join(missing)}: not a GPU of this machine ({', '.join(sorted(here)) or 'none'})"
                         f"; its limits apply to {what}")
