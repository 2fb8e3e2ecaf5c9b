"""`gpuwatch health` against a real simulated daemon: its verdict, a reset, a stuck (stopped) daemon, no daemon."""

from __future__ import annotations

import json
import os
import pwd
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.paths import REPO
from tests.support.processes import Processes, Started
from tests.support.stack import GPUWATCH
from tests.support.users import needs_root, unprivileged_user
from tests.support.waiting import wait_for


def health(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*GPUWATCH, "health", "-c", str(config), *args], capture_output=True, text=True,
                          timeout=120)


def simulated(tmp: Path, extra: str = "") -> Path:
    config = tmp / "gpuwatch.toml"
    config.write_text(f'runtime_dir = "{tmp / "run"}"\ninterval_s = 0.5\n[http]\nenabled = false\n'
                      f'[simulate]\nenabled = true\ntree_dir = "{tmp / "tree"}"\n[simulate.faults]\n'
                      f'gpu_reset_outage_s = 4.0\n{extra}')
    return config


@pytest.fixture
def processes(tmp_path: Path) -> Iterator[Processes]:
    with Processes(tmp_path / "logs") as started:
        yield started


def start(processes: Processes, config: Path, tmp: Path) -> Started:
    daemon = processes.start("gpuwatch", [*GPUWATCH, "run", "-c", str(config)])
    state = tmp / "run/state.json"
    wait_for(lambda: json.loads(state.read_text()).get("health"), "the daemon's first verdict", 60,
             ignore=(OSError, ValueError), detail=daemon.tail)
    return daemon


def test_the_daemons_verdict_a_reset_and_healing(tmp_path: Path, processes: Processes) -> None:
    config = simulated(tmp_path)
    daemon = start(processes, config, tmp_path)
    done = health(config)
    assert (done.returncode, done.stdout) == (0, "gpuwatch: healthy\n"), done.stderr
    reset = subprocess.run([*GPUWATCH, "simulate-reset", "-c", str(config)], capture_output=True, text=True,
                           timeout=60)
    assert reset.returncode == 0, reset.stderr
    unhealthy = wait_for(lambda: (r := health(config, "--format", "npd")).returncode == 1 and r, "unhealthy",
                         60, detail=daemon.tail)
    assert unhealthy.stdout.startswith("gpuwatch:G0") and len(unhealthy.stdout.strip()) <= 80
    assert "0000:28:00.0" in unhealthy.stdout
    # The outage ends, the card answers again: healthy without anyone touching it.
    wait_for(lambda: health(config, "--format", "nagios").returncode == 0, "healthy again", 90, detail=daemon.tail)


def test_a_stuck_daemon_is_unknown_g001_and_no_daemon_is_g002(tmp_path: Path, processes: Processes) -> None:
    config = simulated(tmp_path)
    daemon = start(processes, config, tmp_path)
    daemon.process.send_signal(signal.SIGSTOP)  # its loop stuck: the state file ages, the lock is still held
    try:
        stale = wait_for(lambda: (r := health(config, "--format", "npd")).returncode == 2 and r, "stale", 60)
        assert stale.stdout.startswith("gpuwatch:G001 daemon state ")
        assert health(config, "--format", "nagios").returncode == 3
    finally:
        daemon.process.send_signal(signal.SIGCONT)
    daemon.process.send_signal(signal.SIGTERM)
    daemon.process.wait(60)
    # No daemon: the GPUs (the simulated tree left behind) are read directly and G002 says why it is unknown.
    down = health(config, "--format", "npd")
    assert (down.returncode, down.stdout.strip()) == (2, "gpuwatch:G002 daemon not running"), down.stderr
    quiet = simulated(tmp_path, "[health]\ndaemon_down = false\n")
    assert health(quiet, "--format", "npd").returncode == 0


def test_a_killed_daemons_fresh_looking_state_is_not_healthy(tmp_path: Path, processes: Processes) -> None:
    """Issue 50 item 15: for up to 5 ticks + 2 s after a SIGKILL, `health` said healthy (rc 0) from the dead
    daemon's last state while `status` already said that none runs. Once a tick is late, the lock decides."""
    config = simulated(tmp_path).read_text().replace("interval_s = 0.5", "interval_s = 2.0")
    (tmp_path / "gpuwatch.toml").write_text(config)
    daemon = start(processes, tmp_path / "gpuwatch.toml", tmp_path)
    assert health(tmp_path / "gpuwatch.toml").returncode == 0
    daemon.process.send_signal(signal.SIGKILL)
    daemon.process.wait(60)
    taken = json.loads((tmp_path / "run/state.json").read_text())["taken_unix"]
    wait_for(lambda: time.time() - taken > 3.6, "a tick late (1.5 ticks + 0.5 s)", 30)
    down = health(tmp_path / "gpuwatch.toml", "--format", "npd")  # stale only 12 s after the last tick
    assert (down.returncode, down.stdout.strip()) == (2, "gpuwatch:G002 daemon not running"), down


def test_a_broken_config_is_one_line_and_exit_2(tmp_path: Path) -> None:
    config = tmp_path / "gpuwatch.toml"
    config.write_text("[health]\ndrain_after_checks = 0\n")
    done = health(config)
    assert done.returncode == 2 and "drain_after_checks" in done.stderr and "Traceback" not in done.stderr


