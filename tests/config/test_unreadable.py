"""A config file that cannot be read (issue 31 point 10): not UTF-8, a directory, permission denied, gone. One line
and exit 2 from every command at start; at a reload (SIGHUP to a real daemon), the file is rejected and the
running configuration, the daemon and its trainers go on."""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from gpuwatch.config.base import ConfigError
from gpuwatch.config.file import load_config
from gpuwatch.sim.tree import FakeCard, FakeSysfsTree
from tests.support.cli import GPUWATCH, gpuwatch
from tests.support.daemon_process import DaemonProcess
from tests.support.processes import Processes
from tests.support.trees import capture
from tests.support.waiting import wait_for

LATIN1 = "interval_s = 0.2\n[thermal]\n# the card throttles at 95 \xb0C\nedge_limit_c = 90\n".encode("latin-1")


def _latin1(tmp_path: Path) -> Path:
    path = tmp_path / "gpuwatch.toml"
    path.write_bytes(LATIN1)
    return path


def _directory(tmp_path: Path) -> Path:
    path = tmp_path / "gpuwatch.toml"
    path.mkdir()
    return path


def _under_a_file(tmp_path: Path) -> Path:
    (tmp_path / "etc").write_text("")
    return tmp_path / "etc" / "gpuwatch.toml"


@pytest.mark.parametrize("make, message", [
    (_latin1, "line 3: byte 0xb0 is not UTF-8 text (TOML files are UTF-8: save the file as UTF-8)"),
    (_directory, "is a directory, not a config file"),
    (_under_a_file, "cannot read: Not a directory"),
    (lambda tmp_path: tmp_path / "gone.toml", "no such config file"),
])
def test_an_unreadable_file_is_one_config_error_naming_it(tmp_path: Path, make: Callable[[Path], Path],
                                                          message: str) -> None:
    path = make(tmp_path)
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert str(err.value) == f"{path}: {message}"


@pytest.mark.parametrize("command", [["check-config"], ["check-config", "-c"], ["run", "-c"], ["status", "-c"]])
def test_every_command_says_one_line_and_exits_2_on_a_non_utf8_file(tmp_path: Path, command: list[str]) -> None:
    path = _latin1(tmp_path)
    extra = ["--sysfs-root", str(tmp_path)] if command[0] != "check-config" else []
    result = gpuwatch(*command, str(path), *extra)
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == f"gpuwatch: {path}: line 3: byte 0xb0 is not UTF-8 text (TOML files are UTF-8: save " \
                            "the file as UTF-8)\n"


def test_permission_denied_is_one_line_and_exit_2(tmp_path: Path) -> None:
    path = tmp_path / "gpuwatch.toml"
    path.write_text("interval_s = 1\n")
    path.chmod(0)
    prefix: list[str] = []
    if os.geteuid() == 0:  # root reads any file: without CAP_DAC_OVERRIDE the mode bits apply to it as to anyone
        if shutil.which("setpriv") is None:
            pytest.skip("running as root, and no setpriv to drop CAP_DAC_OVERRIDE with")
        prefix = ["setpriv", "--bounding-set=-dac_override,-dac_read_search"]
    result = subprocess.run([*prefix, GPUWATCH, "check-config", "-c", str(path)], capture_output=True, text=True,
                            timeout=60)
    assert (result.returncode, result.stderr) == (2, f"gpuwatch: {path}: cannot read: Permission denied\n")


@pytest.fixture
def processes(tmp_path: Path) -> Iterator[Processes]:
    with Processes(tmp_path / "logs") as started:
        yield started


REJECTED = "config reload rejected, still running the previous configuration"


def test_a_reload_of_an_unreadable_file_keeps_the_daemon_its_trainer_and_its_configuration(
        tmp_path: Path, processes: Processes) -> None:
    tree = FakeSysfsTree(tmp_path / "sys")
    card: FakeCard = tree.add_capture(capture("navi10-rx5700xt-sapphire"))
    tree.write(f"{card.hwmon_dir}/temp1_input", "60000\n")  # edge 60 °C
    script = tmp_path / "train.py"
    script.write_text("import time\nwhile True:\n    time.sleep(0.05)\n")
    trainer = (f'[[trainer]]\nname = "t"\ncommand = ["{sys.executable}", "{script}"]\ncwd = "{tmp_path}"\n'
               f'user = "{pwd.getpwuid(os.geteuid()).pw_name}"\nhang_timeout_s = 3600\ngrace_s = 5\n')
    head = 'interval_s = 0.2\n[fan]\nmode = "monitor-only"\n[http]\nenabled = false\n'
    daemon = DaemonProcess(processes, tmp_path, tree.root, head + "[thermal]\nedge_limit_c = 90\n" + trainer)
    started = daemon.wait_state(lambda d: d["trainers"][0]["phase"] == "running", "the trainer running")
    pid = started["trainers"][0]["pid"]
    good = daemon.config.read_bytes()

    def rejected(times: int) -> None:
        daemon.signal(signal.SIGHUP)
        wait_for(lambda: daemon.log().count(REJECTED) >= times, f"reload {times} rejected", 30,
                 detail=daemon.child.tail)

    # A Latin-1 ° in a comment (the case), then the file replaced by a directory, then gone.
    daemon.config.write_bytes(good.replace(b"[thermal]", "[thermal] # 50 \xb0C\n".encode("latin-1"), 1)
                              .replace(b"edge_limit_c = 90", b"edge_limit_c = 50"))
    rejected(1)
    assert "byte 0xb0 is not UTF-8 text" in daemon.log()
    daemon.config.unlink()
    daemon.config.mkdir()
    rejected(2)
    assert "is a directory, not a config file" in daemon.log()
    daemon.config.rmdir()
    rejected(3)
    assert "no such config file" in daemon.log()
    assert "Traceback" not in daemon.log()

    # Still running, the same trainer, the old limit in force (60 °C is not over 90).
    before = daemon.state()["daemon"]["ticks_total"]  # type: ignore[index]
    state = daemon.wait_state(lambda d: d["daemon"]["ticks_total"] > before, "ticks after the rejected reloads")
    assert state["trainers"][0]["phase"] == "running" and state["trainers"][0]["pid"] == pid
    assert state["gpus"][0]["temperatures"]["edge"]["limit_c"] == 90
    # A good file is taken again at the next reload.
    daemon.write_config(head + "[thermal]\nedge_limit_c = 50\n" + trainer)
    daemon.signal(signal.SIGHUP)
    daemon.wait_state(lambda d: d["gpus"][0]["temperatures"]["edge"]["limit_c"] == 50, "the new limit applied")
    assert daemon.stop() == 0
