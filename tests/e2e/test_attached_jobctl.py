"""Ctrl-Z on `gpuwatch train` against the real daemon: the real wrapper (started as a job-control shell starts a
job) and `gpuwatch run --simulate`. The run its user suspended is listed ``suspended``: kept past the session's
silence, never judged hung, not `running` on /metrics (so AttachedRunHung cannot fire), and governed again once
continued. The wrapper's side alone: tests/cli/test_train_jobctl.py.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from gpuwatch.daemon.attach_sessions import SESSION_SILENCE_S
from tests.cli.test_train_jobctl import running, state
from tests.e2e.test_attached_runs import COOL, HOT, WAIT_S, Daemon, gpuwatch, run_dir, short_dir
from tests.support.processes import Processes
from tests.support.train_wrapper import Wrappers, loop_command
from tests.support.waiting import wait_for

__all__ = ["short_dir"]  # the fixture, shared
INTERVAL_S = 0.2  # the e2e daemon's tick (tests/e2e/test_attached_runs.py's config)


@pytest.mark.timeout(300)
def test_a_suspended_run_is_kept_not_hung_and_governed_again_once_continued(short_dir: Path) -> None:
    with Processes(short_dir / "logs") as processes, Wrappers(short_dir) as wrappers:
        daemon = Daemon(processes, wrappers, COOL, attached="hang_timeout_s = 2\n")
        wrapper = wrappers.start(loop_command(), "--name", "zed", job=True)
        run = daemon.wait_run("zed", lambda r: (r["steps_total"] or 0) > 0, "stepping", wrapper.output)
        child = run["pid"]
        os.killpg(wrapper.pid, signal.SIGTSTP)  # Ctrl-Z
        wait_for(lambda: state(wrapper.pid) == "T" and state(child) == "T", "both stopped", WAIT_S,
                 detail=wrapper.output)
        suspended = daemon.wait_run("zed", lambda r: r["phase"] == "suspended", "listed suspended", wrapper.output)
        assert suspended["reason"] == "suspended by its user: SIGTSTP (fg, bg or kill -CONT of its wrapper continue it)"
        # Ticks of INTERVAL_S each, together longer than the session's silence (and far past the hang timeout).
        ticks = daemon.ticks()
        wait_for(lambda: daemon.ticks() >= ticks + (SESSION_SILENCE_S + 2) / INTERVAL_S, "the silence outlived",
                 WAIT_S * 2, detail=daemon.child.tail)
        kept = daemon.run("zed")
        assert kept is not None and (kept["phase"], kept["reason"]) == ("suspended", suspended["reason"]), kept
        assert state(wrapper.pid) == "T" and "silent for" not in daemon.child.tail(10**6)
        status = gpuwatch("status", "-c", str(daemon.config))
        assert "zed: suspended" in status.stdout, status.stdout + status.stderr
        metrics = daemon.metrics()
        assert 'gpuwatch_trainer_phase{phase="suspended",trainer="zed"} 1' in metrics
        assert 'gpuwatch_trainer_phase{phase="running",trainer="zed"} 0' in metrics  # AttachedRunHung's condition

        os.killpg(wrapper.pid, signal.SIGCONT)  # fg
        wait_for(lambda: running(wrapper.pid) and running(child), "both running", WAIT_S, detail=wrapper.output)
        daemon.wait_run("zed", lambda r: r["phase"] == "running" and r["reason"] == "continued by its user"
                        and r["steps_total"] > run["steps_total"], "running and stepping again", wrapper.output)
        daemon.reload(HOT)  # governed again: paused when hot
        wait_for((run_dir(wrapper) / "pause").exists, "the pause file", WAIT_S, detail=wrapper.output)
        daemon.wait_run("zed", lambda r: r["phase"] == "paused", "paused at a step boundary", wrapper.output)
        os.killpg(wrapper.pid, signal.SIGINT)  # and Ctrl-C still ends it
        assert wrapper.wait(WAIT_S) == 128 + signal.SIGINT
        daemon.wait_run("zed", lambda r: r["phase"] == "stopped", "stopped by its user", wrapper.output)
        assert "hung" not in wrapper.output() and "lost the gpuwatch daemon" not in wrapper.output()
