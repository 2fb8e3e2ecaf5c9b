"""The commands' plain forms read without argparse (cli/quick_args.py) are what gpuwatch's parser reads, form by
form; anything else is left to the parser; `gpuwatch --help` printed from the shipped help.txt is what the parser
prints (``GPUWATCH_UPDATE_COMPLETIONS=1`` rewrites it, with the completion scripts: tests/cli/test_completion.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpuwatch.cli.parser import build_parser, command_parser
from gpuwatch.cli.quick_args import HELP_COLUMNS, HELP_FILE, QuickArgs, fast_command
from gpuwatch.daemon.control_client import request_line
from tests.support.paths import REPO

PLAIN = [
    ["status"], ["status", "-c", "g.toml"], ["status", "--config=g.toml"], ["status", "-c", ""], ["status", "--json"],
    ["status", "--color", "never"], ["status", "--color=always"], ["status", "--gpu", "0", "--gpu", "card1"],
    ["status", "--processes", "--json", "-c", "g.toml"], ["status", "--sysfs-root", "/s", "--proc-root", "/p"],
    ["status", "-c", "a", "--config", "b"], ["status", "--gpu=0000:03:00.0"],
    ["pause"], ["pause", "job"], ["pause", "-c", "g.toml", "job"], ["resume", "job", "-c", "g.toml"], ["stop", "123"],
    ["stop", ""], ["resume", "--config=g.toml"], ["restart", "trainer"], ["simulate-reset", "0000:03:00.0"],
]

# Help after a command, options a plain form does not take (or that a type checks), abbreviations, other spellings,
# bad or missing values, a second NAME, `--`: the parser's (it answers, or says what is wrong: exit 2).
LEFT = [
    ["status", "--watch", "1"], ["status", "--remote"], ["status", "--history"], ["status", "-h"], ["status", "--jso"],
    ["status", "--color", "pink"], ["status", "--json=1"], ["status", "-cg.toml"], ["status", "x"], ["status", "--gpu"],
    ["status", "--timeout", "1"], ["status", "-c", "-x"], ["pause", "a", "b"], ["pause", "--", "x"], ["pause", "-c"],
    ["pause", "--help"], ["stop", "-"], ["stop", "--sysfs-root", "/s"], ["sensors"], ["health"],
    ["run"], ["--help", "status"], ["-h", "-h"], ["--versio"], ["status", "--color"], ["bogus"],
]


PATHS = ("config", "sysfs_root", "proc_root")  # a Path from the parser, a str from the quick read: either is taken


def namespace(words: list[str]) -> dict[str, object]:
    """What gpuwatch's parser reads, the handler by its name."""
    args = vars(build_parser().parse_args(words))
    return {**{key: value for key, value in args.items() if key not in ("handler", "parser")},
            "handler": args["handler"].__name__}


@pytest.mark.parametrize("words", PLAIN, ids=" ".join)
def test_a_plain_form_is_read_as_the_parser_reads_it(words: list[str]) -> None:
    fast = fast_command(words)
    assert fast is not None
    handler, args = fast
    quick = {key: Path(value) if key in PATHS and value is not None else value for key, value in vars(args).items()
             if key != "command"}
    assert {**quick, "handler": handler.__name__} == namespace(words)
    assert args.command == words[0]


@pytest.mark.parametrize("words", LEFT, ids=" ".join)
def test_anything_else_is_left_to_the_parser(words: list[str]) -> None:
    assert fast_command(words) is None


def test_a_usage_error_found_later_is_said_with_the_commands_usage() -> None:
    """cli/parser.command_parser (status's `--gpu NOPE`: cli/show.py): argparse's, or built for the quick read's."""
    fast = fast_command(["status", "--gpu", "7"])
    assert fast is not None and command_parser(fast[1]).prog == "gpuwatch status"
    assert command_parser(build_parser().parse_args(["pause"])).prog == "gpuwatch pause"
    with pytest.raises(AttributeError):
        QuickArgs("status", {}).parser  # noqa: B018


def gpuwatch(*words: str, columns: int) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": str(columns)}
    return subprocess.run([sys.executable, "-m", "gpuwatch.cli", *words], capture_output=True, text=True,
                          timeout=120, env=env)


def test_the_shipped_help_is_what_the_parser_prints(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    generated = build_parser().format_help()
    if os.environ.get("GPUWATCH_UPDATE_COMPLETIONS"):
        Path(HELP_FILE).write_text(generated, encoding="utf-8")
    assert Path(HELP_FILE).read_text(encoding="utf-8") == generated, \
        f"regenerate: GPUWATCH_UPDATE_COMPLETIONS=1 pytest {__file__}"
    assert max(map(len, generated.splitlines())) <= HELP_COLUMNS - 2


@pytest.mark.parametrize("words, code", [(["--help"], 0), (["-h"], 0), ([], 2)], ids=repr)
@pytest.mark.parametrize("columns", [HELP_COLUMNS, 200])
def test_help_from_the_file_and_from_the_parser_agree(words: list[str], code: int, columns: int,
                                                      monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """On a terminal at least HELP_COLUMNS wide: the file; the parser (its path forced here) prints the same, with
    the same exit code."""
    from gpuwatch import cli

    done = gpuwatch(*words, columns=columns)
    assert (done.returncode, done.stdout, done.stderr) == (code, Path(HELP_FILE).read_text(encoding="utf-8"), "")
    monkeypatch.setenv("COLUMNS", str(columns))
    monkeypatch.setattr("gpuwatch.cli.quick_args.fast_command", lambda words: None)
    try:
        parsed = cli.main(words)
    except SystemExit as exc:  # argparse's --help
        parsed = int(exc.code or 0)
    assert (parsed, capsys.readouterr().out) == (code, done.stdout)


def test_a_narrower_terminal_gets_the_help_wrapped_to_it() -> None:
    done = gpuwatch("--help", columns=60)
    assert done.returncode == 0 and "usage: gpuwatch" in done.stdout
    assert max(map(len, done.stdout.splitlines())) <= 58 and done.stdout != Path(HELP_FILE).read_text()


def test_version_from_both_paths() -> None:
    from gpuwatch import __version__

    assert gpuwatch("--version", columns=80).stdout == f"gpuwatch {__version__}\n"
    assert gpuwatch("--version", "--version", columns=80).stdout == f"gpuwatch {__version__}\n"  # the parser's


@pytest.mark.parametrize("name", [None, "job", "", 'a "quoted" \\ name', "ünïcode ✓", "\x1b[2J\n\t", "\ud800"])
@pytest.mark.parametrize("cmd", ["pause", "stop"])
def test_the_control_request_is_what_json_dumps_writes(cmd: str, name: str | None) -> None:
    assert request_line(cmd, name) == json.dumps({"cmd": cmd, "name": name}).encode() + b"\n"
