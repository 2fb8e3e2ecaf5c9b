"""The CLI's torch-free argv builder and `gpuwatch train` (tests/test_layering.py checks the imports)."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from gpuwatch.train.argv import LaunchCommandError, build_launch_argv
from tests.support.cli import GPUWATCH
from tests.support.paths import REPO

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

    def fake_execvp(file, argv):
        raise Exec(file, argv)

    monkeypatch.setattr(cli.os, "execvp", fake_execvp)
    with pytest.raises(Exec) as execed:
        cli.main(["train", "--spawn", "--", "python", "train.py", "--epochs", "2"])
    expected = [sys.executable, *LAUNCH, "auto", "--spawn", "train.py", "--epochs", "2"]
    assert execed.value.args == (sys.executable, expected)


def test_autotune_options_are_passed_only_when_given(monkeypatch):
    argv = build_launch_argv("on", False, ["python", "t.py"], autotune=False, tune_cache="none")
    assert argv == [sys.executable, *LAUNCH, "on", "--conv2d-autotune", "off", "--conv2d-tune-cache", "none", "t.py"]
    from gpuwatch import cli

    def fake_execvp(file, argv):
        raise Exec(argv)

    monkeypatch.setattr(cli.os, "execvp", fake_execvp)
    with pytest.raises(Exec) as execed:
        cli.main(["train", "--conv2d-autotune", "off", "--conv2d-tune-cache", "/tmp/c", "--", "python", "t.py"])
    assert execed.value.args[0][-5:] == ["--conv2d-autotune", "off", "--conv2d-tune-cache", "/tmp/c", "t.py"]


def test_cli_train_takes_every_option_the_docs_list(monkeypatch):
    """docs/training-patches.md's option table and `gpuwatch train` agree; a bare --conv2d-fallback means on."""
    from gpuwatch import cli

    documented = re.findall(r"^\| `(--[\w-]+)` \|", (REPO / "docs/training-patches.md").read_text(), re.M)
    assert documented == ["--conv2d-fallback", "--conv2d-autotune", "--conv2d-tune-cache", "--spawn",
                          "--heartbeat-file", "--pause-file"]
    monkeypatch.setattr(cli.os, "execvp", lambda file, argv: (_ for _ in ()).throw(Exec(argv)))
    with pytest.raises(Exec) as execed:
        cli.main(["train", "--conv2d-autotune", "off", "--conv2d-tune-cache", "none", "--spawn",
                  "--heartbeat-file", "hb.json", "--pause-file", "p", "--conv2d-fallback", "--", "python", "train.py"])
    assert execed.value.args[0] == [sys.executable, *LAUNCH, "on", "--spawn", "--conv2d-autotune", "off",
                                    "--conv2d-tune-cache", "none", "--heartbeat-file", "hb.json", "--pause-file", "p",
                                    "train.py"]


@pytest.mark.parametrize("args, error", [
    (["--", "torchrun", "train.py"], "gpuwatch train: error: 'torchrun' is not a Python script"),
    (["--beat-file", "x", "--", "python", "train.py"], "gpuwatch train: error: unrecognized arguments: --beat-file"),
    (["--conv2d-fallback", "sometimes", "--", "python", "train.py"], "gpuwatch train: error: argument --conv2d-fallback"),
])
def test_cli_train_usage_errors_show_trains_usage(args, error):
    done = subprocess.run([GPUWATCH, "train", *args], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and done.stdout == ""
    usage, said = done.stderr.splitlines()
    assert usage.startswith("usage: gpuwatch train [--conv2d-fallback [auto|on|off]] [--conv2d-autotune on|off]")
    assert said.startswith(error)


class Exec(Exception):
    pass
