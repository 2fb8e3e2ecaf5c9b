"""The user's script as process views and tracebacks show it under `gpuwatch train` (issue 50, item 13): the real
wrapper and launcher, the activated venv's python, the command line read back from /proc and by `ps`."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpuwatch.cli.process_table import fit_command
from gpuwatch.train.argv import BOOTSTRAP
from gpuwatch.train.process_view import user_command, user_frames
from tests.support.venvs import activated, make_venv, torch_site_packages
from tests.train.test_two_venvs import CLI, env_without_pythonpath

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

SCRIPT = """
import subprocess, sys, os
with open(sys.argv[1], "wb") as out:
    out.write(open("/proc/self/cmdline", "rb").read())
ps = subprocess.run(["ps", "-ww", "-o", "args=", "-p", str(os.getpid())], capture_output=True, text=True).stdout
with open(sys.argv[1] + ".ps", "w") as out:
    out.write(ps)

def inner():
    raise ValueError("the user's own error")

inner()
"""


@pytest.mark.parametrize("orig, target, shown", [
    (["/v/bin/python", BOOTSTRAP, "--conv2d-fallback", "auto", "t.py", "-x"], ["t.py", "-x"],
     ["/v/bin/python", "t.py", "-x"]),
    (["/v/bin/python", "-u", "-X", "dev", BOOTSTRAP, "--spawn", "-m", "pkg.main", "a"], ["-m", "pkg.main", "a"],
     ["/v/bin/python", "-u", "-X", "dev", "-m", "pkg.main", "a"]),
    (["python3", "-m", "gpuwatch.launch", "--conv2d-fallback", "on", "t.py"], ["t.py"], ["python3", "t.py"]),
    (["/usr/bin/pytest", "-q"], ["t.py"], None),  # launch.main called by other code: nothing to hide
])
def test_the_command_shown_is_the_users(orig: list[str], target: list[str], shown: list[str] | None) -> None:
    assert user_command(orig, target) == shown


def test_a_traceback_of_the_launcher_itself_is_kept_whole() -> None:
    try:
        raise RuntimeError("in gpuwatch")
    except RuntimeError as exc:
        tb = exc.__traceback__
    assert user_frames(tb) is tb  # this test's frame is not gpuwatch's: it is the first kept


@pytest.mark.parametrize("command, room, fitted", [
    ("python train.py", 40, "python train.py"),
    ("/home/alice/venv/bin/python /home/alice/exp/train.py --epochs 3", 40, "python train.py --epochs 3"),
    ("/home/alice/venv/bin/python /home/alice/exp/train.py --lr 0.1 --epochs 300 --batch 64", 24,
     "python train.py --lr 0.…"),
])
def test_the_process_table_keeps_the_script_name_when_cut(command: str, room: int, fitted: str) -> None:
    assert fit_command(command, room) == fitted and len(fitted) <= room


@pytest.mark.timeout(300)
def test_ps_shows_the_users_interpreter_and_script_and_tracebacks_start_in_it(tmp_path: Path) -> None:
    """`gpuwatch train -- python train.py` with a venv activated (its bin first on PATH): /proc/PID/cmdline and `ps`
    read `<venv>/bin/python train.py ARGS`, and the script's crash prints its own frames only."""
    python = make_venv(tmp_path / "venv", torch_site_packages())  # torch, no gpuwatch
    bin_dir = python.parent
    (tmp_path / "train.py").write_text(SCRIPT)
    env = activated(env_without_pythonpath(tmp_path), python)  # `source venv/bin/activate`
    done = subprocess.run([sys.executable, "-c", CLI, "train", "--no-attach", "--", "python", "train.py",
                           str(tmp_path / "cmdline"), "--epochs", "3"], capture_output=True, text=True, timeout=240,
                          cwd=tmp_path, env=env)
    assert done.returncode == 1, done.stderr
    words = [w for w in (tmp_path / "cmdline").read_bytes().split(b"\0") if w]
    assert words == [os.fsencode(bin_dir / "python"), b"train.py", os.fsencode(tmp_path / "cmdline"), b"--epochs",
                     b"3"]
    assert (tmp_path / "cmdline.ps").read_text().split() == [str(bin_dir / "python"), "train.py",
                                                             str(tmp_path / "cmdline"), "--epochs", "3"]
    lines = done.stderr.splitlines()
    start = lines.index("Traceback (most recent call last):")
    assert lines[start + 1].startswith('  File "train.py"'), done.stderr
    assert lines[-1] == "ValueError: the user's own error"
    for ours in ("bootstrap.py", "launch.py", "runpy"):
        assert ours not in done.stderr, done.stderr