def test_an_empty_config_name_is_named_not_replaced_by_the_default(tmp_path: Path) -> None:
    """``-c ''``: the fast entry's parser keeps paths as str (no pathlib on the fast path), where '' is false;
    it is still the file named (``Path('')``, the current directory, as every other command reads it), never
    the default file in its place."""
    done = subprocess.run([*GPUWATCH, "health", "-c", ""], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert (done.returncode, done.stderr) == (2, "gpuwatch: .: is a directory, not a config file\n")


# Valid JSON a reader cannot use (issue 46), each written over a stuck daemon's state file: the daemon holds the
# runtime directory's lock, so the answer is G014 with the field, never G002 and never a traceback.
GARBAGE: dict[str, Callable[[Any], object]] = {
    "taken_unix a word": lambda doc: {**doc, "taken_unix": "soon"},
    "daemon a list": lambda doc: {**doc, "daemon": [1]},
    "a fault not an object": lambda doc: {**doc, "health": {**doc["health"], "faults": [1]}},
    "a top-level list": lambda doc: [doc],
    "a job without job_id": lambda doc: {**doc, "jobs": [{"first_seen_unix": 1.0, "last_seen_unix": 2.0}]},
    "a job without last_seen_unix": lambda doc: {**doc, "jobs": [{"job_id": "7", "first_seen_unix": 1.0}]},
    "1e999": lambda doc: {**doc, "taken_unix": 1e999},
}


def cli(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*GPUWATCH, *args, "-c", str(config)], capture_output=True, text=True, timeout=120)


def test_garbage_over_a_live_daemons_state_is_g014_in_every_reader(tmp_path: Path, processes: Processes) -> None:
    config = simulated(tmp_path)
    daemon = start(processes, config, tmp_path)
    state = tmp_path / "run/state.json"
    daemon.process.send_signal(signal.SIGSTOP)  # alive, holding the lock, writing nothing more
    try:
        good = json.loads(state.read_text())
        for name, mutate in GARBAGE.items():
            state.write_text(json.dumps(mutate(good)))
            for fmt, code in (("nhc", 1), ("npd", 2), ("nagios", 3), ("json", 1)):
                done = health(config, "--format", fmt)
                assert done.returncode == code and "Traceback" not in done.stderr, (name, fmt, done.stderr)
                assert "gpuwatch:G014 daemon state unusable: " in done.stdout.splitlines()[0], (name, fmt, done)
                assert "G002" not in done.stdout, (name, fmt)
            shown = cli(config, "status")
            assert "Traceback" not in shown.stderr and f"{state} cannot be used: " in shown.stderr + shown.stdout, \
                (name, shown.stderr)
            receipt = cli(config, "receipt", "7")
            assert (receipt.returncode, "Traceback" in receipt.stderr) == (3, False), (name, receipt.stderr)
            assert f"the daemon (pid {daemon.process.pid}) runs, but its state" in receipt.stderr, receipt.stderr
        state.write_text("{not json")
        assert "gpuwatch:G014 daemon state unreadable: " in health(config).stdout
        state.unlink()  # a full directory: the daemon could not write it at all
        assert health(config).stdout == "gpuwatch:G014 daemon publishes no state file\n"
    finally:
        daemon.process.send_signal(signal.SIGCONT)


def test_a_state_from_the_future_is_g015_or_stale_by_the_boot_clock(tmp_path: Path, processes: Processes) -> None:
    """A stuck daemon whose wall clock ran ahead (or the checker's stepped back): its state is stamped ten minutes
    ahead. On the same boot the boot-time stamp judges it (stale: G001); without one (an older daemon) it is G015,
    never fresh."""
    config = simulated(tmp_path)
    daemon = start(processes, config, tmp_path)
    state = tmp_path / "run/state.json"
    daemon.process.send_signal(signal.SIGSTOP)
    try:
        doc = json.loads(state.read_text())
        assert doc["daemon"]["taken_boottime_s"] > 0 and doc["daemon"]["boot_id"]
        doc["taken_unix"] += 600
        state.write_text(json.dumps(doc))
        wait_for(lambda: health(config).stdout.startswith("gpuwatch:G001 daemon state "), "stale by the boot clock",
                 60)
        del doc["daemon"]["taken_boottime_s"]
        state.write_text(json.dumps(doc))
        ahead = health(config, "--format", "nagios")
        assert ahead.returncode == 3 and ahead.stdout.startswith("GPUWATCH UNKNOWN - gpuwatch:G015 daemon state "
                                                                 "stamped "), ahead.stdout
    finally:
        daemon.process.send_signal(signal.SIGCONT)


@needs_root
def test_a_users_own_garbage_state_gives_that_user_one_line(tmp_path: Path) -> None:
    """An unprivileged caller with a garbage state file in its own runtime directory (nobody holds its lock: no
    daemon) gets the direct read's answer, never a traceback; `receipt` one line. (`status` as another user is
    tests/daemon's: its lazy imports need an interpreter that user can read.)"""
    with unprivileged_user() as user:
        run = tmp_path / "run"
        run.mkdir()
        (run / "state.json").write_text('{"schema": 1, "taken_unix": "soon", "daemon": [1]}')
        config = simulated(tmp_path)
        tmp_path.chmod(0o755)
        for path in (run, run / "state.json", config):
            os.chown(path, pwd.getpwnam(user).pw_uid, -1)
        for args in (["health", "--format", "nagios"], ["health", "--format", "json"], ["receipt", "7"]):
            # tests.support.as_user drops to the user after its imports (the interpreter may be root-only).
            done = subprocess.run([sys.executable, "-m", "tests.support.as_user", user, "cli", *args, "-c",
                                   str(config)], capture_output=True, text=True, timeout=120, cwd=REPO)
            assert "Traceback" not in done.stderr and done.returncode in (1, 2, 3), (args, done.stderr)
