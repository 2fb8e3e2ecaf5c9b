"""The CLI's torch-free argv builder and `gpuwatch train` (tests/test_layering.py checks the imports)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from gpuwatch.train.argv import LaunchCommandError, build_launch_argv

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
    code = "import sys, gpuwatch.train.argv, gpuwatch.heartbeat; sys.exit('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


def test_cli_train_execs_the_launcher(monkeypatch):
    from gpuwatch import cli

    class Exec(Exception):
        pass

    def fake_execvp(file, argv):
        raise Exec(file, argv)

    monkeypatch.setattr(cli.os, "execvp", fake_execvp)
    with pytest.raises(Exec) as execed:
        cli.main(["train", "--spawn", "--", "python", "train.py", "--epochs", "2"])
    expected = [sys.executable, *LAUNCH, "auto", "--spawn", "train.py", "--epochs", "2"]
    assert execed.value.args == (sys.executable, expected)
    assert cli.main(["train", "--", "torchrun", "train.py"]) == 2


def test_autotune_options_are_passed_only_when_given(monkeypatch):
    argv = build_launch_argv("on", False, ["python", "t.py"], autotune=False, tune_cache="none")
    assert argv == [sys.executable, *LAUNCH, "on", "--conv2d-autotune", "off", "--conv2d-tune-cache", "none", "t.py"]
    from gpuwatch import cli

    class Exec(Exception):
        pass

    def fake_execvp(file, argv):
        raise Exec(argv)

    monkeypatch.setattr(cli.os, "execvp", fake_execvp)
    with pytest.raises(Exec) as execed:
        cli.main(["train", "--conv2d-autotune", "off", "--conv2d-tune-cache", "/tmp/c", "--", "python", "t.py"])
    assert execed.value.args[0][-5:] == ["--conv2d-autotune", "off", "--conv2d-tune-cache", "/tmp/c", "t.py"]
