"""The CLI's torch-free argv builder, and the rule that only gpuwatch.train/launch import torch."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from gpuwatch.launch_argv import LaunchCommandError, build_launch_argv

PACKAGE = Path(__file__).resolve().parents[2] / "gpuwatch"
LAUNCH = ["-m", "gpuwatch.launch", "--conv2d-fallback"]


def test_bare_python_becomes_this_interpreter():
    argv = build_launch_argv("auto", False, ["python", "train.py", "--epochs", "3"])
    assert argv == [sys.executable, *LAUNCH, "auto", "train.py", "--epochs", "3"]


def test_spawn_module_and_interpreter_flags():
    argv = build_launch_argv("on", True, ["python3", "-u", "-X", "dev", "-m", "pkg.train", "-m", "x"])
    assert argv == [sys.executable, "-u", "-X", "dev", *LAUNCH, "on", "--spawn", "-m", "pkg.train", "-m", "x"]


def test_interpreter_path_is_kept_and_script_without_python_accepted():
    argv = build_launch_argv("off", False, ["/opt/venv/bin/python3.11", "train.py"])
    assert argv[0] == "/opt/venv/bin/python3.11"
    assert build_launch_argv("off", False, ["train.py"])[-1] == "train.py"


@pytest.mark.parametrize(
    "command", [[], ["python"], ["python", "-c", "print(1)"], ["python", "-m"], ["torchrun", "train.py"]]
)
def test_rejects_commands_it_cannot_launch(command):
    with pytest.raises(LaunchCommandError):
        build_launch_argv("auto", False, command)


def test_rejects_unknown_fallback_mode():
    with pytest.raises(LaunchCommandError):
        build_launch_argv("sometimes", False, ["python", "train.py"])


def test_argv_builder_does_not_import_torch():
    code = "import sys, gpuwatch.launch_argv, gpuwatch.heartbeat; sys.exit('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


def test_only_the_train_package_and_launch_shim_import_torch():
    allowed = {PACKAGE / "launch.py"}
    offenders = []
    for path in PACKAGE.rglob("*.py"):
        if path in allowed or (PACKAGE / "train") in path.parents:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
            bad = [n for n in names if n.split(".")[0] == "torch" or n.startswith(("gpuwatch.train", "gpuwatch.launch."))]
            bad += [n for n in names if n == "gpuwatch.launch"]
            if bad:
                offenders.append(f"{path.relative_to(PACKAGE)}: {bad}")
    assert offenders == []
