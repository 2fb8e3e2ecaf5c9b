"""One pause for a whole DDP job: torchrun under `gpuwatch train` under the real supervisor (CPU, gloo).

Every pause is a manual command at a random moment; the supervisor reports it paused only when every
rank holds, and every rank must hold the same agreed pause at the same step (a rank that held one
step later, or not at all, would be waiting inside the next gradient all-reduce: a split).
"""

from __future__ import annotations

import os
import random
import signal
import time
from pathlib import Path

import pytest

from gpuwatch.model import TrainerPhase as P
from tests.support.ddp import SCRIPT, Supervised, gpuwatch_train, held_alike, torchrun, trainer

pytest.importorskip("torch")
pytestmark = pytest.mark.torch

# Pauses at random moments per job: 50 in make test (every way a rank can meet a pause is also a table case
# in tests/train/pause); GPUWATCH_DDP_PAUSES=1000 for a soak.
PAUSES = int(os.environ.get("GPUWATCH_DDP_PAUSES", "50"))


def pause_and_resume(job: Supervised, ranks: int, pauses: int, seed: int) -> None:
    rng = random.Random(seed)
    first = job.beats()[0].pause_seq
    for n in range(first + 1, first + pauses + 1):
        time.sleep(rng.uniform(0.0, 0.05))  # a random moment in the training (the stimulus, not a wait)
        state = job.pause(f"pause {n} acknowledged")
        assert state.ranks_held == ranks == state.ranks and "SIGSTOP" not in (state.reason or ""), state
        beats = job.beats()
        assert held_alike(beats, ranks, n), f"pause {n} split: {beats}"
        job.resume(f"pause {n} released", pause_seq=n)


@pytest.mark.timeout(300)
def test_two_ranks_many_pauses_a_hold_of_twice_the_timeout_and_restarts(tmp_path: Path) -> None:
    out, ckpt = tmp_path / "out", tmp_path / "ckpt.pt"
    out.mkdir()
    script = [SCRIPT, "--out", str(out), "--pg-timeout-s", "5", "--ckpt", str(ckpt), "--ckpt-every", "20"]
    command = gpuwatch_train(*torchrun(2, "--max-restarts", "1"), *script)
    with Supervised(tmp_path, trainer(tmp_path, command, restart_command=command)) as job:
        job.wait(lambda: job.state.ranks == 2 and (job.state.steps_total or 0) > 0, "both ranks stepping")
        pause_and_resume(job, ranks=2, pauses=PAUSES, seed=2)

        # Held twice the process-group timeout (5 s): nothing is in flight, so nothing times out.
        job.pause("the long pause acknowledged")
        pids, held_at = [b.pid for b in job.beats()], job.state.steps_total or 0
        deadline = time.monotonic() + 10.0
        while time.monotonic() < deadline:
            assert job.state.phase is P.PAUSED and job.state.ranks_held == 2, job.detail()
            time.sleep(0.2)
        job.command("resume")
        job.wait(lambda: (job.state.steps_total or 0) > held_at + 50, "steps after the long pause")
        assert [b.pid for b in job.beats()] == pids and job.state.restarts_total == 0, job.detail()

        # A rank dies: torchrun (--max-restarts 1) restarts both from the checkpoint; the run goes on.
        job.wait(lambda: ckpt.exists(), "a checkpoint")
        os.kill(job.beats()[1].pid, signal.SIGKILL)
        job.wait(lambda: job.state.restarts_by_reason == (("torchrun", 1),) and len(job.beats()) == 2,
                 "the workers restarted by torchrun")
        starts = [line for line in (out / "starts.jsonl").read_text().splitlines() if '"attempt": 1' in line]
        assert len(starts) == 2 and all('"resumed_from": 0' not in line for line in starts), starts
        pause_and_resume(job, ranks=2, pauses=3, seed=3)  # the new workers take part in the pause

        # It dies again: torchrun gives up and exits non-zero; gpuwatch restarts the command, which
        # resumes from the checkpoint too.
        os.kill(job.beats()[0].pid, signal.SIGKILL)
        job.wait(lambda: dict(job.state.restarts_by_reason).get("crash") == 1 and len(job.beats()) == 2,
                 "the command restarted by gpuwatch")
        job.wait(lambda: job.state.phase is P.RUNNING and (job.state.steps_total or 0) > 0, "stepping again")
    lines = (out / "starts.jsonl").read_text().splitlines()
    assert len(lines) == 6 and all('"resumed_from": 0' not in line for line in lines[2:]), lines


@pytest.mark.timeout(300)
def test_four_ranks_many_pauses(tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    command = gpuwatch_train(*torchrun(4), SCRIPT, "--out", str(tmp_path / "out"))
    with Supervised(tmp_path, trainer(tmp_path, command)) as job:
        job.wait(lambda: job.state.ranks == 4 and (job.state.steps_total or 0) > 0, "four ranks stepping")
        pause_and_resume(job, ranks=4, pauses=PAUSES, seed=4)
        assert job.state.restarts_total == 0 and job.state.world_size == 4
