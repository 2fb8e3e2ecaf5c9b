"""The options every command that reads a config or the machine takes (a parent parser), in a module of their
own: `gpuwatch health` builds its parser from it without loading the other commands (docs/cluster.md)."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from gpuwatch.cli.quick_args import CONFIG, PROC_ROOT, SYSFS_ROOT, Option, help_columns
from gpuwatch.config.runtime import DEFAULT_CONFIG_PATH


def _translated_once(translate: Callable[[str], str]) -> Callable[[str], str]:
    """``translate`` (gettext.gettext), each message looked up once per process."""
    done: dict[str, str] = {}

    def lookup(message: str) -> str:
        if message not in done:
            done[message] = translate(message)
        return done[message]

    return lookup


# argparse passes each of its own strings through gettext.gettext ("show this help message and exit", "options",
# "usage: "...), which looks for a message catalogue on disk on every call, found or not (gettext.find: a stat per
# candidate .mo file of each language in $LANGUAGE, $LC_ALL, $LC_MESSAGES and $LANG): about 230 stats for
# gpuwatch's parser, half the time of building it (issue 52). The catalogues do not change while a command runs.
argparse._ = _translated_once(argparse._)  # type: ignore[attr-defined]


def common_options(path: Callable[[str], object], machine: bool = True) -> argparse.ArgumentParser:
    """The parent parser; ``path`` makes each option's value: ``pathlib.Path`` for gpuwatch's full parser,
    ``str`` for `gpuwatch health`'s (pathlib's import, with urllib.parse and ipaddress, was 3-4 ms of every
    check; cli/settings.py makes a ``Path`` of either where a command's config is loaded). ``machine``: also the
    trees to read (not for the commands that only talk to the daemon: pause, resume, stop, restart)."""
    common = argparse.ArgumentParser(add_help=False, formatter_class=formatter)
    add_option(common, CONFIG, type=path, metavar="FILE",
               help=f"config file (default {DEFAULT_CONFIG_PATH} if present)")
    if not machine:
        return common
    add_option(common, SYSFS_ROOT, type=path, metavar="DIR",
               help="sysfs tree to read instead of /sys (tests, captures)")
    add_option(common, PROC_ROOT, type=path, metavar="DIR", help="proc tree to read instead of /proc (tests)")
    return common


def add_option(parser: argparse.ArgumentParser, option: Option, **kwargs: object) -> argparse.Action:
    """``option`` of cli/quick_args.py's table (its spellings, attribute, values, default) in ``parser``, with
    what only argparse needs (help, metavar, a type)."""
    return parser.add_argument(*option.names, **option.argparse_kwargs(), **kwargs)  # type: ignore[arg-type]


def formatter(prog: str, columns: int | None = None) -> argparse.HelpFormatter:
    """argparse's own formatter at the width shutil would give it (or ``columns``, when fewer), without importing
    shutil (and zlib, bz2 and lzma with it): argparse makes a formatter for every add_argument too (to check its
    metavar), and `gpuwatch health` builds its parser on every check, where that import was a tenth of its own
    time."""
    width = help_columns() if columns is None else min(columns, help_columns())
    return argparse.HelpFormatter(prog, width=width - 2)  # shutil's width, less argparse's own margin


def add_receipt_arguments(parser: argparse.ArgumentParser) -> None:
    """`gpuwatch receipt`'s own arguments, here beside the common ones: cli/health/receipt.py's imports (the
    config's models, the view) are its handler's, not the parser's."""
    parser.add_argument("job_id", metavar="JOBID", help="the scheduler's job id (Slurm: $SLURM_JOB_ID)")
    parser.add_argument("--json", action="store_true", help="the receipt as a JSON object")
