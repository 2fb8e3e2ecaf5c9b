"""`gpuwatch`'s argument parser: every command, its options and the handler that runs it."""

from __future__ import annotations

import argparse
from pathlib import Path

from gpuwatch import __version__
from gpuwatch.cli.health import add_health_arguments, cmd_health
from gpuwatch.cli.health.options import add_option, add_receipt_arguments, common_options, formatter
from gpuwatch.cli.quick_args import COLOR, GPU, HELP_COLUMNS, JSON, PROCESSES
from gpuwatch.config.quick import BACKOFF_INITIAL_S, TRAINER_GRACE_S
from gpuwatch.config.runtime import DEFAULT_CONFIG_PATH
from gpuwatch.config.slots import GPU_HELP, GPU_METAVAR

TYPE_CHECKING = False  # typing's import was a tenth of `gpuwatch --help`: annotations only
if TYPE_CHECKING:
    from typing import Any, TypeAlias

    from gpuwatch.cli.quick_args import QuickArgs
    from gpuwatch.train.argv import RestartPolicy

# argparse's type for the subcommands' registry (private, but what add_subparsers returns).
Commands: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


def _lazy(module: str, name: str) -> Any:
    """``module.name``, imported when it is first called: a command's handler (or an option's type) and what it
    imports are loaded only when that command runs. Building the parser imports no command's module: pydantic,
    the daemon's modules, the renderers were two thirds of `gpuwatch --help`'s time (issue 52;
    tests/cli/test_startup_imports.py)."""

    def call(*args: Any) -> Any:
        return getattr(__import__(module, fromlist=[name]), name)(*args)

    call.__name__ = call.__qualname__ = name  # argparse names a type by it in its errors
    return call


cmd_check_config = _lazy("gpuwatch.cli.commands", "cmd_check_config")
cmd_control = _lazy("gpuwatch.cli.control", "cmd_control")
cmd_curve = _lazy("gpuwatch.cli.commands", "cmd_curve")
cmd_restore = _lazy("gpuwatch.cli.commands", "cmd_restore")
cmd_run = _lazy("gpuwatch.cli.commands", "cmd_run")
cmd_sensors = _lazy("gpuwatch.cli.commands", "cmd_sensors")
cmd_status = _lazy("gpuwatch.cli.status_quick", "cmd_status")
cmd_train = _lazy("gpuwatch.cli.commands", "cmd_train")
cmd_completion = _lazy("gpuwatch.cli.completion", "cmd_completion")
cmd_receipt = _lazy("gpuwatch.cli.health.receipt", "cmd_receipt")
cmd_logs = _lazy("gpuwatch.cli.logs", "cmd_logs")
watch_seconds = _lazy("gpuwatch.cli.show", "watch_seconds")
SHELLS = ("bash", "zsh", "fish")  # `gpuwatch completion`'s choices: cli/completion.py writes a script for each
VALUE_KINDS = ("runs", "gpus")  # `gpuwatch completion --values`: what the scripts ask at TAB time
# `train --conv2d-fallback`'s modes: train/argv.py's FALLBACK_MODES (a test keeps them equal), whose module's
# import (dataclasses, typing, the heartbeat's json and tempfile) was a third of `gpuwatch --help`.
FALLBACK_MODES = ("auto", "on", "off")


