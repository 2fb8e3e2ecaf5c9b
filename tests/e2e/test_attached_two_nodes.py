"""An attached run across two "nodes" on loopback (issue 33: "python or torchrun, one node or a rank set of
many"): on each node the REAL `gpuwatch train -- torchrun --nnodes 2 ...` attached to that node's REAL
`gpuwatch run --simulate` daemon, one c10d rendezvous on 127.0.0.1 (node A's agent hosts the store).

A hot card on node A pauses A's run; every rank of the job (both nodes) holds at the same agreed step; node
B's daemon lists its own attached run paused *because node A asked* (``paused by node-a: ...``), never hung,
however long the hold lasts past B's ``[attached] hang_timeout_s``; cooled, both resume and step on.

Each node is its own runtime directory (socket, state file, simulated sysfs tree) and its own
``$XDG_RUNTIME_DIR`` for the run directories; the two share a host name, so the wrappers name their node
with ``GPUWATCH_NODE`` (what the training hooks report as the pause's asker; a real cluster has its host
names). A card is made hot by the daemon's thermal limits (a SIGHUP reload: ``[thermal]`` is live,
``[simulate]``'s ambient is not), as tests/e2e/test_attached_runs.py does.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gpuwatch.heartbeat import Heartbeat, read_rank_heartbeats
from tests.support.attach_daemon import COOL, HOT, AttachDaemon
from tests.support.ddp import FAST_ENV, SCRIPT, held_alike, torchrun
from tests.support.paths import REPO
from tests.support.processes import Processes, free_port, kill_named
from tests.support.stack import GPUWATCH
from tests.support.train_wrapper import Wrapper, Wrappers
from tests.support.waiting import wait_for

pytest.importorskip("torch")
pytestmark = pytest.mark.torch

WAIT_S = 120.0  # torch in 2 agents + 2 ranks on 2 cores shared by eight engineers: 5-30 s to start
HANG_TIMEOUT_S = 2.0  # node B's [attached] hang_timeout_s: the hold below lasts several times longer
HELD_FOR_S = 4 * HANG_TIMEOUT_S


class Node:
    """One "node": its `gpuwatch run --simulate` daemon and its `gpuwatch train` wrapper of the job's agent."""

    def __init__(self, root: Path, name: str, processes: Processes, attached: str = "") -> None:
        root.mkdir()
        self.name = name
        self.wrappers = Wrappers(root)
        self.attach = AttachDaemon(processes, root / "gpuwatch.toml", self.wrappers.runtime, COOL, attached,
                                   f"daemon-{name}", wait_s=WAIT_S)
        self.config, self.daemon = self.attach.config, self.attach.child
        self.reload = self.attach.reload
        self.wrapper: Wrapper | None = None

    def start(self, command: list[str]) -> None:
        self.wrapper = self.wrappers.start(command, "--name", "job", env=FAST_ENV | {"GPUWATCH_NODE": self.name})

    def run(self) -> dict[str, Any] | None:
        return self.attach.run("job")

    def beats(self) -> list[Heartbeat]:
        assert self.wrapper is not None
        dirs = self.wrapper.run_dirs()
        return sorted(read_rank_heartbeats(dirs[0] / "heartbeat.json"), key=lambda b: b.rank or 0) if dirs else []

    def gpuwatch(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*GPUWATCH, *args, "-c", str(self.config)], capture_output=True, text=True,
                              timeout=WAIT_S, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})

    def status(self) -> str:
        done = self.gpuwatch("status")
        return done.stdout + done.stderr

    def hangs(self) -> int:
        """How many times this daemon has reported its run hung (its log's ``... -> running: hung: ...``)."""
        return self.daemon.log.read_text(errors="replace").count("hung: no step")

    def detail(self) -> str:
        output = self.wrapper.output()[-3000:] if self.wrapper is not None else ""
        return f"{self.name}: {self.run()}\nbeats: {self.beats() if self.wrapper else []}\n{output}\n" \
               f"{self.daemon.tail()}"


def wait_nodes(nodes: list[Node], check: Callable[[], object], what: str) -> Any:
    return wait_for(check, what, WAIT_S, detail=lambda: "\n\n".join(n.detail() for n in nodes))


def phases(nodes: list[Node]) -> list[str | None]:
    return [(n.run() or {}).get("phase") for n in nodes]


