"""`gpuwatch health` against a real simulated daemon: its verdict, a reset, a stuck (stopped) daemon, no daemon."""

from __future__ import annotations

import json
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.processes import Processes, Started
from tests.support.stack import GPUWATCH
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
