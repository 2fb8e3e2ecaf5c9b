"""Signals at any moment: a real `gpuwatch run` is sent thousands of SIGHUPs and SIGTERMs at random moments,
and it always answers (ticks go on, reloads happen) and exits 0 (issue 40: a handler that set a
threading.Event could deadlock on the lock the interrupted main thread held inside ``Event.wait``).
A deadlocked daemon shows as ticks that stop, or an exit that never comes.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuwatch.sim.tree import FakeSysfsTree
from tests.support.daemon_process import DaemonProcess
from tests.support.processes import Processes
from tests.support.trees import capture
from tests.support.waiting import wait_for

CONFIG = 'interval_s = 0.05\n[fan]\nmode = "monitor-only"\n[http]\nenabled = false\n'


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[DaemonProcess]:
    tree = FakeSysfsTree(tmp_path / "sys")
    tree.add_capture(capture("navi10-rx5700xt-sapphire"))
    with Processes(tmp_path / "logs") as processes:
        running = DaemonProcess(processes, tmp_path, tree.root, CONFIG)
        running.wait_state(lambda d: d["daemon"]["ticks_total"] >= 2, "two ticks", timeout_s=60)
        yield running


def _ticks(daemon: DaemonProcess) -> int:
    document = daemon.state()
    return -1 if document is None else int(document["daemon"]["ticks_total"])


def _storm(pid: int, signals: list[int], count: int, rng: random.Random) -> int:
    """``count`` signals drawn from ``signals``, each after a random pause of 0 to 2 ms (most land in the
    wait between ticks, some inside a tick, a reload or the shutdown); how many were delivered."""
    sent = 0
    for _ in range(count):
        try:
            os.kill(pid, rng.choice(signals))
        except ProcessLookupError:
            break
        sent += 1
        if rng.random() < 0.5:
            time.sleep(rng.uniform(0, 0.002))
    return sent


def test_thousands_of_sighups_leave_a_daemon_that_answers_and_reloads(daemon: DaemonProcess) -> None:
    rng = random.Random(40)
    for burst in range(4):
        assert _storm(daemon.proc.pid, [signal.SIGHUP], 2000, rng) == 2000
        before = _ticks(daemon)
        wait_for(lambda before=before: _ticks(daemon) > before + 3, f"ticks after SIGHUP burst {burst + 1}", 30,
                 detail=daemon.child.tail)
        assert daemon.proc.poll() is None
    daemon.wait_log("config reloaded")
    assert daemon.stop(timeout_s=60) == 0
    assert daemon.log().count("received SIGTERM, stopping") == 1
    assert "Traceback" not in daemon.log()


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_storm_of_sighup_and_sigterm_always_ends_in_a_clean_exit(daemon: DaemonProcess, seed: int) -> None:
    rng = random.Random(seed)
    _storm(daemon.proc.pid, [signal.SIGHUP], 1000, rng)
    # SIGTERMs among SIGHUPs until the daemon is gone: every moment of the shutdown gets its signals too.
    sent = 0
    while daemon.proc.poll() is None and sent < 20000:
        sent += _storm(daemon.proc.pid, [signal.SIGHUP, signal.SIGHUP, signal.SIGTERM], 200, rng)
    try:
        status = daemon.proc.wait(60)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"no exit after {sent} signals\n{daemon.child.tail()}") from None
    assert status == 0, daemon.child.tail()
    assert daemon.log().count("received SIGTERM, stopping") == 1
    assert "gpuwatch stopped" in daemon.log()
    assert not (daemon.runtime / "state.json").exists()
