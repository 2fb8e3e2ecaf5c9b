"""A 2-rank torchrun job under `gpuwatch train`, attached (real torchrun, CPU, gloo): both ranks' heartbeats
go to the daemon in one Beat, and a pause event holds both ranks at the same step (one agreed pause), a
resume releases them. The daemon is the stand-in of tests/support/attach_server.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuwatch.attach import Beat
from gpuwatch.heartbeat import Heartbeat
from tests.support.attach_server import AttachServer
from tests.support.ddp import FAST_ENV, JOB_WAIT_S, SCRIPT, torchrun
from tests.support.processes import kill_named
from tests.support.train_wrapper import Wrappers
from tests.support.waiting import wait_for

pytest.importorskip("torch")
pytestmark = pytest.mark.torch


def ranks(beat: Beat) -> list[Heartbeat]:
    """The Beat's rank heartbeats, as the daemon reads them."""
    fields = Heartbeat.__dataclass_fields__
    found = [Heartbeat(**{k: v for k, v in raw.items() if k in fields}) for raw in beat.heartbeats]
    return sorted((b for b in found if b.rank is not None), key=lambda b: b.rank or 0)


@pytest.mark.timeout(300)
def test_two_ranks_relayed_in_one_beat_and_held_at_the_same_step(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    try:
        with Wrappers(tmp_path) as wrappers, AttachServer(wrappers.socket) as server:
            wrapper = wrappers.start([*torchrun(2), SCRIPT, "--out", str(out)], "--name", "ddp", env=FAST_ENV)
            conn = wait_for(lambda: server.attached(), "the attach", JOB_WAIT_S, detail=wrapper.output)[0]

            def beat_where(check, what: str) -> list[Heartbeat]:  # type: ignore[no-untyped-def]
                start = len(conn.beats)
                return wait_for(lambda: next((r for b in conn.beats[start:] if check(r := ranks(b))), None),
                                what, JOB_WAIT_S, detail=wrapper.output)

            both = beat_where(lambda rs: len(rs) == 2 and all(r.steps_total > 0 for r in rs),
                              "one Beat with both ranks stepping")
            wrapper.remember_tree()
            assert [r.rank for r in both] == [0, 1] and len({r.pid for r in both}) == 2
            seq = both[0].pause_seq
            server.send(conn, "pause", "hot: junction 101 °C")
            held = beat_where(lambda rs: len(rs) == 2 and all(r.paused and r.pause_seq == seq + 1 for r in rs),
                              "both ranks held")
            assert len({r.steps_total for r in held}) == 1, held  # the same step: no split
            assert all("hot: junction 101" in (r.paused_by or "") for r in held), held
            server.send(conn, "resume")
            beat_where(lambda rs: len(rs) == 2 and not any(r.paused for r in rs)
                       and min(r.steps_total for r in rs) > held[0].steps_total, "both ranks stepping again")
    finally:
        kill_named(str(out))