class _Parser(argparse.ArgumentParser):
    """Every command's parser, with the parent's formatter: argparse's own imports shutil (with zlib, bz2 and
    lzma) for the terminal's width (cli/health/options.formatter)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", formatter)
        super().__init__(*args, **kwargs)


def _top_formatter(prog: str) -> argparse.HelpFormatter:
    """`gpuwatch --help` at most HELP_COLUMNS wide: what cli/help.txt holds, printed without this parser on a
    terminal at least as wide (cli/quick_args.py)."""
    return formatter(prog, HELP_COLUMNS)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="gpuwatch", description="GPU health daemon for AMD training machines.",
                     formatter_class=_top_formatter)
    parser.add_argument("--version", action="version", version=f"gpuwatch {__version__}")
    common = _common_options()
    # Typed as argparse's own (the parents are plain parsers): _Parser only sets the formatter.
    sub: Commands = parser.add_subparsers(title="commands", metavar="COMMAND",
                                          parser_class=_Parser)
    # The order of these calls is the order `gpuwatch --help` lists the commands in.
    _add_run(sub, common)
    _add_views(sub, common)
    _add_restore_and_curve(sub, common)
    _add_control(sub, common)
    _add_logs(sub, common)
    health = sub.add_parser("health", parents=[common], help="the node's health verdict for a scheduler (Slurm, "
                            "node-problem-detector, Nagios): exit code and one line")
    add_health_arguments(health)
    health.set_defaults(handler=cmd_health)
    receipt = sub.add_parser("receipt", parents=[common], help="a scheduler job's thermal and energy receipt "
                             "(for a Slurm epilog): energy per GPU, max temperatures, time governed, paused and "
                             "throttled, resets")
    add_receipt_arguments(receipt)
    receipt.set_defaults(handler=cmd_receipt)
    _add_train(sub)
    check = sub.add_parser("check-config", help="validate a config file and print the effective config")
    check.add_argument("-c", "--config", type=Path, metavar="FILE",
                       help=f"the config file (default {DEFAULT_CONFIG_PATH})")
    check.add_argument("file", nargs="?", type=Path, metavar="FILE",
                       help="the config file, as -c names it (its first form)")
    check.set_defaults(handler=cmd_check_config)
    completion = sub.add_parser("completion", help="print the shell completion script for bash, zsh or fish")
    completion.add_argument("shell", nargs="?", choices=SHELLS, help="the shell the script is for")
    # What the scripts ask at TAB time (run names and pids, GPUs): not for people, so not in --help.
    completion.add_argument("--values", choices=VALUE_KINDS, help=argparse.SUPPRESS)
    completion.set_defaults(handler=cmd_completion, root=parser)  # the script is generated from this parser
    for command in sub.choices.values():
        command.set_defaults(parser=command)  # a usage error found later is said with the command's usage
    return parser


def command_parser(args: argparse.Namespace | QuickArgs) -> argparse.ArgumentParser:
    """The parser of the command ``args`` were read for, to say a usage error found later with its usage:
    argparse's (``set_defaults(parser=...)``), else (cli/quick_args.py's quick read) built now."""
    parser: argparse.ArgumentParser | None = getattr(args, "parser", None)
    return parser if parser is not None else build_parser().parse_known_args([str(args.command)])[0].parser


def _common_options() -> argparse.ArgumentParser:
    """The options every command that reads a config or the machine takes (a parent parser: cli/health/options.py)."""
    return common_options(Path)


def _add_run(sub: Commands, common: argparse.ArgumentParser) -> None:
    run = sub.add_parser("run", parents=[common], help="run the daemon in the foreground")
    run.add_argument("--dry-run", action="store_true",
                     help="compute fan and power cap writes and log them, write nothing")
    run.add_argument("--simulate", nargs="?", type=int, const=0, metavar="N",
                     help="run on N simulated RX 5600 XT cards instead of /sys (default: the config's, else 1)")
    run.set_defaults(handler=cmd_run)


def _add_views(sub: Commands, common: argparse.ArgumentParser) -> None:
    """`status` and `sensors`: the same view options; `status` also reads other machines (--remote)."""
    for name, helptext, handler in (
        ("status", "GPU, fan and trainer status (from the daemon, else from sysfs)", cmd_status),
        ("sensors", "a reading straight from sysfs (and NVML), not the daemon's", cmd_sensors),
    ):
        p = sub.add_parser(name, parents=[common], help=helptext)
        add_option(p, JSON, help="print the stable JSON document (schema 1)")
        p.add_argument("--watch", type=watch_seconds, metavar="SECONDS",
                       help="refresh every SECONDS until Ctrl-C (with --json: one compact document per line)")
        add_option(p, COLOR, help="colour on a terminal (auto, the default, unless NO_COLOR is set), always or never")
        add_option(p, PROCESSES, help="also list the processes using each GPU (pid, user, VRAM, engine busy, command)")
        add_option(p, GPU, metavar=GPU_METAVAR, help=f"only this GPU (repeatable); {GPU_HELP}")
        p.set_defaults(handler=handler)
        if name == "status":
            p.add_argument("--remote", nargs="*", metavar="HOST",
                           help="one table for these machines' daemons (box3, box3:9840, http://box3:9840); "
                                "none named: [status] remote of the config")
            p.add_argument("--timeout", type=_positive_seconds, metavar="SECONDS",
                           help="per-host timeout of --remote (default [status] timeout_s, 3)")
            p.add_argument("--ca-file", type=Path, metavar="FILE",
                           help="--remote over https: the CA that signs the hosts' certificates (default "
                                "[status] ca_file, else the system's)")
            p.add_argument("--user", metavar="NAME",
                           help="--remote: the basic auth user (default [status] user); sent over https only")
            p.add_argument("--password-file", type=Path, metavar="FILE",
                           help="--remote: a file whose first line is the user's password (default [status] "
                                "password_file); never the password itself on the command line")
            p.add_argument("--history", nargs="?", const="1h", choices=("15m", "1h", "24h", "7d"), metavar="RANGE",
                           help="sparklines of the daemon's history on disk (15m, 1h, 24h or 7d; default 1h); with "
                                "--remote HOST, that host's /history")


def _add_restore_and_curve(sub: Commands, common: argparse.ArgumentParser) -> None:
    for name, helptext in (
        ("restore", "give back what the daemon changed: fans to the firmware, power caps to their original "
                    "(systemd ExecStopPost; works after a SIGKILL)"),
        ("fans-auto", "the same as restore (its first name, kept for existing units)"),
    ):
        restore = sub.add_parser(name, parents=[common], help=helptext)
        restore.add_argument("--force", action="store_true",
                             help="restore even while a daemon runs with this runtime directory (it records "
                                  "again before its next write); refused without it, exit 2")
        restore.set_defaults(handler=cmd_restore, verb=name)
    curve = sub.add_parser("curve", parents=[common], help="print the configured fan curve as a table and plot")
    curve.add_argument("--gpu", metavar=GPU_METAVAR, help=f"the curve of one GPU (with its overrides); {GPU_HELP}")
    curve.set_defaults(handler=cmd_curve)


def _add_control(sub: Commands, common: argparse.ArgumentParser) -> None:
    """The commands a running daemon carries out (through its control socket): they read no sysfs or proc tree,
    so they take the config alone (-c, its first option)."""
    common = common_options(Path, machine=False)
    for name, helptext in (
        ("pause", "pause a supervised trainer or attached run (all, or a user's own runs, when NAME is omitted) "
                  "until `resume`"),
        ("resume", "resume a paused trainer or attached run"),
        ("restart", "stop a trainer gracefully and start it again (from its last checkpoint)"),
        ("stop", "stop a trainer gracefully (SIGTERM, its grace_s to checkpoint, then SIGKILL) and keep it "
                 "stopped until `restart` (or the daemon's restart); an attached run is stopped by its wrapper"),
        ("simulate-reset", "reset a simulated GPU (gpuwatch run --simulate): dump, outage, hung processes"),
    ):
        p = sub.add_parser(name, parents=[common], help=helptext)
        if name == "simulate-reset":
            p.add_argument("name", nargs="?", metavar="GPU", help="PCI slot of the simulated GPU (default: the first)")
        elif name == "restart":  # the daemon restarts only what it started: an attached run's wrapper restarts it
            p.add_argument("name", nargs="?", metavar="NAME",
                           help="a [[trainer]]'s name (default: every trainer); an attached run is restarted by its "
                                "own `gpuwatch train --restart`, not here")
        else:
            p.add_argument("name", nargs="?", metavar="NAME",
                           help="a [[trainer]]'s or an attached run's name, or any pid of an attached run (default: "
                                "all; a user who is not root or in [control] admin_group: their own runs)")
        p.set_defaults(handler=cmd_control, verb=name)


def _add_logs(sub: Commands, common: argparse.ArgumentParser) -> None:
    logs = sub.add_parser("logs", parents=[common], help="print a trainer's output (its log file; no daemon needed)")
    logs.add_argument("name", nargs="?", metavar="NAME", help="trainer name from [[trainer]] (default: the only one)")
    logs.add_argument("-n", "--lines", type=_lines, default=10, metavar="N", help="the last N lines (default 10)")
    logs.add_argument("-f", "--follow", action="store_true", help="then print new output as it comes, until Ctrl-C")
    logs.set_defaults(handler=cmd_logs)


def _add_train(sub: Commands) -> None:
    """`gpuwatch train`: no config options (it finds the daemon like `status` does); its usage spelled out for
    the `--` form."""
    train = sub.add_parser("train", help="run a training command attached to the daemon, with the training patches "
                                         "(gpuwatch[train])",
                           # Lines of at most 80 columns, as argparse wraps its own usages (one was 330 wide).
                           usage="gpuwatch train [--conv2d-fallback [auto|on|off]]\n"
                                 "                      [--conv2d-autotune on|off] [--conv2d-tune-cache DIR]\n"
                                 "                      [--spawn] [--heartbeat-file FILE] [--pause-file FILE]\n"
                                 "                      [--name NAME] [--gpu GPU] [--backoff-s SECONDS]\n"
                                 "                      [--restart no|on-failure|on-failure:N] [--grace-s SECONDS]\n"
                                 "                      [--checkpoint-glob GLOB] [--resume-args ARGS]\n"
                                 "                      [--runtime-dir DIR] [--no-attach] -- python train.py ARGS\n"
                                 "       gpuwatch train [options] -- torchrun [TORCHRUN ARGS] train.py ARGS")
    train.add_argument("--conv2d-fallback", choices=FALLBACK_MODES, nargs="?", const="on", default="auto",
                       help="im2col Conv2d instead of MIOpen: auto = only where a native probe conv fails "
                            "(default); without a value: on")
    train.add_argument("--conv2d-autotune", choices=("on", "off"), default="on",
                       help="fallback: measure its MIOpen-free paths per convolution and keep the fastest (default on)")
    train.add_argument("--conv2d-tune-cache", metavar="DIR",
                       help="keep the fallback's measured choices here ('none': memory only; "
                            "default: $XDG_CACHE_HOME/gpuwatch)")
    train.add_argument("--spawn", action="store_true", help="spawn start method, persistent DataLoader workers")
    train.add_argument("--heartbeat-file", metavar="FILE",
                       help="heartbeat JSON path (default $GPUWATCH_HEARTBEAT_FILE, else in the run's own "
                            "directory)")
    train.add_argument("--pause-file", metavar="FILE",
                       help="hold at the step boundary while it exists (default $GPUWATCH_PAUSE_FILE, else in the "
                            "run's own directory)")
    _add_attach_options(train)
    train.add_argument("command", nargs=argparse.REMAINDER,
                       help="python SCRIPT ARGS, python -m MODULE ARGS, or any command that starts Python "
                            "(torchrun ...)")
    train.set_defaults(handler=cmd_train)


def _add_attach_options(train: argparse.ArgumentParser) -> None:
    """The attached run's options (docs/attached-runs.md); the defaults are a configured trainer's."""
    train.add_argument("--name", metavar="NAME", help="the run's name in status and /metrics (default: from the "
                                                      "command; the daemon keeps names unique)")
    train.add_argument("--gpu", action="append", metavar=GPU_METAVAR,
                       help=f"a GPU the run uses (repeatable; default: found from the processes' GPU files); "
                            f"{GPU_HELP}")
    train.add_argument("--restart", type=_restart_policy, default="no",  # a str default goes through the type
                       metavar="no|on-failure|on-failure:N",
                       help="start the command again after a non-zero exit or a hang, N times at most (default no)")
    train.add_argument("--grace-s", type=_seconds, default=TRAINER_GRACE_S,
                       metavar="SECONDS",
                       help="a stop or a hang: SIGTERM, then SIGKILL after this (default %(default)g)")
    train.add_argument("--backoff-s", type=_seconds, default=BACKOFF_INITIAL_S,
                       metavar="SECONDS", help="the first restart's delay, doubled per failure in a row without "
                                               "progress (default %(default)g)")
    train.add_argument("--checkpoint-glob", metavar="GLOB",
                       help="a restart resumes from the newest complete checkpoint matching it")
    train.add_argument("--resume-args", metavar="ARGS",
                       help="added to the command on a restart, {last_checkpoint} replaced "
                            "(\"--resume {last_checkpoint}\")")
    train.add_argument("--runtime-dir", type=Path, metavar="DIR",
                       help="the daemon's runtime directory (default: where `gpuwatch status` finds it)")
    train.add_argument("--no-attach", action="store_true", help="do not attach to the daemon (unprotected)")


def _restart_policy(text: str) -> RestartPolicy:
    from gpuwatch.train.argv import parse_restart

    try:
        return parse_restart(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _seconds(text: str) -> float:
    """`--grace-s`, `--backoff-s`: seconds, 0 or more."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0 <= value <= 86400:
        raise argparse.ArgumentTypeError(f"{text} must be 0 to 86400 seconds")
    return value


def _lines(text: str) -> int:
    """`logs -n`: a count of lines, 0 or more."""
    if not text.isdecimal():
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of lines (0 or more)")
    return int(text)


def _positive_seconds(text: str) -> float:
    """`--timeout`: seconds, above 0 and at most 60."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0 < value <= 60:
        raise argparse.ArgumentTypeError(f"{text} must be above 0 and at most 60 seconds")
    return value
