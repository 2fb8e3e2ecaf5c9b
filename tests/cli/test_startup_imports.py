"""What `gpuwatch --help` and the control commands import, by name, never by time (issue 52: each within 2x of
Python's own start; benchmarks/cli_latency.py measures them). The parser names every handler lazily
(cli/parser._lazy), so building it loads no command's module; `pause`, `resume`, `restart` and `stop` read the
config's runtime_dir alone (config/quick.py) and talk through the socket's client half (daemon/control_client.py).

The modules are those in ``sys.modules`` when the command ends (an atexit hook in the same process), without site
(``python -S``, the checkout on PYTHONPATH): a development venv's editable install loads pathlib at every start.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.paths import REPO
from tests.support.processes import Processes
from tests.support.stack import GPUWATCH
from tests.support.waiting import wait_for

# Never at start-up: the config's models, the daemon, the other commands' modules, the renderers, the GPUs.
HEAVY = ("pydantic", "psutil", "prometheus_client", "yaml", "bcrypt", "tomllib", "gpuwatch.config.base",
         "gpuwatch.config.file", "gpuwatch.cli.commands", "gpuwatch.cli.settings", "gpuwatch.cli.show",
         "gpuwatch.cli.status", "gpuwatch.cli.logs", "gpuwatch.cli.completion", "gpuwatch.cli.health.receipt",
         "gpuwatch.model", "gpuwatch.gpus", "gpuwatch.supervise", "gpuwatch.train", "gpuwatch.publish.view",
         "gpuwatch.daemon.control", "gpuwatch.daemon.lock", "gpuwatch.daemon.loop", "logging", "threading",
         "asyncio", "ssl", "http", "email", "subprocess", "shutil")
# Nor, for --help, what the handlers' helpers bring (dataclasses with inspect, typing).
HELP_ALSO = ("dataclasses", "inspect", "typing", "socket", "json")
# Nor, on a plain form's path (cli/quick_args.py: `gpuwatch --help`, `status`, `pause`, `resume`, `stop`),
# argparse and gpuwatch's parser, nor what the standard library's parsers and clients bring: re, enum (under
# socket and json), pathlib (with urllib.parse and ipaddress), gettext, locale, textwrap, shlex (re).
QUICK = ("argparse", "gpuwatch.cli.parser", "gpuwatch.cli.health.options", "pathlib", "urllib", "gettext", "locale",
         "textwrap", "shlex", "socket", "json")

SCRIPT = """
import atexit, sys
atexit.register(lambda: print("\\n".join(sorted(sys.modules)), file=open(sys.argv[1], "w")))
from gpuwatch.cli import main
sys.exit(main(sys.argv[2:]))
"""


def loaded(tmp_path: Path, *argv: str, site: bool = False, runtime: Path | None = None,
           columns: int = 80) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    out = tmp_path / "modules.txt"
    env = {**os.environ, "PYTHONPATH": str(REPO), "RUNTIME_DIRECTORY": str(runtime or tmp_path / "run"),
           "COLUMNS": str(columns)}
    flags = [] if site else ["-S"]  # with site: the third-party packages the models need
    done = subprocess.run([sys.executable, *flags, "-c", SCRIPT, str(out), *argv], capture_output=True, text=True,
                          timeout=120, env=env, cwd=tmp_path)
    return done, set(out.read_text().split())


def among(names: set[str], prefixes: tuple[str, ...]) -> set[str]:
    return {n for n in names if any(n == p or n.startswith(p + ".") for p in prefixes)}


@pytest.mark.parametrize("argv", [["status", "--help"], ["pause", "--help"], ["train", "--help"]], ids=" ".join)
def test_help_builds_the_parser_alone(tmp_path: Path, argv: list[str]) -> None:
    done, names = loaded(tmp_path, *argv)
    assert done.returncode == 0 and "usage: gpuwatch" in done.stdout, done.stderr
    assert among(names, HEAVY + HELP_ALSO) == set()


@pytest.mark.parametrize("argv", [["--help"], ["-h"], ["--version"]], ids=" ".join)
def test_gpuwatch_help_builds_no_parser(tmp_path: Path, argv: list[str]) -> None:
    """`gpuwatch --help` prints the shipped help (cli/help.txt, tests/cli/test_quick_args.py)."""
    done, names = loaded(tmp_path, *argv, columns=100)
    assert done.returncode == 0 and ("usage: gpuwatch" in done.stdout or argv == ["--version"]), done.stderr
    assert among(names, HEAVY + HELP_ALSO + QUICK + ("re", "enum", "collections")) == set()
    assert {n for n in names if n.startswith("gpuwatch")} == {"gpuwatch", "gpuwatch.cli", "gpuwatch.cli.quick_args"}


@pytest.mark.parametrize("verb", ["pause", "resume", "restart", "stop"])
def test_a_control_command_loads_the_socket_client_alone(tmp_path: Path, verb: str) -> None:
    config = tmp_path / "gpuwatch.toml"
    config.write_text(f'runtime_dir = "{tmp_path / "run"}"\n[http]\nenabled = false\n')
    (tmp_path / "run").mkdir(mode=0o755)
    done, names = loaded(tmp_path, verb, "-c", str(config), "job")
    assert (done.returncode, done.stderr) == (1, f"gpuwatch: the daemon is not running (no control socket at "
                                                 f"{tmp_path / 'run' / 'control.sock'})\n")
    assert "gpuwatch.daemon.control_client" in names
    # Nor the attach protocol's dataclasses (with inspect): gpuwatch/connect.py connects; nor typing (cli/text.py).
    assert among(names, (*HEAVY, *QUICK, "gpuwatch.attach", "dataclasses", "inspect", "typing", "re", "enum")) == set()


def test_a_config_the_quick_read_cannot_take_is_loaded_whole(tmp_path: Path) -> None:
    """The fallback: the models load the file and say what is wrong with it, as before (exit 2)."""
    config = tmp_path / "gpuwatch.toml"
    config.write_text("runtime_dir = 5\n")
    done, names = loaded(tmp_path, "pause", "-c", str(config), site=True)
    assert done.returncode == 2 and "runtime_dir = 5" in done.stderr, done.stderr
    assert "pydantic" in names


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A simulated daemon started with $RUNTIME_DIRECTORY (its config names no runtime_dir): it publishes beside it
    (``<dir>-simulate``, issue 50), where a plain client finds it; yields $RUNTIME_DIRECTORY."""
    tmp = tmp_path_factory.mktemp("startup-imports")
    runtime, config = tmp / "run", tmp / "gpuwatch.toml"
    config.write_text(f'interval_s = 5.0\n[http]\nenabled = false\n'
                      f'[simulate]\nenabled = true\ngpus = 2\ntree_dir = "{tmp / "tree"}"\n')
    with pytest.MonkeyPatch.context() as patch, Processes(tmp / "logs") as processes:
        patch.setenv("RUNTIME_DIRECTORY", str(runtime))
        started = processes.start("gpuwatch", [*GPUWATCH, "run", "-c", str(config)])
        state = tmp / "run-simulate" / "state.json"
        wait_for(lambda: json.loads(state.read_text()).get("daemon"), "the daemon's first state",
                 60, ignore=(OSError, ValueError), detail=started.tail)
        yield runtime


