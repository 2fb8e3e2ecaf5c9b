"""`srun gpuwatch train -- torchrun ...` on several nodes: each node's daemon has the job's local ranks as one
attached run; a pause another node asked for holds them too (the job's agreement, docs/training-patches.md).
The run is then PAUSED here (``paused by node-b: ...``) as a configured torchrun trainer is, never counted,
never resumed from here, never taken for a hang; this node may still ask for its own pause; it runs again
when no node asks any more (supervise/attached.py, through the registry without a socket)."""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from gpuwatch.attach import Attach, Beat, Event
from gpuwatch.config.sections import AttachedConfig
from gpuwatch.heartbeat import Heartbeat
from gpuwatch.model import TrainerPhase, TrainerState
from gpuwatch.supervise.access import Peer
from gpuwatch.supervise.actions import Thermal
from gpuwatch.supervise.attached import RunInputs, RunState, step
from gpuwatch.supervise.attached_runs import AttachedRuns

CONFIG = AttachedConfig(debounce_s=0, min_pause_s=0, hang_timeout_s=1800)
ROOT = Peer(os.getpid(), 0, 0)
COOL, HOT = Thermal(), Thermal(hot=True, cool=False, reason="hot: junction 101 °C")
NODE_B = "node-b: hot: junction 101 °C >= 100 °C"


class Session:
    def __init__(self) -> None:
        self.events: list[Event] = []

    def send(self, event: Event) -> bool:
        self.events.append(event)
        return True


def ranks(step_no: int, held: bool, wanting: int = 0, wants: bool = False) -> list[dict[str, Any]]:
    """This node's two ranks of a four-rank job, as the wrapper relays them; ``wanting``: ranks of the job whose
    node asks for the pause (``job_wanting``), ``wants``: this node does."""
    return [dataclasses.asdict(Heartbeat(
        pid=os.getpid(), steps_total=step_no, last_step_unix=1.0, steps_per_s=None, updated_unix=1.0 + step_no,
        paused=held, rank=rank, world_size=4, local_world_size=2, node="node-a", job="j1", wants=wants,
        job_ranks_held=4 if held else None, job_wanting=wanting if held else None,
        paused_by=(NODE_B if not wants else "node-a: hot") if held else None)) for rank in (0, 1)]


def published(runs: AttachedRuns, now: float) -> TrainerState:
    (state,) = runs.states(now, 1000.0 + now, None)
    return state


def test_a_job_held_by_another_node_is_paused_here_never_hung_and_runs_again_when_released() -> None:
    runs, session = AttachedRuns(), Session()
    reply = runs.attach(Attach(pid=os.getpid(), argv=["torchrun", "train.py"], job_id="4242"), ROOT, "root",
                        session, CONFIG, set(), 0.0, 1.0)
    assert reply.ok and reply.run_id is not None
    runs.receive(reply.run_id, Beat(heartbeats=ranks(10, held=False)))
    runs.tick(None, lambda gpus: COOL, CONFIG, 1.0)
    assert published(runs, 1.0).phase is TrainerPhase.RUNNING

    runs.receive(reply.run_id, Beat(heartbeats=ranks(12, held=True, wanting=2)))  # node-b's two ranks ask
    runs.tick(None, lambda gpus: COOL, CONFIG, 2.0)
    held = published(runs, 2.0)
    assert (held.phase, held.reason, held.paused_by, held.pauses_total) == (
        TrainerPhase.PAUSED, f"paused by {NODE_B}", NODE_B, 0)
    runs.tick(None, lambda gpus: COOL, CONFIG, 2.0 + 2 * 1800)  # held far past hang_timeout_s: not a hang
    assert published(runs, 3602.0).phase is TrainerPhase.PAUSED and session.events == []

    runs.receive(reply.run_id, Beat(heartbeats=ranks(13, held=False)))  # node-b released it
    runs.tick(None, lambda gpus: COOL, CONFIG, 3603.0)
    again = published(runs, 3603.0)
    assert (again.phase, again.reason, again.job_id) == (TrainerPhase.RUNNING,
                                                        "running again: no node asks for the pause", "4242")
    assert session.events == []  # nothing to tell the wrapper: this node never asked


HELD = RunState(phase=TrainerPhase.PAUSED, since=5.0, paused_since=5.0, remote=True, reason=f"paused by {NODE_B}")


def test_held_remotely_this_node_may_ask_too_but_never_releases_the_other_nodes_pause() -> None:
    kept, events = step(HELD, CONFIG, RunInputs(now=6.0, held_by=NODE_B, command="resume"))
    assert (kept.phase, kept.remote, events) == (TrainerPhase.PAUSED, True, [])
    assert kept.events == (f"not resumed: paused by {NODE_B} (resume it there)",)
    asks, events = step(HELD, CONFIG, RunInputs(now=7.0, held_by=NODE_B, thermal=HOT))
    assert (asks.phase, asks.remote, asks.pauses_total, events) == (TrainerPhase.PAUSING, False, 1,
                                                                     [Event("pause", HOT.reason)])
    # Its own pause is then this node's to release, whatever node-b does.
    still, _ = step(asks, CONFIG, RunInputs(now=8.0, thermal=HOT, acknowledged=True))
    assert still.phase is TrainerPhase.PAUSED and not still.remote
    resumed, events = step(still, CONFIG, RunInputs(now=9.0))
    assert (resumed.phase, events) == (TrainerPhase.RUNNING, [Event("resume")])
