"""What the supervisor reports of a run, with real child processes: steps per kJ after a restart (issue 32
point 3), the rate of a paused trainer (issue 32 point 10), a log that cannot be written (issue 31 point 8)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from gpuwatch.heartbeat import Heartbeat, write_heartbeat
from gpuwatch.model import TrainerPhase as P
from gpuwatch.supervise.progress import RunningRate, published_rate, running_rate
from tests.supervise.test_supervisor import script
from tests.support.tmpfs import fill, tmpfs

# Counts steps from --start (a resumed run: its checkpoint's step), fast, a heartbeat per step; holds while
# the pause file exists, still reporting the rate it had (as the launcher's hook does); crashes at --crash-at.
STEPPER = """
import os, sys, time
from gpuwatch.heartbeat import Heartbeat, write_heartbeat, pause_requested
hb, pause = os.environ["GPUWATCH_HEARTBEAT_FILE"], os.environ["GPUWATCH_PAUSE_FILE"]
steps, crash_at = int(sys.argv[1]), int(sys.argv[2])
while True:
    paused = pause_requested(pause)
    if not paused:
        steps += 1
    write_heartbeat(hb, Heartbeat(pid=os.getpid(), steps_total=steps, last_step_unix=time.time(),
                                  steps_per_s=15.5, updated_unix=time.time(), paused=paused))
    if steps == crash_at:
        sys.exit(3)
    time.sleep(0.01)
"""


def test_steps_per_kj_of_a_resumed_run_never_counts_the_previous_runs_steps(make, tmp_path: Path) -> None:
    """The first run gets to 400 steps and crashes; the restart resumes from its checkpoint at step 100.
    The tick that restarts it read the old run's heartbeat (400): that must not become the new run's start."""
    stepper = script(tmp_path, "stepper.py", STEPPER)
    h = make(command=stepper + ["0", "400"], restart_command=stepper + ["100", "0"])
    s = h.until(lambda s: s.restarts_total == 1 and s.phase is P.RUNNING and (s.steps_total or 0) > 150
                and s.steps_per_kj is not None, timeout_s=20)
    assert h.trainer.energy.steps_at_start is not None and h.trainer.energy.steps_at_start < 400
    assert s.steps_per_kj is not None and s.steps_per_kj > 0


def test_a_previous_daemons_heartbeat_is_not_the_first_runs_start(make, tmp_path: Path) -> None:
    """The second `make run`: the heartbeat file the last daemon's run left says 5000 steps."""
    stale = tmp_path / "state/t"
    stale.mkdir(parents=True)
    write_heartbeat(stale / "heartbeat.json", Heartbeat(pid=1, steps_total=5000, last_step_unix=None,
                                                        steps_per_s=None, updated_unix=0.0))
    h = make(command=script(tmp_path, "stepper.py", STEPPER) + ["0", "0"])
    s = h.until(lambda s: s.phase is P.RUNNING and (s.steps_total or 0) > 30 and s.steps_per_kj is not None,
                timeout_s=20)
    assert h.trainer.energy.steps_at_start is not None and h.trainer.energy.steps_at_start < 5000
    assert s.steps_per_kj is not None and s.steps_per_kj > 0


def test_a_paused_trainer_makes_no_steps_whatever_its_heartbeat_says(make, tmp_path: Path) -> None:
    h = make(command=script(tmp_path, "stepper.py", STEPPER) + ["0", "0"])
    running = h.until(lambda s: s.phase is P.RUNNING and (s.steps_total or 0) > 2)
    assert running.steps_per_s == 15.5  # its own figure while it runs
    h.sup.command("pause", None)
    paused = h.until(lambda s: s.phase is P.PAUSED)
    assert paused.steps_per_s == 0.0
    h.sup.command("resume", None)
    assert h.until(lambda s: s.phase is P.RUNNING).steps_per_s == 15.5


@pytest.mark.parametrize("looks, expected", [
    # (running, now, steps) per look -> the supervisor's own rate after them
    ([(True, 0.0, 0), (True, 10.0, 40)], 4.0),
    # a pause ends the span: the 100 s held never count, the next span starts where it runs again
    ([(True, 0.0, 0), (True, 10.0, 40), (False, 60.0, 40), (True, 110.0, 40), (True, 120.0, 80)], 4.0),
    ([(True, 0.0, 0), (False, 5.0, 20)], None),  # held now
    ([(True, 0.0, 500), (True, 10.0, 40)], None),  # a new run counts afresh (its first look only)
    ([(True, 0.0, None), (True, 10.0, 40)], None),
])
def test_running_rate_counts_only_running_time(looks: list[tuple[bool, float, int | None]],
                                               expected: float | None) -> None:
    rate = RunningRate()
    for running, now, steps in looks:
        rate = running_rate(rate, running, now, steps)
    assert rate.steps_per_s() == expected


def test_published_rate_is_zero_while_held_else_the_trainers_own_else_ours() -> None:
    own = running_rate(running_rate(RunningRate(), True, 0.0, 0), True, 4.0, 8)
    assert published_rate(True, 15.5, own) == 0.0
    assert published_rate(False, 15.5, own) == 15.5
    assert published_rate(False, None, own) == 2.0


CHATTY = """
import sys, time
for i in range(300):
    print(f"line {i}", flush=True)
print("done", flush=True)
time.sleep(60)
"""


def test_a_full_disk_costs_one_log_line_not_a_traceback_per_line(make, tmp_path: Path,
                                                                 caplog: pytest.LogCaptureFixture,
                                                                 capfd: pytest.CaptureFixture[str]) -> None:
    """The trainer's log is on a full tmpfs (every write fails with ENOSPC). A link to /dev/full would be
    refused: a trainer's log is only ever a regular file (safefs)."""
    with tmpfs(tmp_path / "logs", size="64k") as logs:
        fill(logs)
        caplog.set_level(logging.INFO, logger="gpuwatch.supervisor")
        h = make(command=script(tmp_path, "chatty.py", CHATTY), log_dir=logs)
        h.until(lambda s: s.phase is P.RUNNING and h.trainer.proc is not None
                and h.trainer.proc.log_write_errors > 300)
        h.close()
    errors = capfd.readouterr().err
    assert "Traceback" not in errors and "Logging error" not in errors
    said = [r.getMessage() for r in caplog.records if "cannot write" in r.getMessage()]
    assert len(said) == 1 and "No space left on device" in said[0]
    assert h.trainer.log_write_errors > 300  # counted, kept past the run's end