# Nor, on status's plain path, model's dataclasses or what creating them takes: the renderers read the light view
# of the document (publish/light_view.py), and `--gpu` alone reads a slot's spelling (config/slots.py: re).
LIGHT = ("gpuwatch.publish.view", "dataclasses", "inspect", "typing", "enum", "re", "signal", "gpuwatch.config.slots")


@pytest.mark.parametrize("argv", [[], ["--json"], ["--processes"], ["--gpu", "0"]], ids=repr)
def test_status_of_a_running_daemon_loads_no_model(daemon: Path, tmp_path: Path, argv: list[str]) -> None:
    """The daemon's fresh document, shown without the config's models, the GPUs' modules or model's dataclasses
    (cli/status_quick.py); `--json` takes json (with re and enum), `--gpu` re."""
    done, names = loaded(tmp_path, "status", *argv, runtime=daemon)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    assert ("daemon running (pid" in done.stdout) or ('"daemon"' in done.stdout), done.stdout
    shown = ("gpuwatch.cli.show", "gpuwatch.cli.status")
    quick = tuple(n for n in HEAVY + QUICK if n not in shown and (n != "json" or "--json" not in argv))
    taken = {"--json": ("enum", "re"), "--gpu": ("enum", "re", "gpuwatch.config.slots")}.get(next(iter(argv), ""), ())
    light = tuple(n for n in LIGHT if n not in taken)
    assert among(names, quick + light) == set()
    if "--gpu" not in argv:  # what it loads of gpuwatch: the quick reads, the decoder, the renderers
        table = {"gpuwatch.cli.process_table"} if "--processes" in argv else set()
        assert {n for n in names if n.startswith("gpuwatch")} - table == {
            "gpuwatch", "gpuwatch.cli", "gpuwatch.cli.quick_args", "gpuwatch.cli.status_quick", "gpuwatch.config",
            "gpuwatch.config.quick", "gpuwatch.config.runtime", "gpuwatch.safefs", "gpuwatch.publish",
            "gpuwatch.publish.state", "gpuwatch.publish.decode", "gpuwatch.publish.light_view", "gpuwatch.derived",
            "gpuwatch.cli.show", "gpuwatch.cli.status", "gpuwatch.cli.text", "gpuwatch.cli.gpu_block",
            "gpuwatch.cli.health_lines", "gpuwatch.cli.trainer_rows", "gpuwatch.cli.fit"}


def test_status_without_a_daemon_loads_the_config(tmp_path: Path) -> None:
    """No daemon: the handler of cli/commands.py, which reads the GPUs the whole config means."""
    (tmp_path / "sys").mkdir()
    done, names = loaded(tmp_path, "status", "--sysfs-root", str(tmp_path / "sys"), site=True)
    assert "gpuwatch daemon is not running" in done.stdout, done.stdout + done.stderr
    assert {"pydantic", "gpuwatch.cli.commands"} <= names


def test_a_usage_error_of_a_plain_status_is_said_with_its_usage(daemon: Path, tmp_path: Path) -> None:
    """`status --gpu 99` is read without argparse; the GPU it names is not there: the parser is built for the
    message (cli/parser.command_parser), exit 2, as through the parser."""
    done, names = loaded(tmp_path, "status", "--gpu", "99", runtime=daemon)
    assert done.returncode == 2 and "usage: gpuwatch status" in done.stderr, done.stderr
    assert "error: --gpu 99: no GPU with index 99 here" in done.stderr and "Traceback" not in done.stderr
