"""The `gpuwatch` command: argument parsing and dispatch to the daemon, status and helpers.

Exit codes: 0 ok, 1 a GPU over a limit or a failure reported (status), 2 usage or config error.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable, Sequence

from gpuwatch import __version__
from gpuwatch.cli.status import EXIT_USAGE, exit_code, render
from gpuwatch.config import (
    CONFIG_ERROR_EXIT,
    DEFAULT_CONFIG_PATH,
    Config,
    ConfigError,
    default_runtime_dir,
    effective_config_toml,
    load_config,
    parse_config,
    remote_base_url,
)
from gpuwatch.model import PublishedState
from gpuwatch.publish.document import StatusDocument, to_document
from gpuwatch.publish.state import is_stale, read_state_file
from gpuwatch.train.argv import FALLBACK_MODES


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "handler", None):
        parser.print_help()
        return EXIT_USAGE
    try:
        return int(args.handler(args))
    except ConfigError as exc:
        print(f"gpuwatch: {exc}", file=sys.stderr)
        return CONFIG_ERROR_EXIT
    except KeyboardInterrupt:
        return 130


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gpuwatch", description="GPU health daemon for AMD training machines.")
    parser.add_argument("--version", action="version", version=f"gpuwatch {__version__}")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("-c", "--config", type=Path, help=f"config file (default {DEFAULT_CONFIG_PATH} if present)")
    common.add_argument("--sysfs-root", type=Path, help="sysfs tree to read instead of /sys (tests, captures)")
    sub = parser.add_subparsers(title="commands", metavar="COMMAND")

    run = sub.add_parser("run", parents=[common], help="run the daemon in the foreground")
    run.add_argument("--dry-run", action="store_true", help="compute fan writes and log them, write nothing")
    run.add_argument("--simulate", nargs="?", type=int, const=0, metavar="N",
                     help="run on N simulated RX 5600 XT cards instead of /sys (default: the config's, else 1)")
    run.set_defaults(handler=cmd_run)

    for name, helptext, handler in (
        ("status", "GPU, fan and trainer status (from the daemon, else from sysfs)", cmd_status),
        ("sensors", "one-shot reading straight from sysfs", cmd_sensors),
    ):
        p = sub.add_parser(name, parents=[common], help=helptext)
        p.add_argument("--json", action="store_true", help="print the stable JSON document (schema 1)")
        p.add_argument("--watch", type=float, metavar="SECONDS", help="refresh every SECONDS until Ctrl-C")
        p.add_argument("--color", choices=("auto", "always", "never"), default="auto")
        p.set_defaults(handler=handler)
        if name == "status":
            p.add_argument("--remote", nargs="*", metavar="HOST",
                           help="one table for these machines' daemons (box3, box3:9840, http://box3:9840); "
                                "none named: [status] remote of the config")
            p.add_argument("--timeout", type=_positive_seconds, metavar="SECONDS",
                           help="per-host timeout of --remote (default [status] timeout_s, 3)")

    fans_auto = sub.add_parser("fans-auto", parents=[common],
                               help="hand every fan back to the firmware (systemd ExecStopPost)")
    fans_auto.set_defaults(handler=cmd_fans_auto)
    curve = sub.add_parser("curve", parents=[common], help="print the configured fan curve as a table and plot")
    curve.add_argument("--gpu", metavar="PCI_SLOT", help="the curve of one GPU (with its overrides)")
    curve.set_defaults(handler=cmd_curve)
    for name, helptext in (
        ("pause", "pause a supervised trainer (all when NAME is omitted) until `resume`"),
        ("resume", "resume a paused trainer"),
        ("restart", "stop a trainer gracefully and start it again (from its last checkpoint)"),
    ):
        p = sub.add_parser(name, parents=[common], help=helptext)
        p.add_argument("name", nargs="?", help="trainer name from [[trainer]] (default: all)")
        p.set_defaults(handler=cmd_control, verb=name)

    train = sub.add_parser("train", help="run a training script with the training patches (gpuwatch[train])",
                           usage="gpuwatch train [--conv2d-fallback auto|on|off] [--conv2d-autotune on|off] "
                                 "[--conv2d-tune-cache DIR] [--spawn] -- python train.py ARGS")
    train.add_argument("--conv2d-fallback", choices=FALLBACK_MODES, default="auto",
                       help="im2col Conv2d instead of MIOpen: auto = only where a native probe conv fails")
    train.add_argument("--conv2d-autotune", choices=("on", "off"), default="on",
                       help="fallback: measure its MIOpen-free paths per convolution and keep the fastest (default on)")
    train.add_argument("--conv2d-tune-cache", metavar="DIR",
                       help="keep the fallback's measured choices here ('none': memory only; "
                            "default: $XDG_CACHE_HOME/gpuwatch)")
    train.add_argument("--spawn", action="store_true", help="spawn start method, persistent DataLoader workers")
    train.add_argument("command", nargs=argparse.REMAINDER, help="python SCRIPT ARGS or python -m MODULE ARGS")
    train.set_defaults(handler=cmd_train)

    check = sub.add_parser("check-config", help="validate a config file and print the effective config")
    check.add_argument("file", nargs="?", type=Path, help=f"default {DEFAULT_CONFIG_PATH}")
    check.set_defaults(handler=cmd_check_config)
    return parser


def cli_config_path(args: argparse.Namespace) -> Path | None:
    """The config named on the command line, else the default file if it exists, else None (defaults)."""
    path: Path | None = args.config
    if path is None and DEFAULT_CONFIG_PATH.exists():
        path = DEFAULT_CONFIG_PATH
    return path


def load_cli_config(args: argparse.Namespace, **overrides: Any) -> Config:
    """The config named on the command line, else the default file if it exists, else defaults."""
    path = cli_config_path(args)
    if getattr(args, "sysfs_root", None) is not None:
        overrides["sysfs_root"] = str(args.sysfs_root)
    return with_runtime_dir(load_config(path, overrides))


def with_runtime_dir(config: Config) -> Config:
    """The runtime directory resolved once, here (environment and euid), instead of on every use."""
    if config.runtime_dir is not None:
        return config
    return config.model_copy(update={"runtime_dir": default_runtime_dir(os.environ, os.geteuid())})


def setup_logging(level: str) -> None:
    logging.basicConfig(
        level=getattr(logging, level.upper()),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )


def cmd_run(args: argparse.Namespace) -> int:
    from gpuwatch.daemon.loop import Daemon
    from gpuwatch.daemon.sdnotify import Notifier

    def load() -> Config:
        # Also what SIGHUP re-runs: same file, same command-line overrides.
        config = load_cli_config(args)
        if args.dry_run:
            config = config.model_copy(update={"fan": config.fan.model_copy(update={"mode": "dry-run"})})
        if args.simulate is not None:
            config = with_simulation(config, args.simulate)
        return config

    config = load()
    setup_logging(config.log_level)
    notifier = Notifier.from_env(unset=True)  # trainers we spawn must not inherit NOTIFY_SOCKET
    return Daemon(config, config_path=cli_config_path(args), load=load, notifier=notifier).run()


def cmd_train(args: argparse.Namespace) -> int:
    from gpuwatch.train.argv import LaunchCommandError, build_launch_argv

    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    try:
        argv = build_launch_argv(args.conv2d_fallback, args.spawn, command,
                                 autotune=args.conv2d_autotune == "on", tune_cache=args.conv2d_tune_cache)
    except LaunchCommandError as exc:
        print(f"gpuwatch train: {exc}", file=sys.stderr)
        return EXIT_USAGE
    os.execvp(argv[0], argv)  # the launcher (python -m gpuwatch.launch) replaces this process


def cmd_fans_auto(args: argparse.Namespace) -> int:
    from gpuwatch.fan.restore import RestoreFile, fans_auto
    from gpuwatch.sysfs import Sysfs

    try:
        config = load_cli_config(args)
    except ConfigError as exc:
        # ExecStopPost runs this after every exit, also when the file was broken while the daemon ran
        # (a rejected reload): the fans must still go back, so fall back to the defaults.
        print(f"gpuwatch fans-auto: {exc}\ngpuwatch fans-auto: using the default settings", file=sys.stderr)
        config = with_runtime_dir(load_config(None, {"sysfs_root": str(args.sysfs_root)} if args.sysfs_root else None))
    setup_logging(config.log_level)
    problems = fans_auto(Sysfs(config.sysfs_root), RestoreFile(config.resolved_runtime_dir / "fan-restore.json"))
    for problem in problems:
        print(f"gpuwatch fans-auto: {problem}", file=sys.stderr)
    return 1 if problems else 0


def cmd_curve(args: argparse.Namespace) -> int:
    from gpuwatch.cli.curve import render_curve

    config = load_cli_config(args)
    print(render_curve(config.fan.for_gpu(args.gpu) if args.gpu else config.fan), end="")
    return 0


def with_simulation(config: Config, gpus: int) -> Config:
    """``--simulate [N]``: the config's [simulate] section switched on, N cards if given (0: keep)."""
    update: dict[str, Any] = {"enabled": True}
    if gpus:
        update["gpus"] = gpus
    data = config.model_dump()
    data["simulate"].update(update)
    return parse_config(data, "--simulate")


