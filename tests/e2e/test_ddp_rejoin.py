"""Every incarnation of a torchrun job agrees on its pause: all ranks or none take part (issue 38).

After a torchrun restart with static rendezvous (``--master-addr/--master-port``), one rank once failed
to join gpuwatch's side group and trained on alone, while the other waited in the first agreement
until the job's timeout killed the job. Here ranks are killed and restarted three times under each
rendezvous form, and every incarnation must hold one pause together; a rank that cannot take part
(a gloo interface it does not have) turns the pause off on every rank, and the job trains on.
Real torchrun, gloo, CPU; ``gpuwatch train`` injects the hooks.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpuwatch.heartbeat import PAUSE_STALE_S, Heartbeat, read_rank_heartbeats, request_pause
from tests.support.ddp import FAST_ENV, JOB_WAIT_S, TORCHRUN, held_alike
from tests.support.paths import REPO
from tests.support.processes import free_port, kill_named
from tests.support.waiting import wait_for

pytest.importorskip("torch")
pytestmark = pytest.mark.torch
SCRIPT = str(REPO / "tests" / "support" / "ddp_rejoin_train.py")
RESTARTS = 3


class Job:
    def __init__(self, tmp: Path, form: str, *script_args: str) -> None:
        port = str(free_port())
        rendezvous = (["--master-addr", "127.0.0.1", "--master-port", port] if form == "static"
                      else ["--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}"])
        self.out, self.beat_file, self.pause_file = tmp / "out", tmp / "hb.json", tmp / "pause"
        self.out.mkdir()
        env = {k: v for k, v in os.environ.items() if not k.startswith("GPUWATCH_")} | FAST_ENV | {
            "GPUWATCH_HEARTBEAT_FILE": str(self.beat_file), "GPUWATCH_PAUSE_FILE": str(self.pause_file)}
        argv = [sys.executable, "-m", "gpuwatch.cli", "train", "--", TORCHRUN, "--nproc-per-node", "2",
                "--max-restarts", str(RESTARTS), "--monitor-interval", "0.2", *rendezvous, SCRIPT,
                "--out", str(self.out), *script_args]
        self.log = (tmp / "job.log").open("w+")
        self.proc = subprocess.Popen(argv, cwd=tmp, env=env, stdout=self.log, stderr=subprocess.STDOUT,
                                     start_new_session=True)

    def stop(self) -> None:
        """The launcher and every rank it ever started. torchrun starts each rank in a session of its own, so
        the launcher's process group misses them, and a rank whose agent died is init's: each is found by
        the job's own folder on its command line (a rank left running waits on a store that is gone, for
        ever, and costs every later test its CPU)."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        kill_named(str(self.out))
        self.proc.wait(60)
        self.log.close()

    def output(self) -> str:
        return Path(self.log.name).read_text()

    def wait(self, check, what: str):  # type: ignore[no-untyped-def]
        def alive_and():  # type: ignore[no-untyped-def]
            assert self.proc.poll() is None, f"the job died ({self.proc.returncode}):\n{self.output()[-4000:]}"
            return check()

        return wait_for(alive_and, what, JOB_WAIT_S, interval_s=0.02, detail=lambda: self.output()[-4000:])

    def beats(self, attempt: int) -> list[Heartbeat]:
        beats = [b for b in read_rank_heartbeats(self.beat_file) if b.restart_count == attempt and _alive(b.pid)]
        return sorted(beats, key=lambda b: b.rank or 0)

    def progress(self) -> dict[int, dict[str, object]]:
        found = {}
        for rank in (0, 1):
            try:
                found[rank] = json.loads((self.out / f"rank-{rank}.json").read_text())
            except (OSError, ValueError):
                pass
        return found


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.timeout(600)
@pytest.mark.parametrize("form", ["static", "c10d"])
def test_every_incarnation_holds_one_pause_together_after_kills_and_restarts(tmp_path: Path, form: str) -> None:
    job = Job(tmp_path, form)
    try:
        for attempt in range(RESTARTS + 1):
            beats = job.wait(lambda a=attempt: len(b := job.beats(a)) == 2 and all(x.steps_total > 0 for x in b)
                             and b, f"both ranks of incarnation {attempt} stepping")
            seq = beats[0].pause_seq
            request_pause(job.pause_file, f"test pause {attempt}")
            job.wait(lambda a=attempt, s=seq: held_alike(job.beats(a), 2, s + 1), f"incarnation {attempt} held")
            assert len({b.job for b in job.beats(attempt)}) == 1
            if attempt == RESTARTS:  # the requester is gone: nobody refreshes the file; rank 0 says so
                old = time.time() - PAUSE_STALE_S - 5
                os.utime(job.pause_file, (old, old))
                job.wait(lambda: "not been refreshed" in job.output(), "the stale line")
            job.pause_file.unlink()
            job.wait(lambda a=attempt: all(not b.paused for b in job.beats(a)), f"incarnation {attempt} released")
            if attempt < RESTARTS:
                os.kill(beats[attempt % 2].pid, signal.SIGKILL)  # rank 0, then rank 1, then rank 0 dies
        job.wait(lambda: job.output().count("gpuwatch: training released after") == RESTARTS + 1, "released lines")
    finally:
        job.stop()
    text = job.output()  # rank 0 alone speaks: one held and one released line per pause, who asks and why
    assert text.count("gpuwatch: training held at step") == RESTARTS + 1, text
    assert f"test pause {RESTARTS}" in text and text.count("not been refreshed") == 1, text


@pytest.mark.timeout(300)
@pytest.mark.parametrize("form", ["static", "c10d"])
def test_a_rank_that_cannot_take_part_turns_the_pause_off_and_the_job_trains_on(tmp_path: Path, form: str) -> None:
    job = Job(tmp_path, form, "--no-gloo-rank", "1")
    try:
        job.wait(lambda: "the job's pause is off" in job.output() and len(job.progress()) == 2, "the join's outcome")
        job.wait(lambda: all(int(p["step"]) >= 200 for p in job.progress().values()),  # type: ignore[call-overload]
                 "both ranks stepping on, well past the join")
        text = job.output()
        assert text.count("the job's pause is off") == 2, text  # each rank says so, once
        assert "rank 1: " in text and "Unable to find address" in text, text
        assert job.progress()[0]["attempt"] == "0", "a rank died and torchrun restarted the job"
    finally:
        job.stop()