@pytest.mark.timeout(420)
def test_a_hot_node_holds_every_rank_of_an_attached_job_and_the_other_node_says_who_asked(short_dir: Path) -> None:
    port = free_port()
    out = short_dir / "out"
    out.mkdir()
    nodes: list[Node] = []
    try:
        with Processes(short_dir / "logs") as processes:
            a = Node(short_dir / "a", "node-a", processes)
            nodes.append(a)
            b = Node(short_dir / "b", "node-b", processes, attached=f"hang_timeout_s = {HANG_TIMEOUT_S}\n")
            nodes.append(b)
            with a.wrappers, b.wrappers:
                for node, hosts in ((a, True), (b, False)):
                    launch = torchrun(1, "--nnodes", "2", "--rdzv-id", "attached-two-nodes",
                                      "--rdzv-conf", f"is_host={int(hosts)}", port=port)
                    node.start([*launch, SCRIPT, "--out", str(out), "--pg-timeout-s", "60"])
                wait_nodes(nodes, lambda: all((r := n.run()) and r["phase"] == "running" and r["ranks"] == 1
                                              and (r["steps_total"] or 0) > 0 for n in nodes), "the job stepping")
                assert all((n.run() or {})["world_size"] == 2 for n in nodes), [n.run() for n in nodes]
                assert all((n.run() or {})["origin"] == "attached" for n in nodes)
                for node in nodes:
                    assert node.wrapper is not None
                    node.wrapper.remember_tree()
                seq = a.beats()[0].pause_seq

                a.reload(HOT)  # node A's card over its limit
                wait_nodes(nodes, lambda: phases(nodes) == ["paused", "paused"], "both nodes paused")
                held_a, held_b = a.run() or {}, b.run() or {}
                assert held_a["reason"] == "paused at a step boundary" and held_a["pauses_total"] == 1, held_a
                assert held_b["reason"].startswith("paused by node-a: "), held_b
                assert "edge" in held_b["reason"], held_b  # A's reason, as its ranks report it
                assert held_b["pauses_total"] == 0 and held_b["ranks_held"] == 1, held_b
                held = wait_nodes(nodes, lambda: len(beats := a.beats() + b.beats()) == 2
                                  and held_alike(beats, 2, seq + 1) and beats, "every rank held alike")
                assert all("node-a" in (beat.paused_by or "") for beat in held), held
                hangs = b.hangs()  # B's run may be judged hung while torch starts on a loaded box: not since held

                # A resume asked on node B does not release node A's request: said in B's log, not done.
                resume = b.gpuwatch("resume", "job")
                assert resume.returncode == 0, resume.stdout + resume.stderr
                wait_for(lambda: re.search(r"not resumed: paused by node-a: hot: .* \(resume it there\)",
                                           b.daemon.tail(100_000)), "node B declining the resume", WAIT_S,
                         detail=b.detail)
                # Held for several of node B's hang timeouts: paused by node A all along, never hung.
                started = time.monotonic()
                while time.monotonic() - started < HELD_FOR_S:
                    run_b = b.run() or {}
                    assert run_b.get("phase") == "paused" and run_b["reason"].startswith("paused by node-a"), \
                        b.detail()
                    time.sleep(0.2)  # sampling a window of the daemon's states, not waiting for anything
                assert [beat.steps_total for beat in a.beats() + b.beats()] == [beat.steps_total for beat in held]
                assert b.hangs() == hangs, b.detail()
                status_a, status_b = a.status(), b.status()
                print(status_a, status_b, sep="\n")
                assert "job: paused" in status_a and "job: paused" in status_b, (status_a, status_b)
                assert "paused by node-a" in status_b, status_b

                a.reload(COOL)
                wait_nodes(nodes, lambda: phases(nodes) == ["running", "running"], "both nodes running again")
                resumed_a, resumed_b = a.run() or {}, b.run() or {}
                assert resumed_a["resumes_total"] == 1 and resumed_a["reason"] == "resumed", resumed_a
                # (its reason now, or "hung: ..." already if its ranks take longer than 2 s to step on a busy box)
                assert "paused -> running: running again: no node asks for the pause" in \
                    b.daemon.log.read_text(errors="replace"), b.detail()
                assert resumed_b["pauses_total"] == resumed_b["resumes_total"] == 0, resumed_b
                at = held[0].steps_total
                wait_nodes(nodes, lambda: len(beats := a.beats() + b.beats()) == 2
                           and not any(beat.paused for beat in beats) and min(x.steps_total for x in beats) > at + 20,
                           "every rank stepping again")
                assert all("job: running" in n.status() for n in nodes)
    finally:
        kill_named(str(out))
