"""A daemon killed while its trainers are paused, then started again (issue 31 point 4, issue 38 point 3):
real `gpuwatch run` daemons, a real trainer child, SIGKILL. The new daemon finds the run the dead one left
(held by the pause file, or stopped with SIGSTOP), says so, stops it, and only then starts its own copy;
`gpuwatch status` without a daemon names it."""

from __future__ import annotations

import os
import pwd
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from gpuwatch.heartbeat import PAUSE_STALE_S, pause_age_s, refresh_pause, request_pause
from gpuwatch.sim.tree import FakeSysfsTree
from gpuwatch.supervise.leftovers import RunRecord, find, read_record, write_record
from gpuwatch.supervise.orphans import RUN_ENV
from tests.support.daemon_process import DaemonProcess
from tests.support.processes import Processes
from tests.support.stack import GPUWATCH
from tests.support.trees import capture
from tests.support.waiting import wait_for

TRAINER = """
import os, signal, sys, time
from gpuwatch.heartbeat import Heartbeat, write_heartbeat, pause_requested
hb, pause = os.environ["GPUWATCH_HEARTBEAT_FILE"], os.environ["GPUWATCH_PAUSE_FILE"]
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
steps = 0
while True:
    paused = pause_requested(pause)
    if not paused:
        steps += 1
    write_heartbeat(hb, Heartbeat(pid=os.getpid(), steps_total=steps, last_step_unix=time.time(),
                                  steps_per_s=10.0, updated_unix=time.time(), paused=paused))
    time.sleep(0.05)
"""


@pytest.fixture
def processes(tmp_path: Path) -> Iterator[Processes]:
    with Processes(tmp_path / "logs") as started:
        yield started


def _config(tmp: Path, cooperative: str) -> str:
    script = tmp / "train.py"
    script.write_text(textwrap.dedent(TRAINER))
    user = pwd.getpwuid(os.geteuid()).pw_name
    return ('interval_s = 0.1\n[fan]\nmode = "monitor-only"\n[http]\nenabled = false\n'
            f'[[trainer]]\nname = "t"\ncommand = ["{sys.executable}", "{script}"]\ncwd = "{tmp}"\nuser = "{user}"\n'
            f'cooperative_pause = "{cooperative}"\nmin_pause_s = 0\ngrace_s = 5\nhang_timeout_s = 3600\n')


def _copies(script: Path) -> list[psutil.Process]:
    """Every live process running the trainer's script (its command line names it)."""
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        if str(script) in (proc.info["cmdline"] or []) and proc.info["status"] != psutil.STATUS_ZOMBIE:
            found.append(proc)
    return found


def _cli(*args: str, config: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*GPUWATCH, *args, "-c", str(config)], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("cooperative, left", [("always", "held by its pause file"),
                                               ("never", "left stopped (SIGSTOP)")])
def test_a_restarted_daemon_stops_the_run_a_killed_one_left_paused(tmp_path: Path, fake_sysfs: FakeSysfsTree,
                                                                   processes: Processes, cooperative: str,
                                                                   left: str) -> None:
    fake_sysfs.add_capture(capture("navi10-rx5700xt-sapphire"))
    script = tmp_path / "train.py"
    first = DaemonProcess(processes, tmp_path, fake_sysfs.root, _config(tmp_path, cooperative))
    old = first.wait_state(lambda d: d["trainers"][0]["phase"] == "running" and d["trainers"][0]["steps_total"],
                           "the trainer running")["trainers"][0]["pid"]
    paused = _cli("pause", "t", config=first.config)
    assert paused.returncode == 0, paused.stderr
    first.wait_state(lambda d: d["trainers"][0]["phase"] == "paused", "the trainer paused")
    old_tree = [psutil.Process(old), *psutil.Process(old).children(recursive=True)]
    try:
        first.signal(signal.SIGKILL)
        first.proc.wait(30)
        assert psutil.Process(old).is_running()  # nobody stopped it: outside systemd, it stays behind

        status = _cli("status", config=first.config)
        assert "trainer t: pid " + str(old) in status.stdout and left in status.stdout, status.stdout
        pause = first.runtime / "trainers/t/pause"
        if cooperative == "always":  # nobody refreshes the pause file any more: once stale, status says why
            stale = time.time() - PAUSE_STALE_S - 1
            os.utime(pause, (stale, stale))
            status = _cli("status", config=first.config)
            assert "not refreshed for" in status.stdout and "whoever asked is gone" in status.stdout, status.stdout

        second = DaemonProcess(processes, tmp_path, fake_sysfs.root, _config(tmp_path, cooperative))
        second.wait_log(f"trainer t: pid {old}")  # said before anything else happens to it
        new = second.wait_state(lambda d: d["trainers"][0]["phase"] == "running" and d["trainers"][0]["pid"],
                                "the trainer running again", timeout_s=30)["trainers"][0]["pid"]
        assert new != old
        wait_for(lambda: not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in old_tree),
                 "the old tree to be gone", 15, ignore=(psutil.Error,))
        assert [p.pid for p in _copies(script)] == [new]  # one copy runs
        assert "left by gpuwatch daemon pid" in second.log()
        assert second.stop() == 0
        wait_for(lambda: not _copies(script), "no copy left after the daemon's stop", 15)
    finally:
        for proc in _copies(script):
            proc.kill()


