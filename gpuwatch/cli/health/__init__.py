"""`gpuwatch health [--format nhc|npd|nagios|json] [--slurm]`: the node's verdict for a scheduler.

The fast path, taken whenever a daemon publishes: read the options (``quick_args``; argparse only for anything
but a plain check), find the runtime directory (config/quick.py reads the config's ``runtime_dir`` alone, without
tomllib), read the state file (``publish.state.parse``: json's C scanner without json's import), render the
daemon's own verdict (``health`` in the document, judged every tick with its live [health] settings), or G001
when the state is stale. No pydantic, no GPU I/O, none of the other commands: `gpuwatch` dispatches here before
building its full parser (cli/__init__.py); tests/cluster/test_health_imports.py pins the imports by name and
benchmarks/health_latency.py measures it end to end against ``python -c pass`` (issue 52: at most 1.5x). Only
when no daemon runs (no state file, or a stale one with nobody holding the runtime directory's lock) is the whole
config loaded and the GPUs read directly, the verdict judged here, and G002 added (``[health] daemon_down``).
"""

from __future__ import annotations

import os
import sys
import time

from gpuwatch.cli.health.render import FORMATS, Answer, from_document, no_daemon, only, render
from gpuwatch.cli.quick_args import CONFIG, PROC_ROOT, SYSFS_ROOT, Option, QuickArgs, read
from gpuwatch.config.quick import client_runtime_dir_quick, config_file
from gpuwatch.config.runtime import STATE_FILE_NAME
from gpuwatch.publish.health_codes import CLASSES, UNUSABLE, fault_line
from gpuwatch.publish.state import STATE_FILE_MAX_BYTES, parse, this_boot
from gpuwatch.safefs import client_refusal, read_bounded

TYPE_CHECKING = False  # typing's import alone was a tenth of the check (tests/cluster/test_health_imports.py)
if TYPE_CHECKING:
    import argparse
    from collections.abc import Sequence


# Its own options (cli/quick_args.py's table: argparse builds them from it, a plain check is read by it).
FORMAT = Option("--format", dest="format", choices=FORMATS, default="nhc")
CLASS = Option("--class", dest="fault_class", choices=tuple(sorted(CLASSES)))
SLURM = Option("--slurm", dest="slurm", takes_value=False)
OPTIONS = (CONFIG, SYSFS_ROOT, PROC_ROOT, FORMAT, CLASS, SLURM)


def add_health_arguments(parser: argparse.ArgumentParser) -> None:
    from gpuwatch.cli.health.options import add_option

    add_option(parser, FORMAT, help="nhc: 0 healthy/1 not (default); npd: node-problem-detector plugin, 0 ok/1 "
               "problem/2 unknown, at most 80 characters; nagios: 0/1/2/3; json: the verdict as an object")
    add_option(parser, CLASS, metavar="CLASS",
               help=f"only this fault class ({', '.join(sorted(CLASSES))}) and the daemon's own faults: one "
                    "node-problem-detector condition per class")
    add_option(parser, SLURM, help="for slurm.conf's HealthCheckProgram: drain this node after [health] "
                                   "drain_after_checks unhealthy checks in a row (reason gpuwatch:...), resume a node "
                                   "gpuwatch drained after resume_after_checks healthy ones")


def quick_args(argv: Sequence[str]) -> QuickArgs | None:
    """``argv`` as `gpuwatch health`'s argparse parser would take it, when it is a plain check (cli/quick_args.read:
    argparse's import, with re, gettext and locale under it, was a third of the check's own time); None otherwise:
    ``--help``, an abbreviated or unknown option, a bad or missing value are argparse's to parse and to answer."""
    return read(argv, OPTIONS)


def main(argv: Sequence[str]) -> int:
    """`gpuwatch health ARGS` (the fast entry, before gpuwatch's full parser is built)."""
    quick = quick_args(argv)
    if quick is not None:
        return cmd_health(quick)
    import argparse

    from gpuwatch.cli.health.options import common_options, formatter

    # str, not pathlib.Path, for the paths, as the quick read's: the handler takes either.
    parser = argparse.ArgumentParser(prog="gpuwatch health", parents=[common_options(str)], formatter_class=formatter,
                                     description="The node's health verdict for a scheduler.")
    add_health_arguments(parser)
    return cmd_health(parser.parse_args(argv))


def cmd_health(args: argparse.Namespace | QuickArgs) -> int:
    # A str from the fast entry's parser, a Path from gpuwatch's full one (``-c ''`` is named too: the slow path
    # then says what is wrong with it, as every command does).
    runtime_dir = client_runtime_dir_quick(config_file(args.config))
    answer = None
    if runtime_dir is not None:
        answer = _daemon_answer(runtime_dir)
    if answer is None:  # no daemon (or a config the quick read cannot take): the whole config, a direct read
        try:
            answer, runtime_dir = _direct_answer(args)
        except Exception as exc:  # noqa: BLE001 - a health check answers, whatever went wrong
            from gpuwatch.config.quick import CONFIG_ERROR_EXIT, ConfigError

            if isinstance(exc, ConfigError):
                print(f"gpuwatch: {exc}", file=sys.stderr)
                return CONFIG_ERROR_EXIT
            print(f"gpuwatch health: cannot read the GPUs: {exc}", file=sys.stderr)
            return 3 if args.format == "nagios" else 2 if args.format == "npd" else 1
    if args.slurm:
        return _slurm(only(answer, args.fault_class), runtime_dir)
    code, text = render(only(answer, args.fault_class), args.format)
    print(text)
    return code


