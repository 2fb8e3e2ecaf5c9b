"""The options of the commands typed most (`health`, `status`, `pause`, `resume`, `stop`...), in one table that
gpuwatch's argparse parser builds them from, and a reader of those commands' common forms without argparse.

argparse's import (re, enum, gettext, locale and textwrap under it) and building gpuwatch's whole parser were
most of these commands' own time (issue 52: each within 2x of Python's own start; benchmarks/cli_latency.py).
``fast_command`` takes a plain form (the options of the table, each spelled in full, their values valid; at most
one NAME) and `gpuwatch --help`, `gpuwatch --version`; anything else (``-h`` after a command, an abbreviation, a
value a type must check, a usage error) is argparse's to parse and to answer, as before.
tests/cli/test_quick_args.py holds both readers to the same result for every form, and the shipped top-level
help (help.txt) to what the parser prints.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False  # typing's and collections' imports are as costly as the rest of a quick command
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from typing import Any

HELP_COLUMNS = 80  # `gpuwatch --help` is at most this wide: help.txt is what the parser prints at this width
HELP_FILE = os.path.join(os.path.dirname(__file__), "help.txt")


class Option:
    """One option: its spellings (as argparse takes them), the attribute it sets, whether it takes a value (else a
    flag: True when given), the values allowed (None: any), its default, and whether it repeats (a list)."""

    __slots__ = ("names", "dest", "takes_value", "choices", "default", "repeat")

    def __init__(self, *names: str, dest: str, takes_value: bool = True, choices: tuple[str, ...] | None = None,
                 default: object = None, repeat: bool = False) -> None:
        self.names = names
        self.dest = dest
        self.takes_value = takes_value
        self.choices = choices
        self.default = default if takes_value else False
        self.repeat = repeat

    def argparse_kwargs(self) -> dict[str, object]:
        """What argparse's ``add_argument`` takes for it besides help, metavar and a type
        (cli/health/options.add_option)."""
        if not self.takes_value:
            return {"dest": self.dest, "action": "store_true"}
        return {"dest": self.dest, "action": "append" if self.repeat else "store", "choices": self.choices,
                "default": self.default}


# Every command that reads a config (cli/health/options.common_options); the machine's trees too for those that
# read it.
CONFIG = Option("-c", "--config", dest="config")
SYSFS_ROOT = Option("--sysfs-root", dest="sysfs_root")
PROC_ROOT = Option("--proc-root", dest="proc_root")
# `status` and `sensors` (cli/parser._add_views).
JSON = Option("--json", dest="json", takes_value=False)
COLOR = Option("--color", dest="color", choices=("auto", "always", "never"), default="auto")
PROCESSES = Option("--processes", dest="processes", takes_value=False)
GPU = Option("--gpu", dest="gpu", repeat=True)

EXIT_USAGE = 2  # cli/status.py's EXIT_USAGE (a test keeps them equal): that module imports the models

# What a command's handler reads that a plain form leaves at argparse's default (options it does not take).
_STATUS_REST: dict[str, object] = dict.fromkeys(("watch", "remote", "timeout", "ca_file", "user", "password_file",
                                                 "history"))
# The commands with a plain form: their options, the positional (nargs="?") they take, the other values their
# handler reads (the defaults of the options a plain form does not take, what argparse's set_defaults adds), and
# the handler (module, name).
STATUS = (CONFIG, SYSFS_ROOT, PROC_ROOT, JSON, COLOR, PROCESSES, GPU)
CONTROL = (CONFIG,)
_COMMANDS: dict[str, tuple[tuple[Option, ...], str | None, dict[str, object], str, str]] = {
    "status": (STATUS, None, _STATUS_REST, "gpuwatch.cli.status_quick", "cmd_status"),
    **{verb: (CONTROL, "name", {"verb": verb}, "gpuwatch.cli.control", "cmd_control")
       for verb in ("pause", "resume", "restart", "stop", "simulate-reset")},
}


class QuickArgs:
    """What argparse's Namespace holds for the same words (the paths as ``str``: the handlers take either), and the
    ``command``; no ``parser`` (a handler that must say a usage error builds it: cli/parser.command_parser)."""

    def __init__(self, command: str | None, values: dict[str, object]) -> None:
        self.command = command
        self.__dict__.update(values)

    def __getattr__(self, name: str) -> Any:
        """Only for a name that was not set (the table's are): mypy reads any, as on a Namespace."""
        raise AttributeError(name)

    def __repr__(self) -> str:
        return f"QuickArgs({self.command!r}, {self.__dict__!r})"


def read(argv: Sequence[str], options: Sequence[Option], positional: str | None = None,
         command: str | None = None) -> QuickArgs | None:
    """``argv`` (the words after the command) as argparse would read them with ``options`` and an optional
    ``positional``, when every word is a plain one: an option spelled in full (``--name=value`` too), its value
    present, not an option's, and allowed; at most one positional. None otherwise (argparse decides)."""
    named = {name: option for option in options for name in option.names}
    values: dict[str, object] = {option.dest: option.default for option in options}
    if positional is not None:
        values[positional] = None
    seen_positional = False
    words = iter(argv)
    for word in words:
        if not word.startswith("-"):
            if positional is None or seen_positional:
                return None
            values[positional], seen_positional = word, True
            continue
        spelled, equals, value = word.partition("=") if word.startswith("--") else (word, "", "")
        option = named.get(spelled)
        if option is None:
            return None
        if not option.takes_value:
            if equals:
                return None  # argparse: "ignored explicit argument"
            values[option.dest] = True
            continue
        if not equals:
            value = next(words, "-")
            if value.startswith("-"):  # missing, or an option: argparse's error to say
                return None
        if option.choices is not None and value not in option.choices:
            return None
        earlier = values[option.dest]
        values[option.dest] = value if not option.repeat else [*earlier, value] if isinstance(earlier, list) \
            else [value]
    return QuickArgs(command, values)


def fast_command(words: Sequence[str]) -> tuple[Callable[[Any], int], QuickArgs] | None:
    """The handler and its arguments for ``words`` (gpuwatch's arguments) when they are a plain form of a command
    in the table, or the top-level help or version; None: gpuwatch's parser reads them."""
    if not words or list(words) in (["--help"], ["-h"]):
        if help_columns() < HELP_COLUMNS:
            return None  # a narrower terminal: argparse wraps the help to it
        return (_print_help if words else _print_help_as_usage_error), QuickArgs(None, {})
    if list(words) == ["--version"]:
        return _print_version, QuickArgs(None, {})
    table = _COMMANDS.get(words[0])
    if table is None:
        return None
    options, positional, rest, module, handler = table
    args = read(words[1:], options, positional, words[0])
    if args is None:
        return None
    args.__dict__.update(rest)
    return getattr(__import__(module, fromlist=[handler]), handler), args


def help_columns() -> int:
    """``$COLUMNS``, else the terminal's width, else 80: what ``shutil.get_terminal_size()`` answers (without
    shutil, and zlib, bz2 and lzma with it; cli/health/options.formatter gives argparse this width)."""
    value = os.environ.get("COLUMNS", "")
    if value.isdigit() and int(value) > 0:
        return int(value)
    stdout = sys.__stdout__
    try:
        return (os.get_terminal_size(stdout.fileno()).columns if stdout is not None else 0) or 80
    except (ValueError, OSError):
        return 80


def _print_help(_args: QuickArgs) -> int:
    with open(HELP_FILE, encoding="utf-8") as handle:
        sys.stdout.write(handle.read())
    return 0


def _print_help_as_usage_error(args: QuickArgs) -> int:
    """`gpuwatch` alone: the help, and a usage error's exit code, as the parser's path does."""
    _print_help(args)
    return EXIT_USAGE


def _print_version(_args: QuickArgs) -> int:
    from gpuwatch import __version__

    print(f"gpuwatch {__version__}")
    return 0
