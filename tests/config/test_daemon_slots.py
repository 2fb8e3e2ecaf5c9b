"""A trainer's ``gpus`` in a real `gpuwatch run` (issue 31 point 1): written as lspci prints it, the trainer is still
paused when its GPU is too hot; a slot that names no GPU here is a warning in the journal at start and a daemon
failure in `gpuwatch status` (exit 1) for as long as it names none."""

from __future__ import annotations

import os
import pwd
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuwatch.sim.tree import FakeCard, FakeSysfsTree
from tests.support.cli import gpuwatch
from tests.support.daemon_process import DaemonProcess
from tests.support.processes import Processes
from tests.support.trees import capture

SLOT = "0000:28:00.0"  # the RX 5700 XT capture's slot


@pytest.fixture
def navi10(tmp_path: Path) -> tuple[FakeSysfsTree, FakeCard]:
    tree = FakeSysfsTree(tmp_path / "sys")
    return tree, tree.add_capture(capture("navi10-rx5700xt-sapphire"))


@pytest.fixture
def processes(tmp_path: Path) -> Iterator[Processes]:
    with Processes(tmp_path / "logs") as started:
        yield started


def _trainer(tmp: Path, name: str, gpus: str) -> str:
    script = tmp / f"{name}.py"
    script.write_text("import time\nwhile True:\n    time.sleep(0.05)\n")
    return (f'[[trainer]]\nname = "{name}"\ncommand = ["{sys.executable}", "{script}"]\ncwd = "{tmp}"\n'
            f'user = "{pwd.getpwuid(os.geteuid()).pw_name}"\ngpus = {gpus}\ncooperative_pause = "never"\n'
            "debounce_s = 0\nmin_pause_s = 0\nhang_timeout_s = 3600\ngrace_s = 5\n")


HEAD = 'interval_s = 0.2\n[fan]\nmode = "monitor-only"\n[http]\nenabled = false\n'


def test_a_trainer_whose_gpu_is_written_as_lspci_prints_it_is_paused_when_it_is_hot(
        tmp_path: Path, navi10: tuple[FakeSysfsTree, FakeCard], processes: Processes) -> None:
    tree, card = navi10
    tree.write(f"{card.hwmon_dir}/temp1_input", "60000\n")
    trainers = _trainer(tmp_path, "lspci", '["28:00.0"]') + _trainer(tmp_path, "nvml", '["00000000:28:00.0"]')
    daemon = DaemonProcess(processes, tmp_path, tree.root, HEAD + trainers)
    running = daemon.wait_state(lambda d: [t["phase"] for t in d["trainers"]] == ["running"] * 2, "both running")
    assert [t["gpus"] for t in running["trainers"]] == [[SLOT], [SLOT]]  # as sysfs names the card
    assert not running["daemon"]["failures"]
    tree.write(f"{card.hwmon_dir}/temp1_input", "95000\n")  # edge 95 °C: over the default 90 °C limit, under crit
    paused = daemon.wait_state(lambda d: [t["phase"] for t in d["trainers"]] == ["paused"] * 2, "both paused")
    assert all("edge" in (t["reason"] or "") for t in paused["trainers"])
    assert daemon.stop() == 0


def test_a_trainer_gpu_that_is_not_here_is_a_warning_at_start_and_in_status(
        tmp_path: Path, navi10: tuple[FakeSysfsTree, FakeCard], processes: Processes) -> None:
    tree, _ = navi10
    daemon = DaemonProcess(processes, tmp_path, tree.root, HEAD + _trainer(tmp_path, "elsewhere", '["29:00.0"]'))
    line = (f"trainer 'elsewhere' gpus: no GPU 0000:29:00.0 on this machine ({SLOT}): its thermal limits watch "
            "nothing there")
    daemon.wait_log(f"WARNING gpuwatch: {line}")
    state = daemon.wait_state(lambda d: d["daemon"]["failures"], "the daemon's failures")
    assert state["daemon"]["failures"] == [f"config: {line}"]
    status = gpuwatch("status", "-c", str(daemon.config), "--color", "never")
    assert status.returncode == 1, status.stderr
    assert f"FAILURE: config: {line}" in status.stdout
    assert daemon.stop() == 0
