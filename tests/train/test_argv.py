"""The CLI's torch-free argv builder and `gpuwatch train` (tests/test_layering.py checks the imports)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from gpuwatch.train.argv import (
    BOOTSTRAP,
    INJECT_DIR,
    LaunchCommandError,
    build_launch_argv,
    build_train_command,
    injection_env,
    user_cache_dir,
)
from tests.support.cli import GPUWATCH
from tests.support.paths import REPO

LAUNCH = [BOOTSTRAP, "--conv2d-fallback"]


@pytest.fixture(autouse=True)
def venv_path(tmp_path, monkeypatch):
    """An activated venv: its bin folder first on PATH, with python and python3 in it (this interpreter)."""
    bin_dir = tmp_path / "venv" / "bin"
    bin_dir.mkdir(parents=True)
    for name in ("python", "python3"):
        (bin_dir / name).symlink_to(sys.executable)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', os.defpath)}")
    return bin_dir


def test_bare_python_is_the_one_on_the_callers_path(venv_path, tmp_path):
    argv = build_launch_argv("auto", False, ["python", "train.py", "--epochs", "3"])
    assert argv == [str(venv_path / "python"), *LAUNCH, "auto", "train.py", "--epochs", "3"]
    other = tmp_path / "other"
    other.mkdir()
    (other / "python").symlink_to(sys.executable)
    argv = build_launch_argv("auto", False, ["python", "train.py"], environ={"PATH": f"{other}:{venv_path}"})
    assert argv[0] == str(other / "python")  # the PATH given (the run's environment), first match


def test_a_python_on_no_path_entry_is_one_clear_error():
    with pytest.raises(LaunchCommandError, match="'python' is not on your PATH: give the interpreter as a path"):
        build_launch_argv("auto", False, ["python", "train.py"], environ={"PATH": "/nonexistent"})


def test_spawn_module_and_interpreter_flags(venv_path):
    argv = build_launch_argv("on", True, ["python3", "-u", "-X", "dev", "-m", "pkg.train", "-m", "x"])
    assert argv == [str(venv_path / "python3"), "-u", "-X", "dev", *LAUNCH, "on", "--spawn", "-m", "pkg.train", "-m",
                    "x"]


def test_interpreter_path_is_kept_and_script_without_python_accepted(venv_path):
    argv = build_launch_argv("off", False, ["/opt/venv/bin/python3.11", "train.py"])
    assert argv[0] == "/opt/venv/bin/python3.11"
    argv = build_launch_argv("off", False, ["train.py"])
    assert argv[0] == str(venv_path / "python3") and argv[-1] == "train.py"  # what `#!/usr/bin/env python3` runs


@pytest.mark.parametrize("version, torch, said", [
    ((3, 11), True, None),
    ((3, 13), True, None),
    ((3, 9), True, "gpuwatch train: /v/bin/python is Python 3.9: gpuwatch's launcher needs Python 3.11 or newer"),
    ((2, 7), False, "gpuwatch train: /v/bin/python is Python 2.7: gpuwatch's launcher needs Python 3.11 or newer"),
    ((3, 12), False, "gpuwatch train: /v/bin/python has no torch: install torch into that environment"),
])
def test_an_interpreter_that_cannot_run_the_launcher_is_one_line(version, torch, said):
    from gpuwatch.train.bootstrap import interpreter_problem

    problem = interpreter_problem(version, "/v/bin/python", torch)
    assert (problem is None) == (said is None) and (said is None or problem.startswith(said)), problem
    assert problem is None or "\n" not in problem


def test_the_bootstrap_parses_on_old_pythons():
    """An activated environment may hold any Python: the file compiles there, so the version check can speak."""
    import ast

    source = open(BOOTSTRAP).read()
    ast.parse(source, feature_version=(3, 4))  # no f-strings, no annotations, no walrus
    assert "\nfrom __future__ import annotations" not in source


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


def test_injection_env_puts_the_hook_first_and_keeps_the_users_choices():
    env = injection_env({"PYTHONPATH": f"/mine{os.pathsep}{INJECT_DIR}", "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "0"},
                        ["--conv2d-fallback", "on", "--heartbeat-file", "/a b/hb.json"])
    assert env["PYTHONPATH"] == f"{INJECT_DIR}{os.pathsep}/mine" and env["GPUWATCH_INJECT"] == "1"
    assert env["GPUWATCH_LAUNCH_OPTIONS"] == "--conv2d-fallback on --heartbeat-file '/a b/hb.json'"
    assert env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] == "0"  # the user's, kept
    assert injection_env({}, [])["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] == "1"
    assert injection_env({}, [])["PYTHONPATH"] == INJECT_DIR


def test_train_command_python_goes_through_the_launcher_anything_else_runs_injected(venv_path):
    argv, env = build_train_command("auto", True, ["python", "train.py"], {"X": "1", "PATH": str(venv_path)})
    assert argv == [str(venv_path / "python"), *LAUNCH, "auto", "--spawn", "train.py"]
    assert env == {"X": "1", "PATH": str(venv_path)}
    argv, env = build_train_command("on", False, ["torchrun", "--nproc-per-node", "2", "train.py"], {"X": "1"},
                                    autotune=False)
    assert argv == ["torchrun", "--nproc-per-node", "2", "train.py"] and env["X"] == "1"
    assert env["GPUWATCH_INJECT"] == "1"
    assert env["GPUWATCH_LAUNCH_OPTIONS"] == "--conv2d-fallback on --conv2d-autotune off"
    with pytest.raises(LaunchCommandError):
        build_train_command("auto", False, [], {})


def test_cli_train_execs_the_launcher_or_the_command(monkeypatch, venv_path):
    from gpuwatch import cli

    def fake_execvpe(file, argv, env):
        raise Exec(file, argv, env)

    monkeypatch.setattr(cli.os, "execvpe", fake_execvpe)
    with pytest.raises(Exec) as execed:
        cli.main(["train", "--no-attach", "--spawn", "--", "python", "train.py", "--epochs", "2"])
    python = str(venv_path / "python")
    expected = [python, *LAUNCH, "auto", "--spawn", "train.py", "--epochs", "2"]
    assert execed.value.args[:2] == (python, expected)
    with pytest.raises(Exec) as execed:
        cli.main(["train", "--no-attach", "--", "torchrun", "--nproc-per-node", "2", "train.py"])
    assert execed.value.args[:2] == ("torchrun", ["torchrun", "--nproc-per-node", "2", "train.py"])
    assert execed.value.args[2]["GPUWATCH_INJECT"] == "1"
    monkeypatch.undo()
    assert cli.main(["train", "--no-attach", "--", "no-such-program-gpuwatch"]) == 127


def test_autotune_options_are_passed_only_when_given(monkeypatch, venv_path):
    argv = build_launch_argv("on", False, ["python", "t.py"], autotune=False, tune_cache="none")
    assert argv == [str(venv_path / "python"), *LAUNCH, "on", "--conv2d-autotune", "off", "--conv2d-tune-cache", "none",
                    "t.py"]
    from gpuwatch import cli

    def fake_execvpe(file, argv, env):
        raise Exec(argv)

    monkeypatch.setattr(cli.os, "execvpe", fake_execvpe)
    with pytest.raises(Exec) as execed:
        cli.main(["train", "--no-attach", "--conv2d-autotune", "off", "--conv2d-tune-cache", "/tmp/c", "--", "python",
                  "t.py"])
    assert execed.value.args[0][-5:] == ["--conv2d-autotune", "off", "--conv2d-tune-cache", "/tmp/c", "t.py"]


def test_cli_train_takes_every_option_the_docs_list(monkeypatch, venv_path):
    """docs/training-patches.md's option table and `gpuwatch train` agree; a bare --conv2d-fallback means on."""
    from gpuwatch import cli

    documented = re.findall(r"^\| `(--[\w-]+)` \|", (REPO / "docs/training-patches.md").read_text(), re.M)
    assert documented == ["--conv2d-fallback", "--conv2d-autotune", "--conv2d-tune-cache", "--spawn",
                          "--heartbeat-file", "--pause-file"]
    monkeypatch.setattr(cli.os, "execvpe", lambda file, argv, env: (_ for _ in ()).throw(Exec(argv)))
    with pytest.raises(Exec) as execed:
        cli.main(["train", "--no-attach", "--conv2d-autotune", "off", "--conv2d-tune-cache", "none", "--spawn",
                  "--heartbeat-file", "hb.json", "--pause-file", "p", "--conv2d-fallback", "--", "python", "train.py"])
    assert execed.value.args[0] == [str(venv_path / "python"), *LAUNCH, "on", "--spawn", "--conv2d-autotune", "off",
                                    "--conv2d-tune-cache", "none", "--heartbeat-file", "hb.json", "--pause-file", "p",
                                    "train.py"]


