"""Ranks a training script starts itself get the hooks and the patches, and the SIGSTOP fallback reaches them.

Two ways users' scripts start ranks: Ultralytics writes a temporary script and runs
``python -m torch.distributed.run`` on it (ranks in sessions of their own, two levels below the
command), and ``torch.multiprocessing.spawn`` (ranks without RANK in their environment, started like
spawned DataLoader workers, which must stay out of the job's pause).
"""

from __future__ import annotations

import json
from pathlib import Path

import psutil
import pytest

from gpuwatch.model import TrainerPhase as P
from tests.support.ddp import SCRIPT, Supervised, gpuwatch_train, held_alike, trainer

pytest.importorskip("torch")
pytestmark = pytest.mark.torch


def starts(out: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in (out / "starts.jsonl").read_text().splitlines()]


def stopped(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_STOPPED
    except psutil.NoSuchProcess:
        return True


@pytest.mark.timeout(180)
def test_script_running_torch_distributed_run_itself(tmp_path: Path) -> None:
    out, stall = tmp_path / "out", tmp_path / "stall"
    out.mkdir()
    command = gpuwatch_train("python", SCRIPT, "--out", str(out), "--torchrun", "2", "--workers", "1",
                             "--rank0-optimizer", "--stall-file", str(stall), fallback="on")
    with Supervised(tmp_path, trainer(tmp_path, command, pause_ack_timeout_s=2)) as job:
        job.wait(lambda: job.state.ranks == 2 and (job.state.steps_total or 0) > 0, "both ranks stepping")
        assert [s["conv_forward"] for s in starts(out)] == ["_patched_conv_forward"] * 2  # the fallback, in each rank
        for n in (1, 2, 3):  # rank 0's own optimizer neither counts nor takes part
            job.pause(f"pause {n} acknowledged")
            assert held_alike(job.beats(), 2, n) and "SIGSTOP" not in (job.state.reason or ""), job.detail()
            job.resume(f"pause {n} released", pause_seq=n)

        # Rank 1 is busy elsewhere, rank 0 waits for it inside the gradient all-reduce: neither can
        # acknowledge, so the supervisor stops the whole tree, ranks and their DataLoader workers included.
        stall.touch()
        job.command("pause")
        job.wait(lambda: job.state.phase is P.PAUSED and "SIGSTOP" in (job.state.reason or ""), "the fallback")
        assert job.trainer.proc is not None
        tree = [p.pid for p in job.trainer.proc.tree()]
        assert len(tree) >= 6, job.trainer.proc.tree()  # gpuwatch launcher, agent, 2 ranks, 2 workers (+ helpers)
        job.wait(lambda: all(stopped(pid) for pid in tree), "every process of the tree stopped")
        stall.unlink()
        steps = job.state.steps_total or 0
        job.command("resume")
        job.wait(lambda: (job.state.steps_total or 0) > steps + 20, "stepping after SIGCONT")
        assert job.state.restarts_total == 0


@pytest.mark.timeout(120)
def test_torch_multiprocessing_spawn(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    command = gpuwatch_train("python", SCRIPT, "--out", str(out), "--spawn", "2", "--workers", "1")
    with Supervised(tmp_path, trainer(tmp_path, command)) as job:
        job.wait(lambda: job.state.ranks == 2 and (job.state.steps_total or 0) > 0, "both ranks stepping")
        for n in (1, 2, 3):
            job.pause(f"pause {n} acknowledged")
            assert held_alike(job.beats(), 2, n), job.detail()
            job.resume(f"pause {n} released", pause_seq=n)
        # The spawned DataLoader workers (one per rank) ran the same start-up hook and stayed out.
        assert len(list(job.trainer.heartbeat_file.parent.glob("heartbeat.rank-*.json"))) == 2
        assert not job.trainer.heartbeat_file.exists()  # no process took itself for a single trainer