def cmd_control(args: argparse.Namespace) -> int:
    from gpuwatch.daemon.control import ControlError, send_command

    config = load_cli_config(args)
    try:
        ok, message = send_command(config.control_socket, args.verb, args.name)
    except ControlError as exc:
        print(f"gpuwatch: {exc}", file=sys.stderr)
        return 1
    print(message if ok else f"gpuwatch: {message}", file=sys.stdout if ok else sys.stderr)
    return 0 if ok else EXIT_USAGE


def cmd_check_config(args: argparse.Namespace) -> int:
    path = args.file or DEFAULT_CONFIG_PATH
    config = load_config(path)
    print(f"# {path}: valid. Effective configuration:")
    print(effective_config_toml(config), end="")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    config = load_cli_config(args)
    if args.remote is not None:
        return _show_remote(args, config)
    return _show(args, config, lambda: daemon_document(config) or (sysfs_document(config), _NOT_RUNNING))


def _show_remote(args: argparse.Namespace, config: Config) -> int:
    from gpuwatch.cli import fleet
    from gpuwatch.cli.remote import fetch_all

    try:
        urls = [remote_base_url(url) for url in args.remote] or config.status.remote
    except ValueError as exc:
        print(f"gpuwatch status --remote: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if not urls:
        print("gpuwatch status --remote: no machines: name them (--remote box1 box2:9840) or list them in "
              "[status] remote", file=sys.stderr)
        return EXIT_USAGE
    timeout_s = args.timeout or config.status.timeout_s

    def once(color: bool) -> tuple[str, int]:
        results = fetch_all(urls, timeout_s)
        now = time.time()
        text = json.dumps(fleet.to_json(results, now), indent=2, sort_keys=True) + "\n" if args.json else \
            fleet.render(results, now, color)
        return text, fleet.fleet_exit_code(results)

    return _repeat(args, once)


def cmd_sensors(args: argparse.Namespace) -> int:
    config = load_cli_config(args)
    return _show(args, config, lambda: (sysfs_document(config), None))


_NOT_RUNNING = "gpuwatch daemon is not running: values read directly from sysfs"


def daemon_document(config: Config) -> tuple[StatusDocument, str | None] | None:
    """The daemon's published state if it is running and fresh, else None."""
    doc = read_state_file(config.state_file)
    daemon = doc.get("daemon") if doc else None
    if not doc or not daemon:
        return None
    pid = daemon.get("pid")
    if not isinstance(pid, int) or not _alive(pid):
        return None
    age = time.time() - float(doc.get("taken_unix") or 0)
    if is_stale(age, float(daemon.get("interval_s") or 1)):
        daemon.setdefault("failures", []).append(f"state is {age:.0f}s old: the control loop is stuck")
    return doc, None


def sysfs_document(config: Config) -> StatusDocument:
    from gpuwatch.daemon.compose import build_sources
    from gpuwatch.gpus.sampler import Sampler

    snapshot = Sampler(build_sources(config)).sample()
    return to_document(PublishedState(snapshot=snapshot), config.thermal, source="sysfs")


def _show(args: argparse.Namespace, config: Config, fetch: Callable[[], tuple[StatusDocument, str | None]]) -> int:
    def once(color: bool) -> tuple[str, int]:
        doc, note = fetch()
        text = json.dumps(doc, indent=2, sort_keys=True) + "\n" if args.json else render(doc, color=color, note=note)
        return text, exit_code(doc)

    return _repeat(args, once)


def _repeat(args: argparse.Namespace, once: Callable[[bool], tuple[str, int]]) -> int:
    """Print what ``once(color)`` renders, every ``--watch`` seconds (screen cleared) or once; its exit code."""
    color = args.color == "always" or (args.color == "auto" and sys.stdout.isatty() and "NO_COLOR" not in os.environ)
    while True:
        text, code = once(color)
        if args.watch and not args.json:
            print("\033[H\033[2J", end="")
        print(text, end="")
        sys.stdout.flush()
        if not args.watch:
            return code
        time.sleep(args.watch)


def _positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0 < value <= 60:
        raise argparse.ArgumentTypeError(f"{text} must be above 0 and at most 60 seconds")
    return value


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


if __name__ == "__main__":
    sys.exit(main())