@pytest.mark.parametrize("args, error", [
    (["--", "python", "-c", "print(1)"], "gpuwatch train: error: unsupported python option '-c'"),
    (["--"], "gpuwatch train: error: no training command given"),
    (["--beat-file", "x", "--", "python", "train.py"],
     "gpuwatch train: error: unrecognized arguments: --beat-file"),
    (["--conv2d-fallback", "sometimes", "--", "python", "train.py"],
     "gpuwatch train: error: argument --conv2d-fallback"),
])
def test_cli_train_usage_errors_show_trains_usage(args, error):
    done = subprocess.run([GPUWATCH, "train", *args], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and done.stdout == ""
    lines = done.stderr.splitlines()
    usage, said = lines[0], lines[-1]
    assert usage == "usage: gpuwatch train [--conv2d-fallback [auto|on|off]]"
    assert all(len(line) <= 80 for line in lines[:lines.index(said)]), lines  # issue 50 item 15: it was 330 wide
    assert said.startswith(error)


def test_the_user_cache_dir_follows_xdg_else_home(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert user_cache_dir() == str(tmp_path / "xdg" / "gpuwatch")
    monkeypatch.setenv("XDG_CACHE_HOME", "")  # empty counts as unset
    monkeypatch.setenv("HOME", str(tmp_path))
    assert user_cache_dir() == str(tmp_path / ".cache" / "gpuwatch")


class Exec(Exception):
    pass
