"""Issue 32 point 8: `gpuwatch stop NAME` (pure): the run stops with its checkpoint grace and the trainer stays
STOPPED, whatever the heat, the backoff or the tick count, until `gpuwatch restart NAME`."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpuwatch.model import TrainerPhase as P
from gpuwatch.supervise.actions import CancelPause, Inputs, Kill, Spawn, Terminate, Thermal
from gpuwatch.supervise.machine import Machine
from gpuwatch.supervise.policy import step
from tests.supervise.test_policy import CFG, running

COOL = Thermal()


@pytest.mark.parametrize("machine", [
    running(),
    running(phase=P.PAUSED, paused_since=0, pause_mode="sigstop"),
    running(phase=P.PAUSING, paused_since=0, pause_mode="cooperative"),
], ids=["running", "paused", "pausing"])
def test_a_live_run_stops_with_its_grace_and_stays_stopped(machine: Machine) -> None:
    m, acts = step(machine, CFG, Inputs(now=1, alive=True, command="stop"))
    assert m.phase is P.STOPPING and m.after_stop == "stop"
    assert acts == [CancelPause(), Terminate("manual stop")]
    m, acts = step(m, CFG, Inputs(now=1 + CFG.grace_s - 0.1, alive=True))
    assert acts == []  # the checkpoint grace: no KILL yet
    m, acts = step(m, CFG, Inputs(now=1 + CFG.grace_s, alive=True))
    assert acts == [Kill(f"still running {CFG.grace_s:g}s after SIGTERM")]
    m, _ = step(m, CFG, Inputs(now=12, alive=False, exit_code=-9))
    assert m.phase is P.STOPPED and m.reason == "stopped; `gpuwatch restart t` starts it"
    assert m.restarts_total == 0 and m.crashes == 0  # a stop is no crash
    for now in range(13, 1000, 50):  # cool, then hot and cool again: it stays stopped
        m, acts = step(m, CFG, Inputs(now=now, thermal=COOL if now % 100 else Thermal(hot=True, cool=False)))
        assert m.phase is P.STOPPED and acts == []
    m, acts = step(m, CFG, Inputs(now=1000, command="restart"))
    assert m.phase is P.RUNNING and acts == [Spawn(resume=True)]  # from its last checkpoint


def test_a_run_that_exits_cleanly_when_told_to_stop_is_stopped_not_finished() -> None:
    m, _ = step(running(), CFG, Inputs(now=1, alive=True, command="stop"))
    m, _ = step(m, CFG, Inputs(now=2, alive=False, exit_code=0))
    assert m.phase is P.STOPPED


@pytest.mark.parametrize("machine", [
    Machine(),  # starting
    Machine(phase=P.BACKOFF, next_start=5, after_stop="crash", crashes=1),
    Machine(phase=P.FAILED, crashes=3),
    Machine(phase=P.STOPPED, after_stop="emergency"),  # would restart when cool
], ids=["starting", "backoff", "failed", "emergency-stopped"])
def test_a_trainer_not_running_is_stopped_at_once_and_never_started(machine: Machine) -> None:
    m, acts = step(machine, CFG, Inputs(now=1, command="stop"))
    assert m.phase is P.STOPPED and acts == [] and m.after_stop == "stop"
    m, acts = step(m, CFG, Inputs(now=100, thermal=COOL))
    assert m.phase is P.STOPPED and acts == []


def test_stop_while_a_restart_is_stopping_it_keeps_it_stopped() -> None:
    m, _ = step(running(), CFG, Inputs(now=1, alive=True, command="restart"))
    m, acts = step(m, CFG, Inputs(now=2, alive=True, command="stop"))
    assert m.phase is P.STOPPING and m.after_stop == "stop" and acts == []
    m, _ = step(m, CFG, Inputs(now=3, alive=False, exit_code=0))
    assert m.phase is P.STOPPED


def test_the_daemons_shutdown_of_a_stopped_trainer_changes_nothing_it_needs() -> None:
    stopped = replace(Machine(), phase=P.STOPPED, after_stop="stop")
    m, acts = step(stopped, CFG, Inputs(now=1, shutdown=True))
    assert m.phase is P.STOPPED and acts == []
