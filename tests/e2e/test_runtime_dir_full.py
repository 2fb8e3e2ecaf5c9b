"""Issue 31 point 8: a full or read-only runtime directory, on a real tmpfs mount, under a real daemon.

The state file stops (it cannot be written), the daemon does not: `gpuwatch status` asks the daemon over
HTTP or its control socket and says what is wrong with the directory, instead of "not running" or "the
control loop is stuck"; and SIGTERM with the directory read-only still gives the fan back and exits 0.
Skipped, with the reason, where mounting is not permitted (not root, no CAP_SYS_ADMIN, a container).
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.daemon_process import DaemonProcess
from tests.support.processes import Processes, free_port
from tests.support.stack import GPUWATCH
from tests.support.tmpfs import fill, read_only, tmpfs
from tests.support.waiting import wait_for


@pytest.fixture
def runtime(tmp_path: Path) -> Iterator[Path]:
    """A 1 MiB tmpfs as the runtime directory, unmounted afterwards."""
    with tmpfs(tmp_path / "run") as path:
        yield path


def _daemon(processes: Processes, tmp: Path, http: bool) -> tuple[DaemonProcess, int]:
    port = free_port()
    section = f'listen = "127.0.0.1"\nport = {port}\n' if http else "enabled = false\n"
    daemon = DaemonProcess(processes, tmp, tmp / "tree", f'interval_s = 0.2\n[http]\n{section}'
                                                       f'[simulate]\nenabled = true\ntree_dir = "{tmp / "tree"}"\n')
    return daemon, port


def _status(daemon: DaemonProcess) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*GPUWATCH, "status", "--color", "never", "-c", str(daemon.config)], capture_output=True,
                          text=True, timeout=60)


@pytest.fixture
def processes(tmp_path: Path) -> Iterator[Processes]:
    with Processes(tmp_path / "logs") as started:
        yield started


def test_full_at_start_status_asks_the_daemon_over_http(tmp_path: Path, runtime: Path,
                                                        processes: Processes) -> None:
    fill(runtime)
    daemon, _ = _daemon(processes, tmp_path, http=True)
    daemon.wait_log("HTTP listening", 60)
    wait_for(lambda: "state file" in _status(daemon).stdout, "a failing state file in the daemon's view", 60,
             detail=daemon.child.tail)
    shown = _status(daemon)
    assert f"daemon running (pid {daemon.proc.pid}" in shown.stdout, shown.stdout
    assert "not running" not in shown.stdout
    assert f"it has no state file {runtime / 'state.json'} (its runtime directory {runtime} is full" in shown.stdout
    assert "over HTTP" in shown.stdout and "No space left on device" in shown.stdout
    assert shown.returncode == 1  # the daemon reports a failure: its state file


def test_full_mid_run_status_asks_the_daemon_over_its_control_socket(tmp_path: Path, runtime: Path,
                                                                     processes: Processes) -> None:
    daemon, _ = _daemon(processes, tmp_path, http=False)
    daemon.wait_state(lambda d: d["daemon"]["ticks_total"] > 0, "a first state file", 60)
    fill(runtime)
    # Past the staleness limit (5 ticks + 2 s) the old file alone would read "the control loop is stuck".
    wait_for(lambda: "is full" in _status(daemon).stdout, "status to say the directory is full", 60,
             detail=daemon.child.tail)
    shown = _status(daemon)
    assert f"daemon running (pid {daemon.proc.pid}" in shown.stdout, shown.stdout
    assert "control loop is stuck" not in shown.stdout
    assert "s old (its runtime directory" in shown.stdout and "over its control socket" in shown.stdout
    assert "No space left on device" in shown.stdout


def test_read_only_mid_run_status_says_so_and_sigterm_still_exits_0(tmp_path: Path, runtime: Path,
                                                                   processes: Processes) -> None:
    daemon, _ = _daemon(processes, tmp_path, http=True)
    enable = tmp_path / "tree/class/hwmon/hwmon1/pwm1_enable"
    daemon.wait_state(lambda d: d["daemon"]["ticks_total"] > 0, "a first state file", 60)
    wait_for(lambda: (runtime / "fan-restore.json").exists() and enable.read_text().strip() == "1",
             "the daemon to take the fan", 60, ignore=(OSError,), detail=daemon.child.tail)
    read_only(runtime)  # for every new open from now on
    wait_for(lambda: "is read-only" in _status(daemon).stdout, "status to say the directory is read-only", 60,
             detail=daemon.child.tail)
    assert f"daemon running (pid {daemon.proc.pid}" in _status(daemon).stdout
    assert daemon.stop() == 0, daemon.child.tail()
    assert enable.read_text().strip() == "2"  # the fan went back to the firmware
    assert "Traceback" not in daemon.log(), daemon.log()  # the state file's failure too: one line, not a trace
    stopping = daemon.log().split("received SIGTERM", 1)[1]
    assert "record stays in" in stopping  # it says why the record is still there, in one line
