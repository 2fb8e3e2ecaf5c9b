"""A manual pause lasts until `gpuwatch resume`, across a new run (issue 38 point 2): a GPU reset while paused
by hand restarts the trainer held, with a real child process; the policy's table for the other restarts."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import psutil
import pytest

from gpuwatch.config.trainer import TrainerConfig
from gpuwatch.heartbeat import read_heartbeat
from gpuwatch.model import Acted, GpuResetState, TrainerState
from gpuwatch.model import TrainerPhase as P
from gpuwatch.sim.tree import FakeSysfsTree
from gpuwatch.supervise.actions import Freeze, Inputs, RequestPause, Spawn, Thermal
from gpuwatch.supervise.machine import Machine
from gpuwatch.supervise.policy import step
from tests.supervise.test_supervisor import COOPERATIVE, Harness, script
from tests.support.trees import capture

SLOT = "0000:03:00.0"


class ResettableHarness(Harness):
    """Each tick's snapshot carries the GPU's reset count, as the reset watch reports it."""

    resets_total = 0

    def tick(self) -> TrainerState:
        snapshot = replace(self.sampler.sample(), resets=(GpuResetState(gpu_id=SLOT, resets_total=self.resets_total,
                                                                        last_source="devcoredump"),))
        return self.sup.tick(snapshot, Acted(fans=self.fans), self.config)[0]


@pytest.fixture
def make(tmp_path: Path, fake_sysfs: FakeSysfsTree):
    made: list[ResettableHarness] = []
    card = fake_sysfs.add_capture(capture("navi21-rx6900xt-sapphire-nitro"), card="card0", pci_slot=SLOT)

    def build(**trainer: Any) -> ResettableHarness:
        h = ResettableHarness(tmp_path, fake_sysfs, card.hwmon_dir, **trainer)
        h.set_junction_c(60)
        made.append(h)
        return h

    yield build
    for h in made:
        h.close()


def test_a_gpu_reset_during_a_manual_pause_restarts_the_trainer_held(make, tmp_path: Path) -> None:
    h = make(command=script(tmp_path, "coop.py", COOPERATIVE))
    h.until(lambda s: s.phase is P.RUNNING and (s.steps_total or 0) > 2)
    h.sup.command("pause", "t")
    first = h.until(lambda s: s.phase is P.PAUSED).pid
    h.resets_total = 1
    s = h.until(lambda s: s.restarts_total == 1 and s.phase is P.PAUSED and s.pid != first)
    assert dict(s.restarts_by_reason) == {"gpu_reset": 1}
    assert h.trainer.machine.manual_pause and h.trainer.machine.pause_mode == "cooperative"
    assert h.trainer.pause_file.exists()
    beat = read_heartbeat(h.trainer.heartbeat_file)
    assert beat is not None and beat.pid == s.pid and beat.paused and beat.steps_total == 0  # held from its start
    assert s.pauses_total == 1  # the same pause, not a second one
    h.sup.command("resume", "t")
    h.until(lambda s: s.phase is P.RUNNING and (s.steps_total or 0) > 2)
    assert not h.trainer.pause_file.exists()
    assert psutil.Process(s.pid).is_running()


CFG = TrainerConfig(name="t", command=["x"], min_pause_s=0, grace_s=1.0, backoff={"initial_s": 0.0, "max_s": 0.0,
                                                                                   "jitter_ratio": 0.0})


def _paused_by_hand(mode: str = "cooperative") -> Machine:
    return Machine(phase=P.PAUSED, since=0.0, run_started=0.0, manual_pause=True, paused_since=0.0,
                   pause_mode=mode, heartbeat_seen=mode == "cooperative", pauses_total=1)  # type: ignore[arg-type]


@pytest.mark.parametrize("why, first", [
    ("crash", Inputs(now=1.0, alive=False, exit_code=1)),  # died while held
    ("emergency", Inputs(now=1.0, alive=True, thermal=Thermal(critical=True, reason="crit"))),
    ("restart", Inputs(now=1.0, alive=True, command="restart")),
])
def test_every_restart_of_a_manually_paused_trainer_comes_back_held(why: str, first: Inputs) -> None:
    machine, _ = step(_paused_by_hand(), CFG, first)
    for now in (2.0, 3.0, 4.0, 5.0):  # the stop runs its course, then the restart
        alive = machine.phase is P.STOPPING and now < 3.0
        machine, actions = step(machine, CFG, Inputs(now=now, alive=alive, exit_code=None if alive else 0))
        if any(isinstance(a, Spawn) for a in actions):
            break
    assert [type(a) for a in actions] == [Spawn, RequestPause]
    assert machine.phase is P.PAUSING and machine.manual_pause and machine.pauses_total == 1


def test_a_trainer_that_cannot_cooperate_is_frozen_at_its_restart() -> None:
    machine = replace(_paused_by_hand("sigstop"), phase=P.BACKOFF, next_start=0.0)
    machine, actions = step(machine, CFG.model_copy(update={"cooperative_pause": "never"}), Inputs(now=1.0))
    assert [type(a) for a in actions] == [Spawn, Freeze] and machine.phase is P.PAUSED


def test_max_pause_ends_a_manual_pause_and_resume_between_runs_drops_it() -> None:
    bounded = CFG.model_copy(update={"max_pause_s": 5.0})
    machine, _ = step(_paused_by_hand(), bounded, Inputs(now=6.0, alive=True))
    assert machine.phase is P.STOPPING and machine.after_stop == "max-pause"
    machine, _ = step(machine, bounded, Inputs(now=7.0, alive=False, exit_code=0))
    assert machine.phase is P.BACKOFF and not machine.manual_pause
    held = replace(machine, manual_pause=True)
    resumed, _ = step(held, bounded, Inputs(now=8.0, command="resume"))
    assert resumed.phase is P.RUNNING and not resumed.manual_pause  # it restarted running
    paused, actions = step(replace(machine, next_start=100.0), bounded, Inputs(now=8.0, command="pause"))
    assert paused.manual_pause and paused.phase is P.BACKOFF and not actions  # the next run starts held
