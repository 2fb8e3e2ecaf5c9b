"""The loader `gpuwatch run` starts with and every SIGHUP re-runs (cli.settings.load_daemon_config): the command
line wins over the file (issue 40 point 2), and the start's trainer checks reject a reloaded file whole (issue 31
point 9)."""

from __future__ import annotations

import os
import pwd
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuwatch.cli.parser import build_parser
from gpuwatch.cli.settings import load_daemon_config
from gpuwatch.config.base import ConfigError
from gpuwatch.sim.tree import FakeSysfsTree
from tests.support.daemon_process import DaemonProcess
from tests.support.processes import Processes
from tests.support.trees import capture
from tests.support.waiting import wait_for

ME = pwd.getpwuid(os.geteuid()).pw_name


def _load(tmp_path: Path, toml: str, *argv: str):  # type: ignore[no-untyped-def]
    path = tmp_path / "gpuwatch.toml"
    path.write_text(f'runtime_dir = "{tmp_path / "run"}"\n{toml}')
    return load_daemon_config(build_parser().parse_args(["run", "-c", str(path), *argv]))


def test_the_command_line_wins_over_the_file(tmp_path: Path) -> None:
    toml = ('sysfs_root = "/from/the/file"\nproc_root = "/from/the/file"\n[fan]\nmode = "curve"\n'
            '[power]\nmode = "govern"\n[simulate]\nenabled = false\ngpus = 3\n')
    config = _load(tmp_path, toml, "--sysfs-root", "/cli/sys", "--proc-root", "/cli/proc", "--dry-run",
                   "--simulate", "2")
    assert (config.sysfs_root, config.proc_root) == (Path("/cli/sys"), Path("/cli/proc"))
    assert (config.fan.mode, config.power.mode) == ("dry-run", "dry-run")
    assert config.simulate.enabled and config.simulate.gpus == 2
    # --simulate without N: the file's count, switched on.
    assert _load(tmp_path, toml, "--simulate").simulate.gpus == 3
    # Nothing on the command line: the file's values.
    plain = _load(tmp_path, toml)
    assert (plain.sysfs_root, plain.fan.mode, plain.simulate.enabled) == (Path("/from/the/file"), "curve", False)


def _trainer(tmp: Path, **keys: str) -> str:
    script = tmp / "train.py"
    script.write_text("import time\nwhile True:\n    time.sleep(0.05)\n")
    settings = {"command": f'["{sys.executable}", "{script}"]', "cwd": f'"{tmp}"', "user": f'"{ME}"', **keys}
    return '[[trainer]]\nname = "t"\nhang_timeout_s = 3600\ngrace_s = 5\n' + "".join(
        f"{key} = {value}\n" for key, value in settings.items())


