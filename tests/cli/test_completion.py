"""Issue 32 point 12: shell completion for bash, zsh and fish, generated from the parser and shipped with the
package; bash's real completion machinery (`complete -p`, the function it calls) is driven here, fish's
`complete -C` too, zsh's script is syntax-checked. ``GPUWATCH_UPDATE_COMPLETIONS=1`` rewrites the shipped files."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gpuwatch.cli.completion import FILES, SHELLS, read_commands, script, shipped
from gpuwatch.cli.parser import build_parser
from tests.support.cli import gpuwatch

SHIPPED = Path(__file__).resolve().parents[2] / "gpuwatch/cli/completions"


@pytest.mark.parametrize("shell", SHELLS)
def test_the_shipped_scripts_are_what_the_parser_generates(shell: str) -> None:
    generated = script(shell, build_parser())
    if os.environ.get("GPUWATCH_UPDATE_COMPLETIONS"):
        (SHIPPED / FILES[shell]).write_text(generated)
    assert shipped(shell) == generated, f"regenerate: GPUWATCH_UPDATE_COMPLETIONS=1 pytest {__file__}"
    printed = gpuwatch("completion", shell)
    assert printed.returncode == 0 and printed.stdout == generated


def test_every_command_and_option_of_the_parser_is_completed() -> None:
    commands = {c.name: c for c in read_commands(build_parser())}
    assert {"status", "logs", "stop", "completion", "restore", "train"} <= set(commands)
    assert {"--gpu", "--json", "--watch", "--color", "--remote"} <= {
        flag for option in commands["status"].options for flag in option.flags}
    for shell in SHELLS:
        text = script(shell, build_parser())
        for name, command in commands.items():
            assert name in text
            for option in command.options:
                assert all(flag.lstrip("-") in text for flag in option.flags), (shell, name, option.flags)


def _bash(script_path: Path, line: str, cwd: Path, env: dict[str, str] | None = None) -> list[str]:
    """What bash's completion offers for ``line`` (the cursor at its end), through the function `complete -p` names."""
    words = line.split(" ")
    program = f"""
source {script_path}
spec=$(complete -p gpuwatch)
[[ "$spec" == "complete -o default -F _gpuwatch gpuwatch" ]] || {{ echo "bad spec: $spec" >&2; exit 3; }}
COMP_WORDS=({" ".join(f"'{w}'" for w in words)})
COMP_CWORD={len(words) - 1}
COMP_LINE='{line}'
COMP_POINT=${{#COMP_LINE}}
_gpuwatch gpuwatch '{words[-1]}' '{words[-2]}'
printf '%s\\n' "${{COMPREPLY[@]}}"
"""
    done = subprocess.run(["bash", "--norc", "--noprofile", "-c", program], capture_output=True, text=True,
                          timeout=60, cwd=cwd, env=env)
    assert done.returncode == 0, done.stderr
    return [w for w in done.stdout.splitlines() if w]


@pytest.mark.parametrize(("line", "expected"), [
    ("gpuwatch st", ["status", "stop"]),
    ("gpuwatch ", None),  # every command
    ("gpuwatch status --co", ["--config", "--color"]),
    ("gpuwatch status --color ", ["auto", "always", "never"]),
    ("gpuwatch sensors --json --g", ["--gpu"]),
    ("gpuwatch logs -", ["-h", "--help", "-c", "--config", "--sysfs-root", "--proc-root", "-n", "--lines", "-f",
                         "--follow"]),
    ("gpuwatch completion ", ["bash", "zsh", "fish"]),
    ("gpuwatch check-config gpu", ["gpuwatch.toml"]),  # its FILE
    ("gpuwatch train --conv2d-autotune ", ["on", "off"]),
    ("gpuwatch run -c gpu", ["gpuwatch.toml"]),  # a file
])
def test_bash_completes(tmp_path: Path, line: str, expected: list[str] | None) -> None:
    (tmp_path / "gpuwatch.toml").write_text("")
    offered = _bash(SHIPPED / FILES["bash"], line, tmp_path)
    if expected is None:
        assert offered[:3] == ["-h", "--help", "--version"]
        assert set(offered[3:]) == {c.name for c in read_commands(build_parser())}
    else:
        assert offered == expected


@pytest.fixture
def published(tmp_path: Path) -> tuple[dict[str, str], Any]:
    """A daemon's state file (the example: its trainers, two GPUs and a gone one) where `gpuwatch` looks
    (RUNTIME_DIRECTORY), and the venv's gpuwatch first on PATH: what the scripts ask at TAB time."""
    from gpuwatch.publish.document import to_document
    from gpuwatch.publish.state import write_state_file
    from tests.support.published import example_state

    run = tmp_path / "run"
    run.mkdir(mode=0o755)
    doc = to_document(example_state(tmp_path / "sys"), "daemon")
    write_state_file(run / "state.json", doc)
    venv_bin = str(Path(sys.executable).parent)
    return {**os.environ, "RUNTIME_DIRECTORY": str(run), "PATH": f"{venv_bin}:{os.environ['PATH']}",
            "HOME": str(tmp_path)}, doc


