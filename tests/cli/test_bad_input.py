"""Bad input through the real `gpuwatch` command: one clear line per problem and exit 2, never a traceback."""

from __future__ import annotations

import os
import pwd
import signal
from pathlib import Path

import pytest

from gpuwatch.sim.tree import FakeSysfsTree
from tests.support.cli import gpuwatch, gpuwatch_process
from tests.support.trees import capture
from tests.support.waiting import wait_for

ME = pwd.getpwuid(os.geteuid()).pw_name


def _config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "gpuwatch.toml"
    path.write_text(f'runtime_dir = "{tmp_path / "run"}"\n{text}\n[http]\nenabled = false\n')
    return path


def _problems(stderr: str) -> list[str]:
    """The indented problem lines under the one heading line."""
    heading, *lines = stderr.splitlines()
    assert heading.startswith("gpuwatch: ") and "Traceback" not in stderr
    return lines


def test_trainers_that_cannot_start_are_refused_by_check_config_and_run(tmp_path: Path) -> None:
    script = tmp_path / "train.sh"
    script.write_text("#!/bin/sh\n")
    script.chmod(0o644)
    config = _config(tmp_path, f"""
[[trainer]]
name = "missing"
command = ["no-such-program-here", "train.py"]
user = "{ME}"
[[trainer]]
name = "not-executable"
command = ["{script}"]
user = "{ME}"
[[trainer]]
name = "nowhere"
command = ["./train.sh"]
cwd = "{tmp_path / "absent"}"
user = "{ME}"
[[trainer]]
name = "stranger"
command = ["true"]
user = "no-such-user-here"
""")
    expected = [
        "  trainer 'missing': command[0] = 'no-such-program-here': not found on PATH (",
        f"  trainer 'not-executable': command[0] = '{script}': not executable (chmod +x, ",
        f"  trainer 'nowhere': cwd = '{tmp_path / 'absent'}': no such directory",
        "  trainer 'nowhere': command[0] = './train.sh': no such file",
        "  trainer 'stranger': no such user 'no-such-user-here'",
    ]
    for args in (("check-config", str(config)), ("run", "-c", str(config), "--simulate")):
        result = gpuwatch(*args)
        assert result.returncode == 2, result.stderr
        lines = _problems(result.stderr)
        assert len(lines) == len(expected), lines
        assert all(line.startswith(e) for line, e in zip(lines, expected, strict=True)), lines
    assert not (tmp_path / "run").exists()  # the daemon never started


@pytest.mark.skipif(os.geteuid() != 0, reason="the rule is the root daemon's")
def test_a_root_daemon_needs_user_for_every_trainer(tmp_path: Path) -> None:
    config = _config(tmp_path, '[[trainer]]\nname = "t"\ncommand = ["true"]\n')
    for args in (("check-config", str(config)), ("run", "-c", str(config), "--simulate")):
        result = gpuwatch(*args)
        assert result.returncode == 2
        assert _problems(result.stderr) == [
            '  trainer \'t\': the daemon runs as root: set user = "..." for this trainer '
            '(user = "root" if it really must run as root)'
        ]


def test_a_fan_table_that_names_no_pci_slot_is_an_error(tmp_path: Path) -> None:
    config = _config(tmp_path, '[fan.gpus."bogus"]\nfloor_percent = 60\n[fan.gpus."28:00.8"]\nfloor_percent = 60\n')
    result = gpuwatch("check-config", str(config))
    assert result.returncode == 2
    assert _problems(result.stderr) == [
        "  fan.gpus.\"bogus\" = 'bogus': 'bogus' is not a PCI slot (domain:bus:device.function, like 0000:28:00.0; "
        "see gpuwatch sensors)",
        "  fan.gpus.\"28:00.8\" = '28:00.8': '28:00.8': function 8 is not a PCI function number (0 to 7)",
    ]


def test_a_duplicated_trainer_name_is_one_line(tmp_path: Path) -> None:
    trainer = f'[[trainer]]\nname = "yolo"\ncommand = ["true"]\nuser = "{ME}"\n'
    result = gpuwatch("check-config", str(_config(tmp_path, trainer * 2)))
    assert result.returncode == 2
    assert _problems(result.stderr) == ["  trainer: trainer name 'yolo' is used twice; names must be unique"]


def test_a_fan_table_for_a_gpu_that_is_not_here_is_a_warning_at_start(tmp_path: Path,
                                                                       fake_sysfs: FakeSysfsTree) -> None:
    fake_sysfs.add_capture(capture("navi21-rx6900xt-sapphire-nitro"), card="card0", pci_slot="0000:03:00.0")
    config = _config(tmp_path, f'sysfs_root = "{fake_sysfs.root}"\n[fan]\nmode = "monitor-only"\n'
                               '[fan.gpus."0000:99:00.0"]\nfloor_percent = 60\n')
    daemon = gpuwatch_process("run", "-c", str(config))
    try:
        wait_for((tmp_path / "run/state.json").exists, "the first tick", 30)
    finally:
        daemon.send_signal(signal.SIGTERM)
        _, err = daemon.communicate(timeout=30)
    assert daemon.returncode == 0
    assert ('WARNING gpuwatch: [fan.gpus."0000:99:00.0"]: no such GPU on this machine (0000:03:00.0): its settings '
            "apply to nothing") in err


def test_curve_for_a_gpu_says_what_it_shows(tmp_path: Path, fake_sysfs: FakeSysfsTree) -> None:
    fake_sysfs.add_capture(capture("navi21-rx6900xt-sapphire-nitro"), card="card0", pci_slot="0000:03:00.0")
    config = _config(tmp_path, f'sysfs_root = "{fake_sysfs.root}"\n[fan.gpus."0000:30:00.0"]\nfloor_percent = 70\n')
    for same in ("03:00.0", "0", "card0"):  # lspci's slot, the index, the DRM card: the one GPU here
        short = gpuwatch("curve", "-c", str(config), "--gpu", same)
        assert short.returncode == 0 and short.stdout.startswith("# GPU 0000:03:00.0: no [fan.gpus"), short.stderr
    bad = gpuwatch("curve", "-c", str(config), "--gpu", "1")
    assert (bad.returncode, bad.stdout) == (2, "")
    assert bad.stderr == "gpuwatch curve: --gpu 1: no GPU with index 1 here (index, slot, card: 0 0000:03:00.0 card0)\n"
    unknown = gpuwatch("curve", "-c", str(config), "--gpu", "0000:99:00.0")
    assert (unknown.returncode, unknown.stdout) == (2, "")
    assert unknown.stderr == ('gpuwatch curve: no amdgpu GPU 0000:99:00.0 here (0 0000:03:00.0 card0) and no '
                              '[fan.gpus."0000:99:00.0"] in the config (0000:30:00.0)\n')
    present = gpuwatch("curve", "-c", str(config), "--gpu", "0000:03:00.0")
    assert present.returncode == 0
    assert present.stdout.startswith('# GPU 0000:03:00.0: no [fan.gpus."0000:03:00.0"] overrides, it follows the '
                                     "global curve\nfan curve (sensor auto, floor 50 %")
    configured = gpuwatch("curve", "-c", str(config), "--gpu", "0000:30:00.0")
    assert configured.returncode == 0 and configured.stdout.startswith("fan curve (sensor auto, floor 70 %")


def test_control_errors_have_one_prefix(tmp_path: Path) -> None:
    result = gpuwatch("pause", "-c", str(_config(tmp_path, "")))
    assert result.returncode == 1
    assert result.stderr.startswith("gpuwatch: the daemon is not running (no control socket at ")
