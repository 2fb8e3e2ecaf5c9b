"""Issue 32 point 12: shell completion for bash, zsh and fish, generated from the parser and shipped with the
package; bash's real completion machinery (`complete -p`, the function it calls) is driven here, fish's
`complete -C` too, zsh's script is syntax-checked. ``GPUWATCH_UPDATE_COMPLETIONS=1`` rewrites the shipped files."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

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


def _bash(script_path: Path, line: str, cwd: Path) -> list[str]:
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
                          timeout=30, cwd=cwd)
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