def test_bash_completes_run_names_and_pids_and_gpus(tmp_path: Path, published: tuple[dict[str, str], Any]) -> None:
    """Issue 50 item 14: `pause <TAB>` offers the runs (names, then pids), `--gpu <TAB>` the GPUs in every form."""
    env, doc = published
    names = [t["name"] for t in doc["trainers"]]
    pids = [str(t["pid"]) for t in doc["trainers"] if t.get("pid")]
    assert names and pids
    for verb in ("pause", "resume", "stop", "restart", "logs"):
        assert _bash(SHIPPED / FILES["bash"], f"gpuwatch {verb} ", tmp_path, env) == names + pids
    assert _bash(SHIPPED / FILES["bash"], f"gpuwatch stop {pids[0][:2]}", tmp_path, env) == [
        p for p in pids if p.startswith(pids[0][:2])]
    assert _bash(SHIPPED / FILES["bash"], "gpuwatch pause -", tmp_path, env) == ["-h", "--help", "-c", "--config"]
    gpus = doc["gpus"]
    every = [str(i) for i in range(len(gpus))] + [g["gpu_id"] for g in gpus] + [g["card"] for g in gpus]
    for line in ("gpuwatch status --gpu ", "gpuwatch curve --gpu ", "gpuwatch train --gpu "):
        assert _bash(SHIPPED / FILES["bash"], line, tmp_path, env) == every
    assert _bash(SHIPPED / FILES["bash"], "gpuwatch sensors --gpu card", tmp_path, env) == [g["card"] for g in gpus]


@pytest.mark.parametrize(("line", "expected"), [
    ("gpuwatch train --restart ", ["no", "on-failure"]),
    ("gpuwatch train --conv2d-fallback ", ["auto", "on", "off"]),
])
def test_bash_completes_the_values_of_restart_and_conv2d_fallback(tmp_path: Path, line: str,
                                                                 expected: list[str]) -> None:
    assert _bash(SHIPPED / FILES["bash"], line, tmp_path) == expected


def test_values_of_a_broken_setup_are_nothing_not_an_error(tmp_path: Path) -> None:
    """A TAB never prints a traceback: a state file that is garbage gives no words and exit 0."""
    run = tmp_path / "run"
    run.mkdir(mode=0o755)
    (run / "state.json").write_bytes(b"\xff{not json")
    for kind in ("runs", "gpus"):
        done = gpuwatch("completion", "--values", kind, env={**os.environ, "RUNTIME_DIRECTORY": str(run)})
        assert (done.returncode, done.stderr) == (0, ""), done


@pytest.mark.skipif(not shutil.which("zsh"), reason="zsh is not installed (apt-get install zsh)")
def test_zsh_script_is_valid_zsh_and_defines_the_function(tmp_path: Path) -> None:
    path = SHIPPED / FILES["zsh"]
    assert path.read_text().startswith("#compdef gpuwatch\n")
    checked = subprocess.run(["zsh", "-n", str(path)], capture_output=True, text=True, timeout=30)
    assert checked.returncode == 0, checked.stderr
    # Loaded as compinit loads it (autoload from $fpath): the function exists and its body parses.
    (tmp_path / "_gpuwatch").write_text(path.read_text())
    loaded = subprocess.run(["zsh", "-f", "-c", f"fpath=({tmp_path} $fpath); autoload -Uz _gpuwatch; "
                             "functions _gpuwatch >/dev/null && echo loaded"], capture_output=True, text=True,
                            timeout=30)
    assert loaded.stdout.strip() == "loaded", loaded.stderr


@pytest.mark.skipif(not shutil.which("fish"), reason="fish is not installed (apt-get install fish)")
@pytest.mark.parametrize(("line", "expected"), [
    ("gpuwatch sto", {"stop"}),
    ("gpuwatch status --col", {"--color"}),
    ("gpuwatch status --color ", {"auto", "always", "never"}),
    ("gpuwatch completion ", {"bash", "zsh", "fish"}),
])
def test_fish_completes(tmp_path: Path, line: str, expected: set[str]) -> None:
    path = SHIPPED / FILES["fish"]
    assert subprocess.run(["fish", "-n", str(path)], capture_output=True, timeout=30).returncode == 0
    done = subprocess.run(["fish", "--no-config", "-c", f"source {path}; complete -C '{line}'"],
                          capture_output=True, text=True, timeout=30, env={**os.environ, "HOME": str(tmp_path)})
    assert done.returncode == 0, done.stderr
    assert {row.split("\t")[0] for row in done.stdout.splitlines()} == expected


@pytest.mark.skipif(not shutil.which("fish"), reason="fish is not installed (apt-get install fish)")
def test_fish_completes_run_names_and_gpus(tmp_path: Path, published: tuple[dict[str, str], Any]) -> None:
    env, doc = published
    path = SHIPPED / FILES["fish"]

    def offered(line: str) -> set[str]:
        done = subprocess.run(["fish", "--no-config", "-c", f"source {path}; complete -C '{line}'"],
                              capture_output=True, text=True, timeout=60, env=env)
        assert done.returncode == 0, done.stderr
        return {row.split("\t")[0] for row in done.stdout.splitlines()}

    assert {t["name"] for t in doc["trainers"]} <= offered("gpuwatch pause ")
    assert offered("gpuwatch status --gpu card") == {g["card"] for g in doc["gpus"]}
    assert offered("gpuwatch train --restart ") == {"no", "on-failure"}
