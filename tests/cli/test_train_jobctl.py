"""Job control with `gpuwatch train` (Ctrl-Z, fg, bg) as with the bare command: real wrappers started as a
job-control shell starts a job (a process group of its own in the test's session), real commands, and the
stand-in daemon of tests/support/attach_server.py (the real daemon's side: tests/e2e/test_attached_jobctl.py).

What a terminal does is sent by hand: Ctrl-Z is SIGTSTP to the job's group, ``fg``/``bg`` SIGCONT to it.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import pytest

from gpuwatch.attach import Attach, Beat, Exited
from gpuwatch.cli.train.link import AttachLink
from tests.support.attach_server import AttachServer, Conn
from tests.support.train_wrapper import Wrapper, Wrappers, loop_command
from tests.support.waiting import wait_for

WAIT_S = 60.0  # one bounded wait for anything a wrapper does on 2 busy cores

# Steps (a heartbeat each) until the file argv[1] exists, then exits with argv[2].
STEPS_UNTIL = """
import os, sys, time
from gpuwatch.heartbeat import HEARTBEAT_ENV, Heartbeat, write_heartbeat
step = 0
while not os.path.exists(sys.argv[1]):
    time.sleep(0.02)
    step += 1
    write_heartbeat(os.environ[HEARTBEAT_ENV], Heartbeat(os.getpid(), step, time.time(), None, time.time()))
sys.exit(int(sys.argv[2]))
"""


def steps_until(done: Path, code: int) -> list[str]:
    return ["env", sys.executable, "-c", STEPS_UNTIL, str(done), str(code)]


def state(pid: int) -> str:
    """The kernel's one-letter state (/proc/PID/stat: R, S, T stopped, Z a zombie); "" once reaped."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    return stat.rpartition(")")[2].split()[0]


def command_pid(conn: Conn) -> int:
    assert conn.attach is not None
    return conn.attach.pid


def attached(server: AttachServer, wrapper: Wrapper) -> Conn:
    conns: list[Conn] = wait_for(server.attached, "the attach", WAIT_S, detail=wrapper.output)
    return conns[0]


def steps(beat: Beat) -> int:
    return max((int(h["steps_total"]) for h in beat.heartbeats), default=-1)


def beat_after(conn: Conn, start: int, check: object, what: str, wrapper: Wrapper) -> Beat:
    def found() -> Beat | None:
        return next((b for b in conn.beats[start:] if check(b)), None)  # type: ignore[operator]

    result: Beat = wait_for(found, what, WAIT_S, detail=wrapper.output)
    return result


def both(wrapper: Wrapper, child: int, letter: str, what: str) -> None:
    wait_for(lambda: state(wrapper.pid) == letter and state(child) == letter, what, WAIT_S,
             detail=lambda: f"wrapper {state(wrapper.pid)!r}, command {state(child)!r}\n{wrapper.output()}")


def running(pid: int) -> bool:
    return state(pid) in ("R", "S", "D")


@pytest.mark.parametrize("signum", [signal.SIGTSTP, signal.SIGTTIN, signal.SIGTTOU], ids=["tstp", "ttin", "ttou"])
def test_ctrl_z_stops_the_command_then_the_wrapper_and_fg_continues_both(tmp_path: Path, signum: int) -> None:
    done = tmp_path / "done"
    with Wrappers(tmp_path) as wrappers, AttachServer(wrappers.socket) as server:
        wrapper = wrappers.start(steps_until(done, 3), job=True)
        conn = attached(server, wrapper)
        child = command_pid(conn)
        beat_after(conn, 0, lambda b: steps(b) > 0, "stepping", wrapper)
        os.killpg(wrapper.pid, signum)  # the terminal's Ctrl-Z: the job's group, the wrapper alone in it
        both(wrapper, child, "T", "the command and the wrapper stopped")
        # The daemon was told before the wrapper stopped: no beats while stopped is not a hang nor a loss.
        told = beat_after(conn, 0, lambda b: b.suspended == signum, "the suspended beat", wrapper)
        os.killpg(wrapper.pid, signal.SIGCONT)  # fg / bg
        wait_for(lambda: running(wrapper.pid) and running(child), "both running again", WAIT_S,
                 detail=lambda: f"wrapper {state(wrapper.pid)!r}, command {state(child)!r}\n{wrapper.output()}")
        start = conn.beats.index(told)
        beat_after(conn, start, lambda b: b.suspended is None and steps(b) > steps(told), "steps after the continue",
                   wrapper)
        done.touch()
        assert wrapper.wait(WAIT_S) == 3  # the command's own status, unchanged
        exited = wait_for(lambda: [m for m in conn.messages if isinstance(m, Exited)], "Exited", WAIT_S)
        assert exited == [Exited(code=3, restarting=False, signalled=None)]  # a failure, not ended by its user


