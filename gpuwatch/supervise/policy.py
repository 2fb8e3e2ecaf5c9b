"""The training supervisor's state machine (pure): (state, inputs incl. now) -> (state, actions).

One frozen ``Machine`` per trainer (machine.py, with the typed steps transitions are made of). The
effects layer (trainer.py, supervisor.py) observes the world into ``Inputs`` (thermal verdict from the
tick's snapshot, process status, progress counters, a manual command) and carries out the returned
actions (both defined in actions.py). ``now`` is monotonic seconds; nothing here reads a clock.

Rules worth knowing:
* Restart delays grow only with crashes *without progress*; a run that advanced its step counter,
  touched its progress file or stayed up ``stable_after_s`` resets the count (progress.py). What an
  ended run leads to (finished, failed, backoff, stopped) is exits.py's.
* Nothing is ever (re)started while a GPU it uses is over a pause limit: it would just pause again.
* A hot GPU pauses after ``debounce_s``; while its power governor still holds it above the floor cap,
  only after the governor's backstop (``Thermal.governed_backstop_s``). Crit and failsafe stop at once.
  How a pause is asked for, held (cooperative or SIGSTOP) and ended is pause.py's.
* A stop always goes CONT -> TERM -> (grace) -> KILL, at shutdown too, each trainer with its own grace;
  the effects layer does the CONT. A process still there ``stuck_after_s`` after KILL (D state) is
  abandoned: reported, no longer waited for.
* A reset of a GPU it uses ends the run (its GPU context is lost); it restarts from its checkpoint once
  its GPUs answer again, as a restart with reason ``gpu_reset``. Nothing (re)starts before that.
* A distributed job is paused only when every local rank holds; a job held at another node's request
  is PAUSED here too (mode ``remote``: never counted, bounded or resumed from here, never a hang).
* Only a SIGSTOP pause needs a bound (``pause_limit_s``): nothing is in flight in a cooperative hold.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from gpuwatch.config.trainer import TrainerConfig
from gpuwatch.model import TrainerPhase
from gpuwatch.supervise import pause
from gpuwatch.supervise.actions import (
    Abandon,
    Action,
    AfterStop,
    CancelPause,
    CollectEvidence,
    Freeze,
    Inputs,
    Kill,
    RestartReason,
    Spawn,
    Terminate,
)
from gpuwatch.supervise.exits import run_ended
from gpuwatch.supervise.machine import (
    LIVE,
    Machine,
    Transition,
    count_restart,
    enter,
    new_run,
    next_run_paused,
    note,
)
from gpuwatch.supervise.progress import observe_progress

# A run that a GPU reset or crit stops at once (a STOPPING one is on its way out already).
STOPPABLE = (TrainerPhase.RUNNING, TrainerPhase.PAUSING, TrainerPhase.PAUSED)


def step(machine: Machine, config: TrainerConfig, inputs: Inputs) -> Transition:
    """Advance one trainer by one tick."""
    actions: list[Action] = []
    machine = replace(machine, events=())
    if machine.phase in LIVE:
        machine = observe_progress(machine, config, inputs)
    if inputs.shutdown:
        return _shutdown(machine, config, inputs, actions)
    if machine.phase in LIVE and not inputs.alive:
        return run_ended(machine, config, inputs, actions)
    if machine.phase in STOPPABLE and inputs.gpu_reset:
        return _stop(machine, inputs, actions, inputs.gpu_reset, "gpu_reset")
    if machine.phase in STOPPABLE and inputs.thermal.critical:
        return _stop(machine, inputs, actions, inputs.thermal.reason or "emergency", "emergency")
    if inputs.command == "restart":
        return _manual_restart(machine, config, inputs, actions)
    if inputs.command == "stop":
        return _manual_stop(machine, config, inputs, actions)
    if machine.phase not in LIVE and inputs.command in ("pause", "resume"):
        machine = next_run_paused(machine, inputs.command == "pause")
    handler = _HANDLERS.get(machine.phase)
    return handler(machine, config, inputs, actions) if handler else (machine, actions)


def _manual_restart(machine: Machine, config: TrainerConfig, inputs: Inputs, actions: list[Action]) -> Transition:
    """`gpuwatch restart`: a live run is stopped first (and restarted once gone); otherwise it starts now,
    from its checkpoint unless it had finished."""
    if machine.phase is TrainerPhase.STOPPING:
        return replace(machine, after_stop="restart"), actions
    if machine.phase in LIVE:
        return _stop(machine, inputs, actions, "manual restart", "restart")
    resume = machine.phase is not TrainerPhase.FINISHED
    return _spawn(replace(machine, crashes=0), config, inputs, actions, "manual", resume=resume)


def _manual_stop(machine: Machine, config: TrainerConfig, inputs: Inputs, actions: list[Action]) -> Transition:
    """`gpuwatch stop`: a live run is stopped as any stop is (CONT, TERM, its ``grace_s`` to checkpoint, KILL), and
    the trainer stays STOPPED (exits.py) until `gpuwatch restart`; one not running is STOPPED at once."""
    if machine.phase is TrainerPhase.STOPPING:
        return replace(machine, after_stop="stop"), actions
    if machine.phase in LIVE:
        return _stop(machine, inputs, actions, "manual stop", "stop")
    stopped = replace(machine, after_stop="stop", next_start=None)
    why = f"stopped; `gpuwatch restart {config.name}` starts it"
    return enter(stopped, TrainerPhase.STOPPED, inputs.now, why), actions


def _starting(machine: Machine, config: TrainerConfig, inputs: Inputs, actions: list[Action]) -> Transition:
    if inputs.thermal.hot:
        return note(replace(machine, reason=f"waiting to start: {inputs.thermal.reason}")), actions
    if not inputs.gpus_ready:
        return replace(machine, reason=f"waiting to start: {inputs.gpus_wait}"), actions
    actions.append(Spawn(resume=False))
    if machine.manual_pause:
        return pause.start(new_run(machine, inputs.now), config, inputs, actions, manual=True, again="started")
    return enter(new_run(machine, inputs.now), TrainerPhase.RUNNING, inputs.now, "started"), actions


def _running(machine: Machine, config: TrainerConfig, inputs: Inputs, actions: list[Action]) -> Transition:
    machine, paused = pause.own_pause(machine, config, inputs, actions)
    if paused:
        return paused
    held_by = inputs.ranks.held_by if inputs.ranks else None
    if held_by is not None:
        held = replace(machine, pause_mode="remote", paused_since=inputs.now)
        return enter(held, TrainerPhase.PAUSED, inputs.now, f"paused by {held_by}"), actions
    quiet_s = inputs.now - machine.last_progress
    if config.hang_timeout_s is not None and quiet_s >= config.hang_timeout_s:
        why = f"hang: no progress for {quiet_s:.0f}s"
        actions.append(CollectEvidence(why))
        return _stop(machine, inputs, actions, why, "hang")
    return machine, actions


def _pausing(machine: Machine, config: TrainerConfig, inputs: Inputs, actions: list[Action]) -> Transition:
    if pause.should_resume(machine, config, inputs):
        return pause.resume(machine, inputs, actions)
    if inputs.heartbeat_paused:  # a distributed job: every local rank holds ("k/N ranks held" is in the status)
        return enter(machine, TrainerPhase.PAUSED, inputs.now, "paused at a step boundary"), actions
    limit_s = pause.limit_reached_s(machine, config, inputs)
    if limit_s is not None:
        return _stop(machine, inputs, actions, f"paused longer than {limit_s:g}s", "max-pause")
    if config.cooperative_pause == "auto" and inputs.now - machine.since >= config.pause_ack_timeout_s:
        actions.append(Freeze())
        ranks = inputs.ranks
        missing = f" from {ranks.ranks - ranks.ranks_held} of {ranks.ranks} ranks" if ranks else ""
        frozen = replace(machine, pause_mode="sigstop")
        return enter(frozen, TrainerPhase.PAUSED, inputs.now, f"no pause acknowledgement{missing}: SIGSTOP"), actions
    return machine, actions


def _paused(machine: Machine, config: TrainerConfig, inputs: Inputs, actions: list[Action]) -> Transition:
    if machine.pause_mode == "remote":
        return _held_remotely(machine, config, inputs, actions)
    if pause.should_resume(machine, config, inputs):
        return pause.resume(machine, inputs, actions)
    limit_s = pause.limit_reached_s(machine, config, inputs)
    if limit_s is not None:
        return _stop(machine, inputs, actions, f"paused longer than {limit_s:g}s", "max-pause")
    return machine, actions


def _stopping(machine: Machine, config: TrainerConfig, inputs: Inputs, actions: list[Action]) -> Transition:
    # No checkpoint can be written without a GPU: a reset's stop has its own grace.
    grace_s = config.gpu_reset_grace_s if machine.after_stop == "gpu_reset" else config.grace_s
    if machine.stop_sent is None:
        return machine, actions
    since_term_s = inputs.now - machine.stop_sent
    if not machine.killed and since_term_s >= grace_s:
        actions.append(Kill(f"still running {grace_s:g}s after SIGTERM"))
        return note(replace(machine, killed=True), f"SIGKILL after {grace_s:g}s grace"), actions
    if machine.killed and since_term_s >= grace_s + config.stuck_after_s:
        why = f"still there {config.stuck_after_s:g}s after SIGKILL (stuck in the kernel): left behind"
        actions.append(Abandon(why))
        return run_ended(machine, config, replace(inputs, alive=False, exit_code=None, exit_reason=why), actions)
    return machine, actions


def _waiting(machine: Machine, config: TrainerConfig, inputs: Inputs, actions: list[Action]) -> Transition:
    """BACKOFF, or STOPPED after an emergency: start again when due and cool."""
    stopped = machine.phase is TrainerPhase.STOPPED
    if stopped and (machine.after_stop != "emergency" or not config.restart_after_emergency):
        return machine, actions
    if not inputs.gpus_ready:
        return replace(machine, reason=f"waiting to restart: {inputs.gpus_wait}"), actions
    if inputs.thermal.hot or inputs.thermal.critical:
        return replace(machine, reason=f"waiting to restart: {inputs.thermal.reason}"), actions
    if machine.next_start is not None and inputs.now < machine.next_start:
        return machine, actions
    why: RestartReason = "emergency" if stopped else (machine.after_stop or "crash")
    return _spawn(machine, config, inputs, actions, why, resume=True)


def _spawn(machine: Machine, config: TrainerConfig, inputs: Inputs, actions: list[Action], why: RestartReason,
           resume: bool) -> Transition:
    actions.append(Spawn(resume=resume))
    restarted = replace(count_restart(new_run(machine, inputs.now), why), next_start=None, after_stop=None,
                        paused_since=None, pause_mode=None)
    if machine.manual_pause:
        # Still paused by hand: the new run is asked to hold from its start (the pause file is written right
        # after the spawn cleared the old one, so its first step holds), or frozen when it cannot cooperate.
        return pause.start(restarted, config, inputs, actions, manual=True, again=f"restarted ({why}), still paused")
    return enter(restarted, TrainerPhase.RUNNING, inputs.now, f"restarted ({why})"), actions


def _held_remotely(machine: Machine, config: TrainerConfig, inputs: Inputs, actions: list[Action]) -> Transition:
    """Held at another node's request: this node may ask too, but only that node releases its own request."""
    machine, paused = pause.own_pause(machine, config, inputs, actions)
    if paused:
        return paused
    held_by = inputs.ranks.held_by if inputs.ranks else None
    if held_by is None:
        released = replace(machine, paused_since=None, pause_mode=None, last_progress=inputs.now)
        return enter(released, TrainerPhase.RUNNING, inputs.now, "running again: no node asks for the pause"), actions
    if inputs.command == "resume":
        return note(machine, f"not resumed: paused by {held_by} (resume it there)"), actions
    # Held is not hung: the hang timer restarts every tick of the hold.
    return replace(machine, reason=f"paused by {held_by}", last_progress=inputs.now), actions


