"""Issue 31 point 8: a full or read-only runtime directory, on a real tmpfs mount, under a real daemon.

The state file stops (it cannot be written), the daemon does not: `gpuwatch status` asks the daemon over
HTTP or its control socket and says what is wrong with the directory, instead of "not running" or "the
control loop is stuck"; and SIGTERM with the directory read-only still gives the fan back and exits 0.
Skipped, with the reason, where mounting is not permitted (not root, no CAP_SYS_ADMIN, a container).
"""

from __future__ import annotations

import signal
import subprocess
import time
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


# ---- never a lowered cap without its record, full or not (issue 31 points 2 and 8; a regression in issue 46) ----

ORIGINAL_CAP_UW = 220_000_000  # the navi10 capture's power1_cap


def _cap_uw(hwmon: Path) -> int:
    return int((hwmon / "power1_cap").read_text().strip() or ORIGINAL_CAP_UW)


def _recorded(runtime: Path) -> bool:
    try:
        return "cap_uw" in (runtime / "power-restore.json").read_text()
    except FileNotFoundError:
        return False


def test_a_full_directory_never_leaves_a_lowered_cap_without_its_record(tmp_path: Path, runtime: Path,
                                                                       processes: Processes) -> None:
    """The governor holds a lowered cap (recorded); the directory fills up; `gpuwatch restore --force` gives the
    original back and deletes the record beside the daemon. While the directory is full the daemon cannot record
    the original again, so it must not lower the cap again; once there is space it records, then lowers; a
    SIGKILL then still leaves the way back."""
    from gpuwatch.sim.tree import FakeSysfsTree
    from tests.support.trees import capture

    tree = FakeSysfsTree(tmp_path / "sys")
    card = tree.add_capture(capture("navi10-rx5700xt-sapphire"))
    hwmon = tree.root / str(card.hwmon_dir)
    tree.write(f"{card.hwmon_dir}/temp2_input", "100000\n")  # junction 100 °C: the fan tops out, the cap must fall
    daemon = DaemonProcess(processes, tmp_path, tree.root, "interval_s = 0.1\n[http]\nenabled = false\n")
    wait_for(lambda: _cap_uw(hwmon) < ORIGINAL_CAP_UW and _recorded(runtime), "the cap lowered, recorded", 60,
             detail=daemon.child.tail)
    # Stopped meanwhile, so that it sees the end result at once: the directory full after the restore freed the
    # records' pages.
    daemon.signal(signal.SIGSTOP)
    try:
        forced = subprocess.run([*GPUWATCH, "restore", "--force", "--sysfs-root", str(tree.root), "-c",
                                 str(daemon.config)], capture_output=True, text=True, timeout=60)
        assert forced.returncode == 0, forced.stderr
        assert not _recorded(runtime) and _cap_uw(hwmon) == ORIGINAL_CAP_UW
        fill(runtime)
    finally:
        daemon.signal(signal.SIGCONT)
    # The daemon wants the cap lower again at once; for some seconds of ticks the cap must stay unlowered.
    seen_lowered_unrecorded = []
    wait_for(lambda: "the power restore record is gone and cannot be written again" in daemon.log(),
             "the daemon to say why", 30, detail=daemon.child.tail)
    for _ in range(30):
        if _cap_uw(hwmon) < ORIGINAL_CAP_UW and not _recorded(runtime):
            seen_lowered_unrecorded.append(_cap_uw(hwmon))
        time.sleep(0.1)
    assert not seen_lowered_unrecorded, f"a lowered cap without its record: {seen_lowered_unrecorded}"
    (runtime / "filler").unlink()  # space again: recorded first, then lowered
    wait_for(lambda: _cap_uw(hwmon) < ORIGINAL_CAP_UW, "the cap lowered again", 60, detail=daemon.child.tail)
    assert _recorded(runtime)
    daemon.proc.kill()
    daemon.proc.wait(30)
    restored = subprocess.run([*GPUWATCH, "restore", "--sysfs-root", str(tree.root), "-c", str(daemon.config)],
                              capture_output=True, text=True, timeout=60)
    assert restored.returncode == 0, restored.stderr
    assert _cap_uw(hwmon) == ORIGINAL_CAP_UW


def test_full_at_start_the_firmware_keeps_the_fan_until_its_original_is_recorded(tmp_path: Path, runtime: Path,
                                                                                  processes: Processes) -> None:
    """The fan's record failing used to raise out of the whole fan controller every tick (`fan controller failed:
    [Errno 28]`: no GPU's fan governed, one line per tick). Now that GPU's fan is "uncontrolled" with the reason,
    said once, the firmware keeps it, and it is taken (recorded first) once there is space."""
    fill(runtime)
    daemon, _ = _daemon(processes, tmp_path, http=False)
    enable = tmp_path / "tree/class/hwmon/hwmon1/pwm1_enable"
    daemon.wait_log("fan not controlled: cannot record the original fan mode", 60)
    time.sleep(2)  # ticks on the full directory
    log = daemon.log()
    assert "fan controller failed" not in log, log
    assert log.count("fan not controlled") == 1, log  # said once, retried every tick
    assert enable.read_text().strip() == "2"  # the firmware keeps the fan
    (runtime / "filler").unlink()
    wait_for(lambda: enable.read_text().strip() == "1", "the fan taken", 60, detail=daemon.child.tail)
    assert "pwm1_enable" in (runtime / "fan-restore.json").read_text()
    assert daemon.stop() == 0
    assert enable.read_text().strip() == "2"
