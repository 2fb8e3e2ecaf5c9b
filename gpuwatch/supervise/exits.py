"""What the end of a run leads to (pure): finished, failed, stopped after an emergency, or a backoff.

policy.step comes here when a live run's leader is gone (or abandoned in the kernel). Why the run was
being stopped (``Machine.after_stop``) decides: a manual restart or an over-long pause starts again at
once; a hang, a crash or a GPU reset counts as a crash without progress unless the run made some
(progress.py), and ``give_up_after_crashes`` of those in a row fail it; a crash waits out an
exponential backoff, a GPU reset waits for its GPUs instead.
"""

from __future__ import annotations

from dataclasses import replace

from gpuwatch.config.trainer import TrainerConfig
from gpuwatch.model import TrainerPhase
from gpuwatch.supervise.actions import Action, CancelPause, Inputs
from gpuwatch.supervise.machine import Machine, Transition, enter


def backoff_delay_s(config: TrainerConfig, crashes: int, jitter: float) -> float:
    base = min(config.backoff.max_s, config.backoff.initial_s * 2.0 ** max(0, crashes - 1))
    return max(0.0, base * (1 + config.backoff.jitter_ratio * jitter))


def run_ended(machine: Machine, config: TrainerConfig, inputs: Inputs, actions: list[Action]) -> Transition:
    """The leader is gone (``inputs.exit_code``; None: unknown or abandoned): where the trainer goes next."""
    code, now = inputs.exit_code, inputs.now
    after = machine.after_stop if machine.phase is TrainerPhase.STOPPING else None
    # A manual pause lasts until `gpuwatch resume`: the next run of a paused trainer (after a GPU reset, a
    # crash, an emergency, a restart) comes back held. Only its own bound (max_pause_s) ends it.
    manual = machine.manual_pause and after != "max-pause"
    machine = replace(machine, last_exit_code=code, last_exit_reason=inputs.exit_reason or _describe(code),
                      paused_since=None, pause_mode=None, manual_pause=manual, stop_sent=None, killed=False)
    actions.append(CancelPause())
    if inputs.spawn_failed:
        # A missing program, cwd or user does not come back by retrying: one clear failure, no loop.
        return enter(machine, TrainerPhase.FAILED, now, f"{inputs.exit_reason}; fix the [[trainer]] "
                     f"and run `gpuwatch restart {config.name}`"), actions
    if after is None and code == 0:
        return enter(machine, TrainerPhase.FINISHED, now, "finished (exit 0)"), actions
    if after == "stop":  # `gpuwatch stop`: stays stopped until `gpuwatch restart`
        why = f"stopped; `gpuwatch restart {config.name}` starts it"
        return enter(machine, TrainerPhase.STOPPED, now, why), actions
    if after == "emergency":
        why = "emergency stop; restarts when cool" if config.restart_after_emergency else "emergency stop"
        return enter(machine, TrainerPhase.STOPPED, now, why), actions
    if after in ("restart", "max-pause"):
        again = replace(machine, next_start=now, crashes=0 if machine.run_progressed else machine.crashes)
        return enter(again, TrainerPhase.BACKOFF, now, "restarting"), actions
    crashes = 1 if machine.run_progressed else machine.crashes + 1
    what = {"hang": "hang", "gpu_reset": "GPU reset"}.get(after or "", f"crash ({machine.last_exit_reason})")
    if crashes >= config.give_up_after_crashes:
        why = f"failed: {crashes} crash(es) without progress, last {what}"
        return enter(replace(machine, crashes=crashes), TrainerPhase.FAILED, now, why), actions
    if after == "gpu_reset":  # no backoff: it waits for its GPUs to answer again
        waiting = replace(machine, next_start=now, crashes=crashes)
        return enter(waiting, TrainerPhase.BACKOFF, now, "GPU reset; restart once its GPUs answer"), actions
    delay_s = backoff_delay_s(config, crashes, inputs.jitter)
    backing_off = replace(machine, after_stop="hang" if after == "hang" else "crash", next_start=now + delay_s,
                          crashes=crashes)
    return enter(backing_off, TrainerPhase.BACKOFF, now, f"{what}; restart in {delay_s:.1f}s"), actions


def _describe(code: int | None) -> str:
    if code is None:
        return "unknown exit"
    if code < 0:
        return f"killed by signal {-code}"
    return f"exit {code}"