def _stop(machine: Machine, inputs: Inputs, actions: list[Action], why: str, after: AfterStop) -> Transition:
    actions.append(CancelPause())
    actions.append(Terminate(why))
    stopping = replace(machine, stop_sent=inputs.now, killed=False, after_stop=after)
    return enter(stopping, TrainerPhase.STOPPING, inputs.now, f"stopping: {why}"), actions


def _shutdown(machine: Machine, config: TrainerConfig, inputs: Inputs, actions: list[Action]) -> Transition:
    if machine.phase in LIVE and inputs.alive:
        if machine.phase is TrainerPhase.STOPPING:
            # Each trainer's own grace holds at shutdown too, counted from the TERM it already got, for the
            # stop it is in (gpu_reset_grace_s for a reset's); the supervisor's deadline (largest grace +
            # 10 s) is only the backstop. It ends STOPPED "daemon stopping" below once it is gone.
            return _stopping(machine, config, inputs, actions)
        return _stop(machine, inputs, actions, "daemon stopping", "shutdown")
    if machine.phase in LIVE:
        machine = replace(machine, last_exit_code=inputs.exit_code, last_exit_reason=inputs.exit_reason)
    if machine.phase is TrainerPhase.STOPPED and machine.after_stop == "shutdown":
        return machine, actions
    stopped = replace(machine, after_stop="shutdown")
    return enter(stopped, TrainerPhase.STOPPED, inputs.now, "stopped: daemon stopping"), actions


Handler = Callable[[Machine, TrainerConfig, Inputs, list[Action]], Transition]
_HANDLERS: dict[TrainerPhase, Handler] = {
    TrainerPhase.STARTING: _starting,
    TrainerPhase.RUNNING: _running,
    TrainerPhase.PAUSING: _pausing,
    TrainerPhase.PAUSED: _paused,
    TrainerPhase.STOPPING: _stopping,
    TrainerPhase.BACKOFF: _waiting,
    TrainerPhase.STOPPED: _waiting,
}
