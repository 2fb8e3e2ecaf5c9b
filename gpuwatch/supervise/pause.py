"""A configured trainer's pause (pure): when this node asks for one, how the run is held, when it ends.

policy.py's phase handlers call these; each takes the tick's ``Inputs`` (``now`` included) and returns
the machine after it, appending to the tick's actions what the effects layer carries out. When a pause is
due and when it may end is the rule attached runs share (``machine.hot_pause``, ``machine.may_resume``).

* This node asks for a pause by hand (`gpuwatch pause`), or once a sensor stayed hot ``debounce_s``;
  while the power governor still holds the card above its floor cap, only after the governor's backstop
  (``Thermal.governed_backstop_s``, docs/power.md).
* A pause is cooperative (the pause file: the launcher holds at its next optimizer step) when the
  trainer is set to or, under ``auto``, once it sent a heartbeat; otherwise the run is frozen (SIGSTOP).
* It ends by hand (`gpuwatch resume`) or, for a pause not made by hand, once every sensor is cool and it
  lasted ``min_pause_s``. Only a SIGSTOP pause needs a bound (``actions.pause_limit_s``).
"""

from __future__ import annotations

from dataclasses import replace

from gpuwatch.config.trainer import TrainerConfig
from gpuwatch.model import TrainerPhase
from gpuwatch.supervise.actions import Action, CancelPause, Freeze, Inputs, RequestPause, Thaw, pause_limit_s
from gpuwatch.supervise.machine import Machine, Transition, enter, hot_pause, may_resume, paused_for_s


def own_pause(machine: Machine, config: TrainerConfig, inputs: Inputs,
              actions: list[Action]) -> tuple[Machine, Transition | None]:
    """This node's own pause, when it asks for one: by hand, or the thermal rule's (``hot_pause``)."""
    if inputs.command == "pause":
        return machine, start(machine, config, inputs, actions, manual=True)
    hot_since, why = hot_pause(machine.hot_since, inputs.thermal, inputs.now, config.debounce_s)
    machine = replace(machine, hot_since=hot_since)
    if why is not None:
        return machine, start(replace(machine, reason=inputs.thermal.reason), config, inputs, actions,
                              manual=False)
    return machine, None


def start(machine: Machine, config: TrainerConfig, inputs: Inputs, actions: list[Action],
                manual: bool, again: str | None = None) -> Transition:
    """A new pause; ``again``: the same manual pause carried over to a new run (not counted twice)."""
    why = "manual pause" if manual else (inputs.thermal.reason or "hot")
    machine = replace(machine, paused_since=inputs.now, manual_pause=manual, hot_since=None,
                      pauses_total=machine.pauses_total + (0 if again else 1))
    prefix = f"{again}: " if again else ""
    auto_cooperative = config.cooperative_pause == "auto" and machine.heartbeat_seen
    if config.cooperative_pause == "always" or auto_cooperative:
        actions.append(RequestPause(why))
        asked = replace(machine, pause_mode="cooperative")
        return enter(asked, TrainerPhase.PAUSING, inputs.now, f"{prefix}pausing: {why}"), actions
    actions.append(Freeze())
    frozen = replace(machine, pause_mode="sigstop")
    return enter(frozen, TrainerPhase.PAUSED, inputs.now, f"{prefix}paused (SIGSTOP): {why}"), actions


def should_resume(machine: Machine, config: TrainerConfig, inputs: Inputs) -> bool:
    return may_resume(inputs.command, inputs.thermal, machine.manual_pause, paused_for_s(machine, inputs.now),
                      config.min_pause_s)


def limit_reached_s(machine: Machine, config: TrainerConfig, inputs: Inputs) -> float | None:
    """The bound this pause has reached (it is stopped then), else None (``pause_limit_s`` says which bound)."""
    limit_s = pause_limit_s(config.max_pause_s, machine.pause_mode, machine.heartbeat_seen, inputs.ranks)
    if limit_s is not None and paused_for_s(machine, inputs.now) >= limit_s:
        return limit_s
    return None


def resume(machine: Machine, inputs: Inputs, actions: list[Action]) -> Transition:
    actions.append(CancelPause())
    actions.append(Thaw())
    resumed = replace(machine, paused_since=None, pause_mode=None, manual_pause=False, last_progress=inputs.now,
                      resumes_total=machine.resumes_total + 1, hot_since=None)
    return enter(resumed, TrainerPhase.RUNNING, inputs.now, "resumed"), actions