def _daemon_answer(runtime_dir: str) -> Answer | None:
    """The daemon's verdict from its state file; None when no daemon runs there. A file the daemon's holder of
    the runtime directory's lock published but that cannot be used (missing, unreadable, not its document) is
    G014, never "no daemon" (G002): the daemon runs, its verdict is unknown."""
    refusal = client_refusal(runtime_dir)
    if refusal is not None:  # another user's state file would decide the verdict
        print(f"gpuwatch health: {refusal}", file=sys.stderr)
        return None
    try:
        raw = parse(read_bounded(os.path.join(runtime_dir, STATE_FILE_NAME), STATE_FILE_MAX_BYTES))
    except FileNotFoundError:
        answer = Answer(lines=(fault_line(UNUSABLE, None, "daemon publishes no state file"),))
    except (OSError, ValueError, RecursionError) as exc:  # JSON's (and UTF-8's) errors are ValueErrors
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__ \
            if isinstance(exc, RecursionError) else str(exc)
        answer = Answer(lines=(fault_line(UNUSABLE, None, f"daemon state unreadable: {why}"),))
    else:
        now = time.time()
        answer = from_document(raw, now, *this_boot())
        if answer.status != "unknown" and _missed_a_tick(raw, now) and _lock_free(runtime_dir):
            # Killed (SIGKILL, the OOM killer) since its last tick: its file is no live daemon's verdict. Asked only
            # once a tick is late, so a check of a running daemon never pays for the lock's import.
            return None
    if answer.status == "unknown":  # stale or unusable: a stuck daemon, or a dead one that left its file behind
        return None if _lock_free(runtime_dir) else answer
    return answer


def _missed_a_tick(raw: object, now: float) -> bool:
    """The state is older than its daemon's interval allows (1.5 ticks, and half a second for the write)."""
    try:
        return now - float(raw["taken_unix"]) > 1.5 * float(raw["daemon"]["interval_s"]) + 0.5  # type: ignore[index]
    except (TypeError, KeyError, ValueError):
        return False


def _lock_free(runtime_dir: str) -> bool:
    """Nobody holds the runtime directory's lock: no daemon runs there (`gpuwatch status` says the same)."""
    from pathlib import Path

    from gpuwatch.daemon.lock import holder

    return holder(Path(runtime_dir)) is None


def _direct_answer(args: argparse.Namespace | QuickArgs) -> tuple[Answer, str]:
    import argparse

    from gpuwatch.cli.settings import load_cli_config
    from gpuwatch.daemon.sense import read_directly
    from gpuwatch.limits import limits_in_force
    from gpuwatch.model import PublishedState
    from gpuwatch.publish.health_codes import fault_line
    from gpuwatch.publish.verdict import judge, over_crit_since

    config = load_cli_config(argparse.Namespace(config=args.config, sysfs_root=args.sysfs_root,
                                                proc_root=args.proc_root), client=True)
    settings = config.health
    effective = config.with_effective_sysfs()
    snapshot = read_directly(effective).sample()
    state = PublishedState(snapshot=snapshot, limits_c=limits_in_force(snapshot, config.thermal))
    now = snapshot.taken_monotonic
    # One reading cannot say for how long a sensor has been over crit: it counts at once.
    verdict = judge(state, settings, over_crit_since({}, state, now - settings.over_crit_s), now)
    lines = tuple(fault_line(f.code, f.gpu_id, f.detail) for f in verdict.faults)
    return no_daemon(lines, verdict.notes, settings.on("daemon_down"), settings.drain_after_checks,
                     settings.resume_after_checks), str(config.resolved_runtime_dir)


def _slurm(answer: Answer, runtime_dir: str | None) -> int:
    from pathlib import Path  # --slurm's module imports it anyway

    from gpuwatch.cli.health import slurm

    if runtime_dir is None:  # pragma: no cover - the direct path always resolves one
        print("gpuwatch health --slurm: no runtime directory to count checks in", file=sys.stderr)
        return 1
    reason = answer.lines[0] if answer.lines else ""
    try:
        done = slurm.gate(Path(runtime_dir, slurm.CHECKS_FILE_NAME), answer.healthy, reason, answer.drain_after_checks,
                          answer.resume_after_checks, slurm.node_name(os.environ))
    except (slurm.ScontrolError, OSError) as exc:
        print(f"gpuwatch health --slurm: {exc}", file=sys.stderr)
        return 1
    print(done)
    return 0