def test_ctrl_c_after_a_suspend_and_continue_still_ends_the_run_once(tmp_path: Path) -> None:
    with Wrappers(tmp_path) as wrappers, AttachServer(wrappers.socket) as server:
        wrapper = wrappers.start(loop_command(), job=True)
        conn = attached(server, wrapper)
        child = command_pid(conn)
        beat_after(conn, 0, lambda b: steps(b) > 0, "stepping", wrapper)
        os.killpg(wrapper.pid, signal.SIGTSTP)
        both(wrapper, child, "T", "both stopped")
        os.killpg(wrapper.pid, signal.SIGCONT)
        told = beat_after(conn, 0, lambda b: b.suspended is not None, "the suspended beat", wrapper)
        beat_after(conn, conn.beats.index(told), lambda b: b.suspended is None and steps(b) > steps(told),
                   "stepping again", wrapper)
        os.killpg(wrapper.pid, signal.SIGINT)  # Ctrl-C
        assert wrapper.wait(WAIT_S) == 128 + signal.SIGINT
        exited = wait_for(lambda: [m for m in conn.messages if isinstance(m, Exited)], "Exited", WAIT_S)
        assert exited == [Exited(code=-signal.SIGINT, restarting=False, signalled=signal.SIGINT)]
    assert "KeyboardInterrupt" in wrapper.output() and wrapper.output().count("KeyboardInterrupt") == 1


def test_a_command_that_exits_while_the_wrapper_is_stopped_is_reaped_with_its_status(tmp_path: Path) -> None:
    done = tmp_path / "done"
    with Wrappers(tmp_path) as wrappers:  # no daemon at all: job control does not need one
        wrapper = wrappers.start(steps_until(done, 5), job=True)
        wait_for(lambda: (wrapper.remember_tree(), wrapper.seen)[1], "the command", WAIT_S, detail=wrapper.output)
        (child,) = wrapper.seen
        # Started, not just forked: between the fork and its exec the child is still in the wrapper's group and
        # the wrapper waits in vfork (state D), so a Ctrl-Z then stops the child before the handler can run
        # (docs/attached-runs.md, "Job control": fg continues both).
        wait_for(lambda: str(done) in wrapper.seen[child].cmdline(), "the command's exec", WAIT_S,
                 detail=wrapper.output)
        os.killpg(wrapper.pid, signal.SIGTSTP)
        both(wrapper, child, "T", "both stopped")
        os.kill(child, signal.SIGCONT)  # the command alone goes on (its user's kill -CONT) and ends
        done.touch()
        wait_for(lambda: state(child) == "Z", "the command ended, its parent stopped", WAIT_S,
                 detail=lambda: f"command {state(child)!r}")
        assert state(wrapper.pid) == "T"
        os.killpg(wrapper.pid, signal.SIGCONT)
        assert wrapper.wait(WAIT_S) == 5
    assert state(child) == ""  # reaped


def test_a_wrapper_whose_group_is_orphaned_ignores_ctrl_z_as_the_bare_command_would(tmp_path: Path) -> None:
    """Started in a session of its own (setsid, a service): the kernel discards SIGTSTP at its default action
    there, so the wrapper cannot stop; the command it stopped for the moment goes on with it."""
    with Wrappers(tmp_path) as wrappers, AttachServer(wrappers.socket) as server:
        wrapper = wrappers.start(loop_command())  # job=False: a session of its own
        conn = attached(server, wrapper)
        child = command_pid(conn)
        beat_after(conn, 0, lambda b: steps(b) > 0, "stepping", wrapper)
        os.kill(wrapper.pid, signal.SIGTSTP)
        told = beat_after(conn, 0, lambda b: b.suspended == signal.SIGTSTP, "the suspended beat", wrapper)
        beat_after(conn, conn.beats.index(told), lambda b: b.suspended is None and steps(b) > steps(told),
                   "running on", wrapper)
        assert running(wrapper.pid) and running(child)


def test_continued_the_link_refreshes_the_pause_file_it_holds_before_the_command_runs_again(tmp_path: Path) -> None:
    """After a long suspension the pause file's refreshes were missed: a launcher that found it older than
    heartbeat.PAUSE_STALE_S would take it for a dead requester's and train on, hot."""
    pause = tmp_path / "pause"
    pause.write_text("hot")
    old = time.time() - 3600
    os.utime(pause, (old, old))
    link = AttachLink(lambda: tmp_path / "none.sock", Attach(pid=os.getpid(), argv=["train"]), tmp_path / "hb.json",
                      pause, lambda line: None, lambda event: None)
    link.paused, link.reason = True, "hot"
    assert not link.suspend(signal.SIGTSTP)  # no daemon attached: nothing to wait for
    assert pause.stat().st_mtime == old  # suspended: left as it is
    link.suspend(None)  # continued (the thread was never started: the handler's own doing)
    assert pause.stat().st_mtime > old + 3000 and link.suspended is None
    link.close()