def test_records_of_runs_that_are_gone_or_reused_pids_are_not_leftovers(tmp_path: Path) -> None:
    """A pid reused by another process has another start time: never signalled as a leftover."""
    (tmp_path / "gone").mkdir()
    (tmp_path / "reused").mkdir()
    write_record(tmp_path / "gone", RunRecord("gone", 2**22 + 7, 1.0, "x/gone/1", 1, 0.0))
    me = psutil.Process()
    write_record(tmp_path / "reused", RunRecord("reused", me.pid, me.create_time() - 5.0, "x/reused/1", 1, 0.0))
    assert find(tmp_path, own_daemon_pid=os.getpid() + 1) == []
    assert read_record(tmp_path / "gone") is None and read_record(tmp_path / "reused") is None  # cleared


def test_a_record_is_believed_only_for_a_process_that_carries_the_runs_mark(tmp_path: Path) -> None:
    """The record lies in a directory the trainer's user owns: a forged one naming another process (same
    pid and start time) must not get that process stopped; the run's own processes carry its mark."""
    sleep = [sys.executable, "-c", "import time; time.sleep(60)"]
    stranger = subprocess.Popen(sleep, env={k: v for k, v in os.environ.items() if k != RUN_ENV})
    ours = subprocess.Popen(sleep, env={**os.environ, RUN_ENV: "x/t/1"})
    try:
        for name, child in (("forged", stranger), ("t", ours)):
            (tmp_path / name).mkdir()
            write_record(tmp_path / name, RunRecord(name, child.pid, psutil.Process(child.pid).create_time(),
                                                    f"x/{name}/1", 2**22 + 9, 0.0))
        found = find(tmp_path, own_daemon_pid=os.getpid() + 1)
        assert [(f.record.trainer, [p.pid for p in f.members]) for f in found] == [("t", [ours.pid])]
    finally:
        for child in (stranger, ours):
            child.kill()
            child.wait()


def test_the_pause_file_says_whether_its_requester_is_alive(tmp_path: Path) -> None:
    """The daemon refreshes the file it holds; one not refreshed for PAUSE_STALE_S has no requester."""
    pause = tmp_path / "pause"
    assert pause_age_s(pause, time.time()) is None
    request_pause(pause, "manual pause")
    written = pause.stat().st_mtime
    assert not refresh_pause(pause, written + 1.0)  # fresh: left alone
    os.utime(pause, (written - PAUSE_STALE_S, written - PAUSE_STALE_S))
    assert pause_age_s(pause, written) == pytest.approx(PAUSE_STALE_S)
    assert refresh_pause(pause, written)
    assert pause_age_s(pause, written) == 0.0


def test_the_daemon_refreshes_the_pause_file_it_holds(tmp_path: Path, fake_sysfs: FakeSysfsTree) -> None:
    from tests.supervise.test_supervisor import COOPERATIVE, Harness, script

    card = fake_sysfs.add_capture(capture("navi21-rx6900xt-sapphire-nitro"), card="card0", pci_slot="0000:03:00.0")
    h = Harness(tmp_path, fake_sysfs, card.hwmon_dir, command=script(tmp_path, "coop.py", COOPERATIVE))
    h.set_junction_c(60)
    try:
        h.until(lambda s: s.phase.value == "running" and (s.steps_total or 0) > 2)
        h.sup.command("pause", "t")
        h.until(lambda s: s.phase.value == "paused")
        old = time.time() - 2 * PAUSE_STALE_S
        os.utime(h.trainer.pause_file, (old, old))
        h.tick()
        age_s = pause_age_s(h.trainer.pause_file, time.time())
        assert age_s is not None and age_s < PAUSE_STALE_S
    finally:
        h.close()