def test_the_loader_applies_the_starts_trainer_checks(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        _load(tmp_path, _trainer(tmp_path, command=f'["{tmp_path}/gone.py"]', cwd=f'"{tmp_path}/nowhere"'))
    assert str(err.value).splitlines()[1:] == [
        f"  trainer 't': cwd = '{tmp_path}/nowhere': no such directory",
        f"  trainer 't': command[0] = '{tmp_path}/gone.py': no such file",
    ]


@pytest.fixture
def processes(tmp_path: Path) -> Iterator[Processes]:
    with Processes(tmp_path / "logs") as started:
        yield started


def test_a_reload_refuses_a_trainer_the_start_refuses_and_keeps_the_whole_running_file(
        tmp_path: Path, processes: Processes) -> None:
    """Issue 31 point 9: the bad trainer used to be kept "until a restart", and that restart then failed with the
    fans on the firmware. Now the file is rejected whole: not even its good changes (the edge limit) apply."""
    tree = FakeSysfsTree(tmp_path / "sys")
    card = tree.add_capture(capture("navi10-rx5700xt-sapphire"))
    tree.write(f"{card.hwmon_dir}/temp1_input", "60000\n")
    head = 'interval_s = 0.2\n[fan]\nmode = "monitor-only"\n[http]\nenabled = false\n'
    daemon = DaemonProcess(processes, tmp_path, tree.root, head + "[thermal]\nedge_limit_c = 90\n" + _trainer(tmp_path))
    running = daemon.wait_state(lambda d: d["trainers"][0]["phase"] == "running", "the trainer running")
    pid = running["trainers"][0]["pid"]

    for bad in ({"command": '["no-such-program-here"]'}, {"cwd": f'"{tmp_path}/nowhere"'},
                {"user": '"no-such-user-here"'}):
        before = daemon.log().count("config reload rejected")
        daemon.write_config(head + "[thermal]\nedge_limit_c = 50\n" + _trainer(tmp_path, **bad))
        daemon.signal(signal.SIGHUP)
        wait_for(lambda before=before: daemon.log().count("config reload rejected") > before,  # type: ignore[misc]
                 f"the reload with {bad} rejected", 30, detail=daemon.child.tail)
        assert "the trainers cannot be started (1 problem(s))" in daemon.log()
    assert "kept until a restart" not in daemon.log()
    state = daemon.wait_state(lambda d: d["daemon"]["ticks_total"] > 0, "a state")
    assert state["gpus"][0]["temperatures"]["edge"]["limit_c"] == 90  # nothing of the rejected files applied
    assert state["trainers"][0]["phase"] == "running" and state["trainers"][0]["pid"] == pid
    assert daemon.stop() == 0


def test_a_reload_under_simulate_lists_only_what_the_file_changed(tmp_path: Path, processes: Processes) -> None:
    """Issue 32 point 9: the running config is the effective one (the simulator's tree as sysfs_root and proc_root,
    amdgpu as the backend); the re-read file was compared without that, so every reload under --simulate listed
    sysfs_root, proc_root and backend as "kept until a restart" though nobody changed them."""
    from tests.support.stack import GPUWATCH

    config = tmp_path / "gpuwatch.toml"
    head = f'runtime_dir = "{tmp_path / "run"}"\ninterval_s = 0.2\n[http]\nenabled = false\n'
    config.write_text(head)
    child = processes.start("gpuwatch", [*GPUWATCH, "run", "-c", str(config), "--simulate"])
    wait_for((tmp_path / "run" / "state.json").exists, "the first tick", 60, detail=child.tail)
    child.process.send_signal(signal.SIGHUP)
    wait_for(lambda: "config reloaded" in child.tail(20000), "the first reload", 30, detail=child.tail)
    config.write_text(head + "[thermal]\nedge_limit_c = 80\n[fan]\nfloor_percent = 60\n")
    child.process.send_signal(signal.SIGHUP)
    wait_for(lambda: child.tail(20000).count("config reloaded") == 2, "the second reload", 30, detail=child.tail)
    log = child.tail(20000)
    assert "no live setting changed" in log
    assert "applied thermal (" in log and "fan (the fan controller" in log
    assert "kept until a restart" not in log, log


# Every section that holds slots, each with a slot a start refuses: not a slot, a function 8, one GPU twice, and a
# table whose own settings contradict each other (power.gpus' margins).
BAD_SLOT_TABLES = {
    "power.gpus not a slot": '[power.gpus."zz:00.0"]\nfloor_percent = 70\n',
    "power.gpus function 8": '[power.gpus."0000:0b:00.8"]\nfloor_percent = 70\n',
    "power.gpus twice": '[power.gpus."0b:00.0"]\nfloor_percent = 70\n[power.gpus."0000:0b:00.0"]\nfloor_percent = 80\n',
    "power.gpus margins": '[power.gpus."0000:0b:00.0"]\nhold_margin_c = 9\n',
    "power.gpus bad key": '[power.gpus."0000:0b:00.0"]\nno_such_key = 1\n',
    "fan.gpus not a slot": '[fan.gpus."zz:00.0"]\nfloor_percent = 40\n',
    "fan.gpus twice": '[fan.gpus."0b:00.0"]\nfloor_percent = 40\n[fan.gpus."0000:0B:00.0"]\nfloor_percent = 50\n',
}


@pytest.mark.parametrize("table", BAD_SLOT_TABLES.values(), ids=BAD_SLOT_TABLES.keys())
def test_a_slot_table_a_start_refuses_is_refused_by_check_config(tmp_path: Path, table: str) -> None:
    with pytest.raises(ConfigError):
        _load(tmp_path, table)


def test_a_reload_refuses_every_slot_table_a_start_refuses(tmp_path: Path, processes: Processes) -> None:
    """Issue 46 (a regression of issue 31 points 1 and 9): a SIGHUP with a bad ``[power.gpus]`` slot was taken.
    The reload runs the start's checks and rejects the file whole: the edge limit of the same file never applies."""
    tree = FakeSysfsTree(tmp_path / "sys")
    card = tree.add_capture(capture("navi10-rx5700xt-sapphire"))
    tree.write(f"{card.hwmon_dir}/temp1_input", "60000\n")
    head = 'interval_s = 0.2\n[fan]\nmode = "monitor-only"\n[http]\nenabled = false\n'
    daemon = DaemonProcess(processes, tmp_path, tree.root, head + "[thermal]\nedge_limit_c = 90\n")
    daemon.wait_state(lambda d: d["daemon"]["ticks_total"] > 0, "the first tick")
    for name, table in BAD_SLOT_TABLES.items():
        before = daemon.log().count("config reload rejected")
        daemon.write_config(head + "[thermal]\nedge_limit_c = 50\n" + table)
        daemon.signal(signal.SIGHUP)
        wait_for(lambda before=before: daemon.log().count("config reload rejected") > before,  # type: ignore[misc]
                 f"the reload with {name} rejected", 30, detail=daemon.child.tail)
    assert "config reloaded" not in daemon.log()
    ticks = daemon.wait_state(lambda d: True, "a state")["daemon"]["ticks_total"]
    state = daemon.wait_state(lambda d: d["daemon"]["ticks_total"] > ticks, "a later tick")
    assert state["gpus"][0]["temperatures"]["edge"]["limit_c"] == 90  # nothing of the rejected files applied
    assert daemon.stop() == 0
