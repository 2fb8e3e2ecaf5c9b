"""Crashes under a real systemd: SIGKILL, a watchdog timeout, a crash loop, a ReadWritePaths= directory
gone missing. Every one must end with every fan handed back to the firmware by ExecStopPost before
anything restarts (the test drop-in's probe records the fans right after it); on hot cards, with every
power cap the governor lowered back at the value found (the second probe)."""

from __future__ import annotations

import json

from tests.support.paths import REPO
from tests.support.unit_rig import CAPS_LOG, CONTAINER_MARKS, Unit
from tests.support.waiting import wait_for

pytestmark = CONTAINER_MARKS

FAST_RESTART = "[Service]\nRestartSec=200ms\n"


def kill(unit: Unit) -> int:
    """SIGKILL to the daemon as `systemctl kill -s KILL` sends it; returns the killed MainPID."""
    pid = unit.main_pid()
    done = unit.systemctl("kill", "-s", "KILL", "gpuwatch")
    assert done.returncode == 0, done.stderr
    return pid


def test_sigkill_hands_every_fan_back_then_restarts_with_the_restore_record(unit: Unit) -> None:
    unit.reset()  # the shipped RestartSec=5s
    found = unit.heat()
    unit.start()
    unit.governed(found)
    unit.box.write("/run/gpuwatch/sentinel", "left by the killed instance")
    cursor = unit.cursor()
    killed = kill(unit)
    unit.wait_restart(killed)
    assert unit.handed_back() == ["2 2"]  # after ExecStopPost (exit 0), before the restart
    assert unit.handed_back(CAPS_LOG) == [found]  # the caps as found, not the lowered ones
    journal = unit.logged(cursor, "handed back", "Main process exited, code=killed, status=9/KILL")
    assert "Traceback" not in journal
    assert unit.prop("NRestarts") == "1"
    assert unit.fans() == ["1", "1"]  # the new instance has them again
    # RuntimeDirectoryPreserve=restart: /run/gpuwatch and fan-restore.json outlive the crash.
    assert unit.box.path("/run/gpuwatch/sentinel").exists()
    assert unit.recorded_modes() == [2, 2]


def test_restore_record_keeps_the_original_mode_when_nothing_handed_back(unit: Unit) -> None:
    # No ExecStopPost: the fans stay manual (1) and the caps lowered through the restart; the records must
    # still hold the originals, and a stop gives those back.
    unit.reset(dropins={"20-no-stop-post.conf": "[Service]\nExecStopPost=\nRestartSec=200ms\n"})
    found = unit.heat()
    unit.start()
    unit.governed(found)
    unit.wait_restart(kill(unit))
    assert unit.fans() == ["1", "1"]
    assert unit.recorded_modes() == [2, 2]
    records = json.loads(unit.box.path("/run/gpuwatch/power-restore.json").read_text())
    assert sorted(str(r["cap_uw"]) for r in records.values()) == sorted(found.split())
    assert unit.systemctl("stop", "gpuwatch").returncode == 0
    assert unit.fans() == ["2", "2"]  # the true original, not the 1 the killed instance left
    assert " ".join(str(cap) for cap in unit.caps()) == found  # the caps found, not the lowered ones
    assert not unit.box.path("/run/gpuwatch").exists()  # a stop (not a restart) removes it


def test_watchdog_aborts_a_stuck_daemon_hands_the_fans_back_and_restarts(unit: Unit) -> None:
    # 5 s, not less: the daemon pings every 2.5 s, and a busy machine must not trip it before the SIGSTOP.
    unit.reset(dropins={"20-watchdog.conf": "[Service]\nWatchdogSec=5s\nRestartSec=200ms\n"})
    found = unit.heat()
    unit.start()
    unit.governed(found)
    assert unit.prop("WatchdogUSec") == "5s"
    pid = unit.main_pid()
    cursor = unit.cursor()
    unit.box.sh("bash", "-c", f"kill -STOP {pid}")  # bash's builtin: there is no /bin/kill here
    unit.wait_restart(pid, "the restart after the watchdog")
    unit.logged(cursor, "Watchdog timeout", f"Killing process {pid} (gpuwatch) with signal SIGABRT",
                "Failed with result 'watchdog'")
    assert unit.handed_back() == ["2 2"]
    assert unit.handed_back(CAPS_LOG) == [found]
    assert unit.prop("NRestarts") == "1"
    assert unit.fans() == ["1", "1"]


def test_a_crash_loop_stops_at_the_start_limit_with_the_fans_handed_back(unit: Unit) -> None:
    unit.reset(dropins={"20-fast-restart.conf": FAST_RESTART})
    assert (unit.prop("StartLimitBurst"), unit.prop("StartLimitIntervalUSec")) == ("5", "5min")
    unit.start()
    cursor = unit.cursor()
    for crash in range(1, 5):
        unit.wait_restart(kill(unit), f"restart {crash}")
    kill(unit)  # the 5th crash: a 6th start within 5 minutes is refused
    wait_for(lambda: unit.prop("ActiveState") == "failed", "the unit failed", 30, interval_s=0.2)
    # systemd 252 keeps Result=signal here (start-limit-hit only replaces "success"): the journal says it.
    unit.logged(cursor, "Start request repeated too quickly")
    assert unit.prop("SubState") == "failed" and unit.prop("NRestarts") == "5"
    assert unit.box.sh("systemctl", "list-jobs", "--no-legend").stdout.strip() == ""  # no restart pending
    assert unit.handed_back() == ["2 2"] * 5
    assert unit.fans() == ["2", "2"]
    assert unit.systemctl("start", "gpuwatch").returncode != 0  # refused until reset-failed
    assert unit.systemctl("reset-failed", "gpuwatch").returncode == 0
    unit.start()


# The form docs/systemd.md and the unit's comment give for trainers' output directories.
DOCUMENTED_DROPIN = "ReadWritePaths=-/data/checkpoints"


def test_the_documented_read_write_paths_dropin_survives_a_missing_directory(unit: Unit) -> None:
    """Without the "-", a ReadWritePaths= directory missing when a command starts fails it with
    226/NAMESPACE, the "+" ExecStopPost included (systemd 252): a crash after /data was unmounted left
    the fans in manual mode. The documented form must hand them back and restart."""
    for documented in (REPO / "docs/systemd.md", REPO / "systemd/gpuwatch.service"):
        assert DOCUMENTED_DROPIN in documented.read_text() and "ReadWritePaths=/" not in documented.read_text()
    unit.box.sh("mkdir", "-p", "/data/checkpoints")
    unit.reset(dropins={"30-checkpoints.conf": f"[Service]\n{DOCUMENTED_DROPIN}\n",
                        "20-fast-restart.conf": FAST_RESTART})
    unit.start()
    unit.box.sh("rmdir", "/data/checkpoints")  # an unmounted disk
    unit.wait_restart(kill(unit))
    assert unit.handed_back() == ["2 2"]
    assert unit.fans() == ["1", "1"]
