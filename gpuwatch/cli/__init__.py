"""The `gpuwatch` command: argument parsing and dispatch to the daemon, status and helpers.

Exit codes: 0 ok, 1 a GPU over a limit or a failure reported (status), 2 usage or config error.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any, Sequence

from gpuwatch import __version__
from gpuwatch.cli.show import document_text, repeat, sensors_fetch, show, status_fetch, watch_seconds
from gpuwatch.cli.status import EXIT_USAGE
from gpuwatch.config.base import ConfigError, client_runtime_dir, daemon_files_in, default_runtime_dir, pci_slot_problem
from gpuwatch.config.file import (CONFIG_ERROR_EXIT, DEFAULT_CONFIG_PATH, Config, effective_config_toml, load_config,
                                  parse_config)
from gpuwatch.config.sections import remote_base_url
from gpuwatch.train.argv import FALLBACK_MODES


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:  # said with the command's own usage, not gpuwatch's
        getattr(args, "parser", parser).error(f"unrecognized arguments: {' '.join(unknown)}")
    if not getattr(args, "handler", None):
        parser.print_help()
        return EXIT_USAGE
    try:
        code = int(args.handler(args))
        sys.stdout.flush()  # here, so that a reader that went away is handled below
        return code
    except ConfigError as exc:
        print(f"gpuwatch: {exc}", file=sys.stderr)
        return CONFIG_ERROR_EXIT
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away (`gpuwatch status --watch 1 | head`): stop quietly, as `yes | head` does.
        # Later writes (the interpreter's final flush) go nowhere instead of raising again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + 13  # what a shell reports for a process ended by SIGPIPE


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gpuwatch", description="GPU health daemon for AMD training machines.")
    parser.add_argument("--version", action="version", version=f"gpuwatch {__version__}")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("-c", "--config", type=Path, help=f"config file (default {DEFAULT_CONFIG_PATH} if present)")
    common.add_argument("--sysfs-root", type=Path, help="sysfs tree to read instead of /sys (tests, captures)")
    common.add_argument("--proc-root", type=Path, help="proc tree to read instead of /proc (tests)")
    sub = parser.add_subparsers(title="commands", metavar="COMMAND")

    run = sub.add_parser("run", parents=[common], help="run the daemon in the foreground")
    run.add_argument("--dry-run", action="store_true",
                     help="compute fan and power cap writes and log them, write nothing")
    run.add_argument("--simulate", nargs="?", type=int, const=0, metavar="N",
                     help="run on N simulated RX 5600 XT cards instead of /sys (default: the config's, else 1)")
    run.set_defaults(handler=cmd_run)

    for name, helptext, handler in (
        ("status", "GPU, fan and trainer status (from the daemon, else from sysfs)", cmd_status),
        ("sensors", "one-shot reading straight from sysfs", cmd_sensors),
    ):
        p = sub.add_parser(name, parents=[common], help=helptext)
        p.add_argument("--json", action="store_true", help="print the stable JSON document (schema 1)")
        p.add_argument("--watch", type=watch_seconds, metavar="SECONDS",
                       help="refresh every SECONDS until Ctrl-C (with --json: one compact document per line)")
        p.add_argument("--color", choices=("auto", "always", "never"), default="auto")
        p.add_argument("--processes", action="store_true",
                       help="also list the processes using each GPU (pid, user, VRAM, engine busy, command)")
        p.set_defaults(handler=handler)
        if name == "status":
            p.add_argument("--remote", nargs="*", metavar="HOST",
                           help="one table for these machines' daemons (box3, box3:9840, http://box3:9840); "
                                "none named: [status] remote of the config")
            p.add_argument("--timeout", type=_positive_seconds, metavar="SECONDS",
                           help="per-host timeout of --remote (default [status] timeout_s, 3)")

    for name, helptext in (
        ("restore", "give back what the daemon changed: fans to the firmware, power caps to their original "
                    "(systemd ExecStopPost; works after a SIGKILL)"),
        ("fans-auto", "the same as restore (its first name, kept for existing units)"),
    ):
        sub.add_parser(name, parents=[common], help=helptext).set_defaults(handler=cmd_restore, verb=name)
    curve = sub.add_parser("curve", parents=[common], help="print the configured fan curve as a table and plot")
    curve.add_argument("--gpu", metavar="PCI_SLOT", help="the curve of one GPU (with its overrides)")
    curve.set_defaults(handler=cmd_curve)
    for name, helptext in (
        ("pause", "pause a supervised trainer (all when NAME is omitted) until `resume`"),
        ("resume", "resume a paused trainer"),
        ("restart", "stop a trainer gracefully and start it again (from its last checkpoint)"),
        ("simulate-reset", "reset a simulated GPU (gpuwatch run --simulate): dump, outage, hung processes"),
    ):
        p = sub.add_parser(name, parents=[common], help=helptext)
        what = "PCI slot of the simulated GPU (default: the first)" if name == "simulate-reset" else \
            "trainer name from [[trainer]] (default: all)"
        p.add_argument("name", nargs="?", help=what)
        p.set_defaults(handler=cmd_control, verb=name)

    train = sub.add_parser("train", help="run a training script with the training patches (gpuwatch[train])",
                           usage="gpuwatch train [--conv2d-fallback [auto|on|off]] [--conv2d-autotune on|off] "
                                 "[--conv2d-tune-cache DIR] [--spawn] [--heartbeat-file FILE] [--pause-file FILE] "
                                 "-- python train.py ARGS\n"
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
    train.add_argument("--heartbeat-file", metavar="FILE", help="heartbeat JSON path (default $GPUWATCH_HEARTBEAT_FILE)")
    train.add_argument("--pause-file", metavar="FILE",
                       help="hold at the step boundary while it exists (default $GPUWATCH_PAUSE_FILE)")
    train.add_argument("command", nargs=argparse.REMAINDER, help="python SCRIPT ARGS, python -m MODULE ARGS, or any command that starts Python (torchrun ...)")
    train.set_defaults(handler=cmd_train)

    check = sub.add_parser("check-config", help="validate a config file and print the effective config")
    check.add_argument("file", nargs="?", type=Path, help=f"default {DEFAULT_CONFIG_PATH}")
    check.set_defaults(handler=cmd_check_config)
    for command in sub.choices.values():
        command.set_defaults(parser=command)  # a usage error found later is said with the command's usage
    return parser


def cli_config_path(args: argparse.Namespace) -> Path | None:
    """The config named on the command line, else the default file if it exists, else None (defaults)."""
    path: Path | None = args.config
    if path is None and DEFAULT_CONFIG_PATH.exists():
        path = DEFAULT_CONFIG_PATH
    return path


def load_cli_config(args: argparse.Namespace, *, client: bool = False, **overrides: Any) -> Config:
    """The config named on the command line, else the default file if it exists, else defaults.

    ``client``: a command that talks to a running daemon (status, pause...), which finds the system
    service's runtime directory too (``config.client_runtime_dir``); the daemon and ``fans-auto`` use
    their own (``config.default_runtime_dir``).
    """
    path = cli_config_path(args)
    for key in ("sysfs_root", "proc_root"):
        if getattr(args, key, None) is not None:
            overrides[key] = str(getattr(args, key))
    return with_runtime_dir(load_config(path, overrides), client=client)


def with_runtime_dir(config: Config, *, client: bool = False) -> Config:
    """The runtime directory resolved once, here (environment and euid), instead of on every use."""
    if config.runtime_dir is not None:
        return config
    if client:
        runtime_dir = client_runtime_dir(os.environ, os.geteuid(), daemon_files_in)
    else:
        runtime_dir = default_runtime_dir(os.environ, os.geteuid())
    return config.model_copy(update={"runtime_dir": runtime_dir})


def setup_logging(level: str) -> None:
    logging.basicConfig(
        level=getattr(logging, level.upper()),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )


def cmd_run(args: argparse.Namespace) -> int:
    from gpuwatch.daemon.loop import Daemon
    from gpuwatch.daemon.sdnotify import Notifier
    from gpuwatch.supervise.preflight import check_trainers

    def load() -> Config:
        # Also what SIGHUP re-runs: same file, same command-line overrides.
        config = load_cli_config(args)
        if args.dry_run:
            config = config.model_copy(update={"fan": config.fan.model_copy(update={"mode": "dry-run"}),
                                               "power": config.power.model_copy(update={"mode": "dry-run"})})
        if args.simulate is not None:
            config = with_simulation(config, args.simulate)
        return config

    config = load()
    check_trainers(config, str(cli_config_path(args) or "the default configuration"), as_daemon=True)
    setup_logging(config.log_level)
    notifier = Notifier.from_env(unset=True)  # trainers we spawn must not inherit NOTIFY_SOCKET
    return Daemon(config, config_path=cli_config_path(args), load=load, notifier=notifier).run()


def cmd_train(args: argparse.Namespace) -> int:
    from gpuwatch.train.argv import LaunchCommandError, build_train_command

    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    try:
        argv, env = build_train_command(args.conv2d_fallback, args.spawn, command, os.environ,
                                        autotune=args.conv2d_autotune == "on", tune_cache=args.conv2d_tune_cache,
                                        heartbeat_file=args.heartbeat_file, pause_file=args.pause_file)
    except LaunchCommandError as exc:
        args.parser.error(str(exc))  # train's usage, exit 2
    try:
        os.execvpe(argv[0], argv, env)  # the launcher, or the command itself, replaces this process
    except OSError as exc:
        print(f"gpuwatch train: cannot run {argv[0]!r}: {exc.strerror}", file=sys.stderr)
        return 127


def cmd_restore(args: argparse.Namespace) -> int:
    from gpuwatch.actuation import restore_file_path
    from gpuwatch.daemon.compose import restore_all

    try:
        config = load_cli_config(args)
    except ConfigError as exc:
        # ExecStopPost runs this after every exit, also when the file was broken while the daemon ran
        # (a rejected reload): fans and caps must still go back, so fall back to the defaults.
        print(f"gpuwatch {args.verb}: {exc}\ngpuwatch {args.verb}: using the default settings", file=sys.stderr)
        config = with_runtime_dir(load_config(None, {"sysfs_root": str(args.sysfs_root)} if args.sysfs_root else None))
    setup_logging("debug" if config.log_level == "debug" else "warning")  # what was handed back is printed below
    config = config.with_effective_sysfs()  # the simulated tree when the config simulates, like the daemon
    result = restore_all(config)
    for line in result.done:
        print(line)
    if not result.done + result.problems:
        print(f"nothing to hand back: no restore file ({restore_file_path(config.resolved_runtime_dir, '*')}) "
              f"and no fan in manual mode "
              f"under {config.sysfs_root}; no power cap lowered")
    for problem in result.problems:
        print(f"gpuwatch {args.verb}: {problem}", file=sys.stderr)
    return 1 if result.problems else 0


def cmd_curve(args: argparse.Namespace) -> int:
    from gpuwatch.cli.curve import render_curve

    config = load_cli_config(args)
    if not args.gpu:
        print(render_curve(config.fan), end="")
        return 0
    problem = pci_slot_problem(args.gpu)
    if problem:
        print(f"gpuwatch curve: --gpu {problem}", file=sys.stderr)
        return EXIT_USAGE
    present = _amdgpu_slots(config)
    if args.gpu not in config.fan.gpus and args.gpu not in present:
        print(f"gpuwatch curve: no amdgpu GPU {args.gpu} here ({', '.join(present) or 'none found'}) and no "
              f"[fan.gpus.\"{args.gpu}\"] in the config ({', '.join(config.fan.gpus) or 'none'})", file=sys.stderr)
        return EXIT_USAGE
    if args.gpu not in config.fan.gpus:
        print(f"# GPU {args.gpu}: no [fan.gpus.\"{args.gpu}\"] overrides, it follows the global curve")
    print(render_curve(config.fan.for_gpu(args.gpu)), end="")
    return 0


def _amdgpu_slots(config: Config) -> list[str]:
    """The amdgpu GPUs of the sysfs tree the config means (the fan curve drives only those)."""
    from gpuwatch.gpus.amdgpu import discover
    from gpuwatch.sysfs import Sysfs

    return [card.gpu_id for card in discover(Sysfs(config.with_effective_sysfs().sysfs_root)).cards]


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

    config = load_cli_config(args, client=True)
    try:
        ok, message = send_command(config.control_socket, args.verb, args.name)
    except ControlError as exc:
        print(f"gpuwatch: {exc}", file=sys.stderr)
        return 1
    print(message if ok else f"gpuwatch: {message}", file=sys.stdout if ok else sys.stderr)
    return 0 if ok else EXIT_USAGE


def cmd_check_config(args: argparse.Namespace) -> int:
    from gpuwatch.supervise.preflight import check_trainers

    path = args.file or DEFAULT_CONFIG_PATH
    config = load_config(path)
    # As root, check as the daemon (a root service) will run it; as a user, what holds for anyone.
    check_trainers(config, str(path), as_daemon=os.geteuid() == 0)
    print(f"# {path}: valid. Effective configuration:")
    print(effective_config_toml(config), end="")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    config = load_cli_config(args, client=True)
    if args.remote is not None:
        return _show_remote(args, config)
    return show(args, status_fetch(config, args.processes))


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
        text = document_text(fleet.to_json(results, now), args) if args.json else fleet.render(results, now, color)
        return text, fleet.fleet_exit_code(results)

    return repeat(args, once)


def cmd_sensors(args: argparse.Namespace) -> int:
    return show(args, sensors_fetch(load_cli_config(args, client=True), args.processes))


def _positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0 < value <= 60:
        raise argparse.ArgumentTypeError(f"{text} must be above 0 and at most 60 seconds")
    return value


if __name__ == "__main__":
    sys.exit(main())
