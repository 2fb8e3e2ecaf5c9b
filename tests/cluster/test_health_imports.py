"""What `gpuwatch health`'s fast path imports, pinned by name (issue 34: a new process on every check of every node,
whose own time is almost all imports; docs/cluster.md). Never by time: ``-X importtime`` lists every module the
process imports, and what Python's own start imports in the same environment (``-c pass``) is taken off.

Against a real (simulated) daemon, so the answer is its published verdict: the fast path really was taken.

Also without site (``python -S``, the checkout on PYTHONPATH): a development venv's editable install has a finder
that imports pathlib at every start, so there ``-c pass`` has pathlib already and its absence would be taken off
unseen; a normal install (the benchmark's wheel) has no such finder, and ``-S`` shows what it sees.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.cli import GPUWATCH as CONSOLE_SCRIPT
from tests.support.paths import REPO
from tests.support.processes import Processes
from tests.support.stack import GPUWATCH
from tests.support.waiting import wait_for

# The fast path's whole share of gpuwatch: the command, its renderer, the verdict's vocabulary, the staleness rule
# and where the files are. A new import here is a cost on every check: measure it (benchmarks/health_latency.py).
FAST_PATH = {"gpuwatch", "gpuwatch.cli", "gpuwatch.cli.health", "gpuwatch.cli.health.render",
             "gpuwatch.config", "gpuwatch.config.quick", "gpuwatch.config.runtime", "gpuwatch.publish",
             "gpuwatch.publish.health_codes", "gpuwatch.publish.state",
             "gpuwatch.publish.decode",
             "gpuwatch.cli.quick_args",  # the options' table and its reader (os, sys only)
             "gpuwatch.safefs"}  # safefs: the runtime directory trusted (os, stat, errno only)

# Never on the fast path (a name covers its submodules): the config's models, the daemon, the other commands,
# the GPUs, and the standard library's heavy parts it once took in (typing alone was a tenth of the check).
NEVER = ("pydantic", "psutil", "prometheus_client", "yaml", "bcrypt", "gpuwatch.model",
         "gpuwatch.config.base", "gpuwatch.config.file", "gpuwatch.daemon", "gpuwatch.gpus", "gpuwatch.cli.parser",
         "gpuwatch.cli.settings", "gpuwatch.cli.health.slurm", "asyncio", "ssl", "socket", "subprocess", "logging",
         "threading", "dataclasses", "inspect", "shutil", "ipaddress", "email", "http",
         # pathlib with urllib.parse under it (3-4 ms of the check): config/runtime.py's paths are str.
         "pathlib", "urllib",
         # issue 52: argparse (a plain check's options are read by cli/health's quick_args), json (the state file is
         # parsed by json's own C scanner: publish.state.parse), with re, enum, gettext and locale under them, and
         # collections (annotations only): each as costly as the rest of the check; the options' parent parser.
         "argparse", "json", "re", "enum", "gettext", "locale", "collections", "gpuwatch.cli.health.options",
         # a shared library to load (publish/decode.py checks finite numbers by comparison)
         "math")

# Never either, runtime_dir in the config or not: config/quick.py reads the top-level keys (tomllib brings typing
# and datetime, each as costly as the rest of the check's own imports); tomllib only for a form it does not take.
TOML = ("tomllib", "typing", "datetime")

INTERVAL_S = 5.0  # stale only after half a minute: a slow tick on a loaded machine still leaves the verdict fresh


def imported(argv: list[str], env: dict[str, str]) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    """The command's result and the modules it imported (``-X importtime``'s lines on stderr)."""
    done = subprocess.run([sys.executable, "-X", "importtime", *argv], capture_output=True, text=True, timeout=120,
                          env=env)
    names = {line.rsplit("|", 1)[1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}
    return done, names - {"imported package"}


def among(names: set[str], prefixes: tuple[str, ...]) -> set[str]:
    return {n for n in names if any(n == p or n.startswith(p + ".") for p in prefixes)}


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[str, str]]]:
    """A simulated daemon publishing in $RUNTIME_DIRECTORY (as the systemd unit's does), its config naming no
    runtime_dir; yields the runtime directory and the environment a check runs in."""
    tmp = tmp_path_factory.mktemp("health-imports")
    runtime = tmp / "run-simulate"  # a simulator publishes beside its $RUNTIME_DIRECTORY, never in it (issue 50)
    config = tmp / "gpuwatch.toml"
    config.write_text(f'interval_s = {INTERVAL_S}\n[http]\nenabled = false\n'
                      f'[simulate]\nenabled = true\ngpus = 2\ntree_dir = "{tmp / "tree"}"\n')
    env = {**os.environ, "RUNTIME_DIRECTORY": str(runtime)}
    with pytest.MonkeyPatch.context() as patch, Processes(tmp / "logs") as processes:
        patch.setenv("RUNTIME_DIRECTORY", str(tmp / "run"))
        started = processes.start("gpuwatch", [*GPUWATCH, "run", "-c", str(config)])
        wait_for(lambda: json.loads((runtime / "state.json").read_text()).get("health"), "the daemon's first verdict",
                 60, ignore=(OSError, ValueError), detail=started.tail)
        yield config, env


def without_site(env: dict[str, str]) -> dict[str, str]:
    """``env`` for ``python -S``: no site-packages, so the checkout itself on PYTHONPATH (the fast path needs no
    third-party package)."""
    return {**env, "PYTHONPATH": str(REPO)}


@pytest.mark.parametrize("fmt", ["nhc", "npd", "nagios", "json"])
@pytest.mark.parametrize("flags, command", [([], ["-m", "gpuwatch"]), ([], [CONSOLE_SCRIPT]),
                                            (["-S"], ["-m", "gpuwatch"])],
                         ids=["python -m", "console script", "python -S -m"])
def test_the_fast_path_imports_only_what_the_verdict_needs(daemon: tuple[Path, dict[str, str]], flags: list[str],
                                                           command: list[str], fmt: str) -> None:
    config, env = daemon
    env = without_site(env) if flags else env
    _, python = imported([*flags, "-c", "import runpy" if command[0] == "-m" else "pass"], env)  # -m: runpy's own
    done, names = imported([*flags, *command, "health", "-c", str(config), "--format", fmt], env)
    assert done.returncode == 0 and "healthy" in done.stdout, done.stdout + done.stderr[-2000:]
    ours = names - python
    assert {n for n in ours if n.split(".")[0] == "gpuwatch"} == FAST_PATH
    # --format json prints its object with json.dumps (and re and enum under it): that format alone.
    assert not among(ours, tuple(n for n in NEVER + TOML if fmt != "json" or n not in ("json", "re", "enum")))


def test_a_config_naming_runtime_dir_adds_nothing(daemon: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    config, env = daemon
    named = tmp_path / "named.toml"
    named.write_text(f'runtime_dir = "{env["RUNTIME_DIRECTORY"]}"\n' + config.read_text())
    env = without_site({k: v for k, v in env.items() if k != "RUNTIME_DIRECTORY"})  # the config alone says where
    _, python = imported(["-S", "-c", "import runpy"], env)  # what -m imports itself
    done, names = imported(["-S", "-m", "gpuwatch", "health", "-c", str(named), "--format", "npd"], env)
    assert (done.returncode, done.stdout) == (0, "gpuwatch: healthy\n"), done.stderr[-2000:]
    ours = names - python
    assert {n for n in ours if n.split(".")[0] == "gpuwatch"} == FAST_PATH
    assert not among(ours, NEVER + TOML)


@pytest.mark.parametrize("columns", [None, "60", "200", "0", "wide"])
def test_help_is_as_wide_as_shutil_would_make_it(monkeypatch: pytest.MonkeyPatch, columns: str | None) -> None:
    """cli/health/options.formatter gives argparse the width shutil.get_terminal_size() would, without shutil."""
    import shutil

    from gpuwatch.cli.health.options import formatter

    if columns is None:
        monkeypatch.delenv("COLUMNS", raising=False)
    else:
        monkeypatch.setenv("COLUMNS", columns)
    assert formatter("gpuwatch health")._width == shutil.get_terminal_size().columns - 2


@pytest.mark.parametrize("argv", [[], ["-c", "/etc/g.toml"], ["--config=/etc/g.toml", "--format", "npd"],
                                  ["--format=json", "--class", "thermal", "--slurm"], ["-c", "a", "-c", "b"],
                                  ["--sysfs-root", "/s", "--proc-root=/p", "--format", "nagios"], ["-c", ""]],
                         ids=repr)
def test_the_quick_options_are_argparse_s(argv: list[str]) -> None:
    """A plain check's options read without argparse (cli/health.quick_args) are what its parser gives."""
    import argparse

    from gpuwatch.cli.health import add_health_arguments, quick_args
    from gpuwatch.cli.health.options import common_options

    parser = argparse.ArgumentParser(prog="gpuwatch health", parents=[common_options(str)])
    add_health_arguments(parser)
    quick = quick_args(argv)
    expected = vars(parser.parse_args(argv))
    assert quick is not None and {name: getattr(quick, name) for name in expected} == expected


@pytest.mark.parametrize("argv", [["--help"], ["-h"], ["--form", "npd"], ["--format", "xml"], ["-c"], ["-c", "-x"],
                                  ["--class=nope"], ["-cfile"], ["--slurm=1"], ["extra"], ["--", "-c", "x"]],
                         ids=repr)
def test_anything_else_is_left_to_argparse(argv: list[str]) -> None:
    """Help, abbreviations, other spellings, bad or missing values: argparse parses them (and says what is wrong,
    exit 2), as before."""
    from gpuwatch.cli.health import quick_args

    assert quick_args(argv) is None
