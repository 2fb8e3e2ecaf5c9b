"""A node's view of a distributed job from its ranks' heartbeats (pure: one table per rule)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpuwatch.heartbeat import Heartbeat
from gpuwatch.supervise.ranks import Reported, aggregate, reported


def beat(rank: int, steps: int = 100, paused: bool = False, **kw: object) -> Heartbeat:
    base = Heartbeat(pid=1000 + rank, steps_total=steps, last_step_unix=50.0 + rank, steps_per_s=10.0 + rank,
                     updated_unix=100.0 + rank, paused=paused, rank=rank, world_size=2, local_world_size=2,
                     job="j1", pg_timeout_s=600.0, backend="nccl")
    return replace(base, **kw)  # type: ignore[arg-type]


HELD_BY_B = dict(paused=True, wants=False, job_wanting=1, paused_by="node-b: hot")
HELD_HERE = dict(paused=True, wants=True, job_wanting=2, paused_by="node-a: hot")


@pytest.mark.parametrize("beats, expect", [
    # every rank runs: one step counter per job step, the slowest rank's rate and last step
    ([beat(0, 101), beat(1, 100)], dict(ranks=2, ranks_held=0, steps_total=100, steps_per_s=10.0,
                                         last_step_unix=50.0, paused=False, held_by=None)),
    # "1/2 ranks held": not paused until every local rank holds
    ([beat(0, paused=True, wants=True, job_wanting=2), beat(1)], dict(ranks_held=1, paused=False, held_by=None)),
    # this node asked and every rank holds
    ([beat(0, **HELD_HERE), beat(1, **HELD_HERE)], dict(ranks_held=2, paused=True, acknowledged=True,
                                                        held_by=None, paused_by="node-a: hot")),
    # another node asked: held here at its request (and our own request, if any, not registered yet)
    ([beat(0, **HELD_BY_B), beat(1, **HELD_BY_B)], dict(paused=True, acknowledged=False, held_by="node-b: hot")),
    # both nodes ask: this node's ranks would still be held without its own request
    ([beat(0, **{**HELD_HERE, "job_wanting": 3}), beat(1, **HELD_HERE)], dict(paused=True, held_by="node-a: hot")),
    # a rank that has not written yet: no step counter, not paused
    ([beat(0, paused=True)], dict(ranks=2, ranks_seen=1, steps_total=None, paused=False)),
    # no torchrun (LOCAL_WORLD_SIZE unknown): the ranks seen are the node's
    ([beat(0, local_world_size=None), beat(1, local_world_size=None)], dict(ranks=2, steps_total=100)),
    # held at another node's request that no held rank names
    ([beat(0, **{**HELD_BY_B, "paused_by": None}), beat(1, **{**HELD_BY_B, "paused_by": None})],
     dict(paused=True, held_by="another node", paused_by=None)),
    # a rank that has not stepped yet: no "last step" for the job
    ([beat(0), beat(1, last_step_unix=None)], dict(last_step_unix=None, steps_per_s=10.0)),
])
def test_view(beats: list[Heartbeat], expect: dict[str, object]) -> None:
    view = aggregate(beats, None)
    assert view is not None
    assert {key: getattr(view, key) for key in expect} == expect


def test_dead_processes_and_older_incarnations_are_ignored() -> None:
    old = [beat(0, 500, job="j0", updated_unix=10.0), beat(1, 500, job="j0", updated_unix=10.0)]
    restarted = [beat(0, 3, pid=2000), beat(1, 2, pid=2001)]
    view = aggregate(old + restarted, None)
    assert view is not None and view.job == "j1" and view.steps_total == 2
    assert aggregate(old + restarted, {2000, 2001}) == view
    assert aggregate(old, {2000}) is None  # only dead ranks' files: no view (a single-process heartbeat counts)
    assert aggregate([replace(beat(0), rank=None)], None) is None  # not a rank's heartbeat


def test_spans_nodes() -> None:
    view = aggregate([beat(0, local_world_size=1, world_size=4, paused=True)], None)
    assert view is not None and view.spans_nodes
    single = aggregate([beat(0), beat(1)], None)
    assert single is not None and not single.spans_nodes


VIEW = aggregate([beat(0, **HELD_HERE), beat(1, **HELD_HERE)], None)


@pytest.mark.parametrize("ranks, single, expected", [
    # a job's ranks speak for it, whatever the leader's own file says
    (VIEW, beat(0, steps=7, paused=False), Reported(100, 10.0, 50.0, acknowledged=True)),
    # one process: its heartbeat (rank None)
    (None, replace(beat(0, steps=7, paused=True), rank=None), Reported(7, 10.0, 50.0, acknowledged=True)),
    # nothing written yet
    (None, None, Reported(None, None, None, acknowledged=False)),
])
def test_reported_progress(ranks: object, single: Heartbeat | None, expected: Reported) -> None:
    assert reported(ranks, single) == expected  # type: ignore[arg-type]
