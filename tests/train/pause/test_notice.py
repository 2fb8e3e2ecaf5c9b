"""A held process says so in its own output (issue 38): who asks and why, how it ends, how long it lasted,
and once that the pause file's requester is gone when the file is not refreshed for PAUSE_STALE_S."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from gpuwatch.heartbeat import PAUSE_STALE_S, request_pause

torch = pytest.importorskip("torch")

from gpuwatch.train.pause.hooks import StepHeartbeat  # noqa: E402
from gpuwatch.train.pause.notice import HoldNotice  # noqa: E402
from tests.support.waiting import wait_for  # noqa: E402

pytestmark = pytest.mark.torch


def _train(steps: int) -> None:
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(steps):
        opt.zero_grad()
        model(torch.ones(2, 4)).sum().backward()
        opt.step()


def test_held_stale_and_released_lines(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    beat_file, pause_file = tmp_path / "hb.json", tmp_path / "pause"
    hooks = StepHeartbeat(beat_file, pause_file, interval_s=0.0, paused_every_s=0.02, poll_s=0.01).install()
    err = ""
    try:
        _train(2)
        request_pause(pause_file, "hot: junction 101 °C")
        worker = threading.Thread(target=_train, args=(1,))
        worker.start()
        wait_for(lambda: "training held" in capsys.readouterr().err, "the held line", 60, interval_s=0.01)
        old = time.time() - PAUSE_STALE_S - 5  # the daemon died: nobody refreshes the file any more
        os.utime(pause_file, (old, old))
        err = wait_for(lambda: (e := capsys.readouterr().err) and "not been refreshed" in e and e, "the stale line",
                       60, interval_s=0.01)
        pause_file.unlink()
        worker.join(30)
    finally:
        hooks.remove()
    err += capsys.readouterr().err
    assert "whoever asked for the pause is gone" in err and str(pause_file) in err and err.count("refreshed") == 1
    assert "gpuwatch: training released after" in err and "at step 2" in err


@pytest.mark.parametrize(("age_s", "said"), [(None, False), (0.0, False), (PAUSE_STALE_S - 1, False),
                                             (PAUSE_STALE_S, True), (PAUSE_STALE_S * 10, True)])
def test_stale_line_once_at_the_bound(age_s: float | None, said: bool) -> None:
    notice = HoldNotice("/run/gpuwatch/t/pause", 7, 0.0)
    assert (notice.stale(age_s) is not None) is said
    assert notice.stale(PAUSE_STALE_S) is None if said else True  # once per hold


def test_held_line_names_the_requester_and_how_it_ends() -> None:
    notice = HoldNotice("/run/gpuwatch/t/pause", 7, 10.0)
    held = notice.held("node node-b: hot: junction 101 °C")
    assert held == ("gpuwatch: training held at step 7 by node node-b: hot: junction 101 °C; it goes on when the "
                    "daemon resumes it (`gpuwatch resume NAME` ends a manual pause)")  # short: no pause file path
    assert notice.released(22.5) == "gpuwatch: training released after 12.5 s held, at step 7"


@pytest.mark.parametrize(("raw", "said"), [
    ('{"node": "vm", "reason": "hot: junction 101 °C"}', "hot: junction 101 °C"),  # this node: as a single process
    ('{"node": "node-b", "reason": "hot: junction 101 °C"}', "node node-b: hot: junction 101 °C"),
    ("not json", "not json"),
])
def test_a_jobs_held_line_names_another_node_only(raw: str, said: str) -> None:
    """Issue 50 item 15: the DDP hold line said `by vm: hot: ...`, this box's own name, as if another node asked."""
    from gpuwatch.train.pause.job import _said

    assert _said(raw, "vm") == said
