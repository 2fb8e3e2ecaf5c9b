"""A job on two "nodes" on loopback, each node's torchrun agent supervised by its own daemon with its own
simulated card: a pause asked for on either node holds every rank of the job, and the other node says
who asked; the job resumes when no node asks; a dead rank restarts the job from its checkpoint.

Real daemons (ticked here, on simulated RX 5600 XTs at 100x time), real torchrun with a c10d rendezvous
on 127.0.0.1 (node A's agent hosts the store), real ranks; heating a card = raising its ambient air.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from gpuwatch.config.file import parse_config
from gpuwatch.daemon.loop import Daemon
from gpuwatch.heartbeat import Heartbeat, read_rank_heartbeats
from gpuwatch.model import PublishedState, TrainerPhase, TrainerState
from tests.support.ddp import JOB_WAIT_S, SCRIPT, gpuwatch_train, held_alike, torchrun, trainer
from tests.support.processes import free_port
from tests.support.waiting import wait_for

pytest.importorskip("torch")
pytestmark = pytest.mark.torch

P = TrainerPhase


class Node:
    def __init__(self, tmp: Path, name: str, port: int, hosts_store: bool) -> None:
        out = tmp / "out"
        out.mkdir(exist_ok=True)
        script = [SCRIPT, "--out", str(out), "--ckpt", str(tmp / "ckpt.pt"), "--ckpt-every", "20",
                  "--pg-timeout-s", "30"]
        launch = torchrun(1, "--nnodes", "2", "--rdzv-id", "two-nodes", "--rdzv-conf", f"is_host={int(hosts_store)}",
                          "--max-restarts", "1", port=port)
        section = trainer(tmp, gpuwatch_train(*launch, *script), name="job", node=name, debounce_s=0,
                          hysteresis_c=20, grace_s=10)
        config = {"runtime_dir": str(tmp / name), "interval_s": 0.05, "http": {"enabled": False},
                  "simulate": {"enabled": True, "tree_dir": str(tmp / f"{name}-tree"), "time_scale": 100.0},
                  "trainer": [section]}
        self.name = name
        self.root = tmp / name
        self.daemon = Daemon(parse_config(config))
        self.state: PublishedState | None = None

    @property
    def job(self) -> TrainerState:
        assert self.state is not None and self.state.trainers
        return self.state.trainers[0]

    def ambient(self, celsius: float) -> None:
        simulator = self.daemon.parts.simulator
        assert simulator is not None
        simulator.params = replace(simulator.params, ambient_c=celsius)

    def beats(self) -> list[Heartbeat]:
        return read_rank_heartbeats(self.root / "trainers" / "job" / "heartbeat.json")


def run(nodes: list[Node], until: Callable[[], object], what: str, timeout_s: float = JOB_WAIT_S) -> None:
    def tick() -> object:
        for node in nodes:
            node.state = node.daemon.tick()
        time.sleep(0.02)
        return until()

    wait_for(tick, what, timeout_s, interval_s=0.0,
             detail=lambda: "\n".join(f"{n.name}: {n.state.trainers if n.state else None}" for n in nodes))


def starts(tmp: Path) -> list[dict[str, int]]:
    return [json.loads(line) for line in (tmp / "out" / "starts.jsonl").read_text().splitlines()]


@pytest.mark.timeout(240)
def test_a_pause_on_either_node_holds_the_whole_job_and_a_dead_rank_restarts_it(tmp_path: Path) -> None:
    port = free_port()
    a = Node(tmp_path, "node-a", port, hosts_store=True)
    b: Node | None = None
    try:
        run([a], lambda: a.job.phase is P.RUNNING, "node A's agent started")
        b = Node(tmp_path, "node-b", port, hosts_store=False)
        both = [a, b]
        run(both, lambda: all(n.job.ranks == 1 and (n.job.steps_total or 0) > 0 for n in both), "the job stepping")
        assert a.job.world_size == b.job.world_size == 2

        a.ambient(75.0)  # node A's card heats past its junction limit
        run(both, lambda: a.job.phase is P.PAUSED and b.job.phase is P.PAUSED, "both nodes paused")
        assert a.job.reason is not None and a.job.reason.startswith("paused at a step boundary"), a.job
        assert b.job.reason is not None and b.job.reason.startswith("paused by node-a: hot:"), b.job
        assert b.job.paused_by == a.job.paused_by and b.job.ranks_held == 1 and b.job.pauses_total == 0
        held = a.beats() + b.beats()
        assert held_alike(held, 2, held[0].pause_seq), held
        a.ambient(30.0)
        run(both, lambda: all(n.job.phase is P.RUNNING and not n.job.ranks_held for n in both), "both resumed")

        b.ambient(75.0)  # and the other way round
        run(both, lambda: a.job.phase is P.PAUSED and b.job.phase is P.PAUSED, "paused by node B")
        assert a.job.reason is not None and a.job.reason.startswith("paused by node-b: hot:"), a.job
        b.ambient(30.0)
        steps = min(a.job.steps_total or 0, b.job.steps_total or 0)
        run(both, lambda: all((n.job.steps_total or 0) > steps + 20 for n in both), "both stepping again")

        # One rank dies: both agents restart their workers (--max-restarts), which resume from the checkpoint.
        run(both, lambda: (tmp_path / "ckpt.pt").exists(), "a checkpoint")
        os.kill(b.beats()[0].pid, signal.SIGKILL)
        run(both, lambda: all(dict(n.job.restarts_by_reason).get("torchrun") == 1 and (n.job.steps_total or 0) > 0
                              for n in both), "the job restarted on both nodes")
        restarted = starts(tmp_path)[2:]
        assert len(restarted) == 2 and all(s["resumed_from"] > 0 for s in restarted), restarted
        assert all(n.job.phase is P.RUNNING and n.job.restarts_by_reason == (("torchrun", 1),) for n in both)
    finally:
        for node in (b, a):
            if node is not None:
                node.daemon.shutdown()
