"""The handlers of `gpuwatch`'s commands: each takes the parsed arguments and returns the exit code."""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuwatch.cli.settings import (
    check_config_path,
    cli_config_path,
    load_cli_config,
    load_daemon_config,
    setup_logging,
    with_runtime_dir,
)
from gpuwatch.cli.show import document_text, repeat, sensors_fetch, show, status_fetch
from gpuwatch.cli.status import EXIT_USAGE
from gpuwatch.config.base import ConfigError
from gpuwatch.config.file import Config, effective_config_toml, load_config
from gpuwatch.config.runtime import is_simulator_dir, simulator_runtime_dir
from gpuwatch.config.sections import remote_base_url
from gpuwatch.config.slots import gpus_listed, resolve_gpu

if TYPE_CHECKING:
    from gpuwatch.cli.remote import Access  # the command line's remote access: imported where --remote is used


def cmd_run(args: argparse.Namespace) -> int:
    from gpuwatch.daemon.lock import GpuHeld, Held, Untrusted, acquire
    from gpuwatch.daemon.loop import Daemon
    from gpuwatch.daemon.sdnotify import Notifier

    def load() -> Config:  # also what SIGHUP re-runs: same file, overrides and checks
        return load_daemon_config(args)

    config = load()
    setup_logging(config.log_level)
    try:
        # Held until this process exits (the kernel drops it on any exit, SIGKILL included).
        runtime_lock = acquire(config.resolved_runtime_dir)
    except Held as exc:
        pid = f"kill -TERM {exc.pid}" if exc.pid else "kill -TERM <pid>"
        print(f"gpuwatch run: {exc}; stop that one first (systemctl stop gpuwatch, or {pid})", file=sys.stderr)
        return EXIT_USAGE
    except Untrusted as exc:
        print(f"gpuwatch run: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if runtime_lock.problem:
        logging.getLogger("gpuwatch").warning("%s: a second daemon with this runtime directory would not be "
                                              "refused", runtime_lock.problem)
    if config.simulating:
        _say_where_simulating(args, config)
    notifier = Notifier.from_env(unset=True)  # trainers we spawn must not inherit NOTIFY_SOCKET
    try:
        daemon = Daemon(config, config_path=cli_config_path(args), load=load, notifier=notifier)
    except GpuHeld as exc:
        print(f"gpuwatch run: {exc}", file=sys.stderr)
        runtime_lock.release()
        return EXIT_USAGE
    try:
        return daemon.run()
    finally:
        runtime_lock.release()


def _say_where_simulating(args: argparse.Namespace, config: Config) -> None:
    """One line on where a simulator publishes and how the clients reach it; a warning when the configured
    ``runtime_dir`` was a real daemon's (``config.runtime.simulator_runtime_dir`` moved it)."""
    log = logging.getLogger("gpuwatch")
    runtime_dir = config.resolved_runtime_dir
    try:
        configured = load_config(cli_config_path(args)).runtime_dir
    except ConfigError:  # loaded a moment ago: only a file changed in between
        configured = None
    _, why = simulator_runtime_dir(None if configured is None else str(configured), os.environ, os.geteuid())
    if why:
        log.warning("%s", why)
    if is_simulator_dir(runtime_dir):
        log.info("simulating in %s (never where real runs attach): `gpuwatch status`, `train`, `pause` and `logs` "
                 "find it while no real daemon runs", runtime_dir)
    else:
        log.info("simulating in %s (the configured runtime_dir): clients reach it with -c %s or "
                 "RUNTIME_DIRECTORY=%s", runtime_dir, cli_config_path(args), runtime_dir)


def cmd_train(args: argparse.Namespace) -> int:
    """`gpuwatch train`: the run's parent, attached to the daemon (docs/attached-runs.md). Under a configured
    trainer (the daemon is its parent already, ``GPUWATCH_RUN_ID``), or with ``--no-attach`` and no
    ``--restart``, it execs the command as before: there is nothing for a parent to do."""
    from gpuwatch.supervise.orphans import RUN_ENV
    from gpuwatch.train.argv import LaunchCommandError, build_train_command

    command = args.command[1:] if args.command[:1] == ["--"] else args.command

    def build(cmd: list[str], environ: Mapping[str, str] = os.environ) -> tuple[list[str], dict[str, str]]:
        return build_train_command(args.conv2d_fallback, args.spawn, cmd, environ,
                                   autotune=args.conv2d_autotune == "on", tune_cache=args.conv2d_tune_cache,
                                   heartbeat_file=args.heartbeat_file, pause_file=args.pause_file)

    try:
        argv, env = build(command)
    except LaunchCommandError as exc:
        args.parser.error(str(exc))  # train's usage, exit 2
    gpus = _train_gpus(args)
    if os.environ.get(RUN_ENV) or (args.no_attach and not args.restart.on_failure):
        try:
            os.execvpe(argv[0], argv, env)  # the launcher, or the command itself, replaces this process
        except OSError as exc:
            print(f"gpuwatch train: cannot run {argv[0]!r}: {exc.strerror}", file=sys.stderr)
            return 127
    from gpuwatch.cli.train.start import start_run

    return start_run(args, command, gpus, build)


def _train_gpus(args: argparse.Namespace) -> list[str]:
    """`--gpu` slots as sysfs names them, each once; `--name` checked; `--resume-args` needs its glob."""
    from gpuwatch.attach import NAME_MAX_CHARS

    try:
        # An index or card name counts this machine's GPUs, as `gpuwatch status` lists them (/sys, read only when
        # one is given): the run's processes use the real cards.
        here = _machine_gpus() if any(":" not in g for g in args.gpu or []) else []
        gpus = list(dict.fromkeys(resolve_gpu(text, here) for text in args.gpu or []))
    except ValueError as exc:
        args.parser.error(f"--gpu {exc}")
    if args.name is not None and not (0 < len(args.name) <= NAME_MAX_CHARS and args.name.isprintable()):
        args.parser.error(f"--name: 1 to {NAME_MAX_CHARS} printable characters, got {args.name!r}")
    if "{last_checkpoint}" in (args.resume_args or "") and not args.checkpoint_glob:
        args.parser.error("--resume-args uses {last_checkpoint}: give --checkpoint-glob to find it")
    return gpus


def _machine_gpus() -> list[tuple[str, str]]:
    """(slot, DRM card) of this machine's amdgpu GPUs, in `gpuwatch status`'s order."""
    from gpuwatch.config.file import REAL_SYSFS_ROOT
    from gpuwatch.gpus.amdgpu import discover
    from gpuwatch.sysfs import Sysfs

    found = discover(Sysfs(REAL_SYSFS_ROOT))
    return [(card.gpu_id, card.card) for card in found.cards]


def cmd_restore(args: argparse.Namespace) -> int:
    from gpuwatch.actuation.actuator import restore_file_path
    from gpuwatch.daemon.compose import restore_all
    from gpuwatch.daemon.lock import holder
    from gpuwatch.safefs import client_refusal

    try:
        config = load_cli_config(args)
    except ConfigError as exc:
        # ExecStopPost runs this after every exit, also when the file was broken while the daemon ran
        # (a rejected reload): fans and caps must still go back, so fall back to the defaults, in the
        # runtime directory the file sets if it can still be read (its records are there).
        overrides = {"sysfs_root": str(args.sysfs_root)} if args.sysfs_root else {}
        runtime_dir = _configured_runtime_dir(cli_config_path(args))
        if runtime_dir:
            overrides["runtime_dir"] = runtime_dir
        also = f" in its runtime_dir {runtime_dir}" if runtime_dir else ""
        print(f"gpuwatch {args.verb}: {exc}\ngpuwatch {args.verb}: using the default settings{also}", file=sys.stderr)
        config = with_runtime_dir(load_config(None, overrides or None))
    setup_logging("debug" if config.log_level == "debug" else "warning")  # what was handed back is printed below
    running = holder(config.resolved_runtime_dir)
    if running is not None and not args.force:
        # The daemon would lower the caps again, and its record of the originals would be gone (issue 31).
        print(f"gpuwatch {args.verb}: the daemon (pid {running}) runs with {config.resolved_runtime_dir} and "
              "gives fans and caps back itself when it stops: stop it (systemctl stop gpuwatch, or kill -TERM "
              f"{running}); --force restores beside it (it records again before its next write)", file=sys.stderr)
        return EXIT_USAGE
    refusal = client_refusal(config.resolved_runtime_dir)
    if refusal is not None:  # another user's records would choose what root writes to the cards
        print(f"gpuwatch {args.verb}: {refusal}", file=sys.stderr)
        return EXIT_USAGE
    config = config.with_effective_sysfs()  # the simulated tree when the config simulates, like the daemon
    result = restore_all(config)
    for line in result.done:
        print(line)
    if not result.done + result.problems:
        files = restore_file_path(config.resolved_runtime_dir, "*")
        print(f"nothing to hand back: no restore file ({files}) and no fan in manual mode under "
              f"{config.sysfs_root}; no power cap lowered")
    for problem in result.problems:
        print(f"gpuwatch {args.verb}: {problem}", file=sys.stderr)
    return 1 if result.problems else 0


def _configured_runtime_dir(path: Path | None) -> str | None:
    """The ``runtime_dir`` of a config file that does not load (config.quick.broken_file_runtime_dir)."""
    from gpuwatch.config.quick import broken_file_runtime_dir
    from gpuwatch.safefs import read_bounded

    if path is None:
        return None
    try:
        return broken_file_runtime_dir(read_bounded(path))
    except (OSError, ValueError):
        return None


def cmd_curve(args: argparse.Namespace) -> int:
    from gpuwatch.cli.curve import render_curve

    config = load_cli_config(args)
    if not args.gpu:
        print(render_curve(config.fan), end="")
        return 0
    present = _amdgpu_gpus(config)
    try:
        slot = resolve_gpu(args.gpu, present)
    except ValueError as exc:
        print(f"gpuwatch curve: --gpu {exc}", file=sys.stderr)
        return EXIT_USAGE
    if slot not in config.fan.gpus and slot not in dict(present):
        print(f"gpuwatch curve: no amdgpu GPU {slot} here ({gpus_listed(present)}) and no "
              f"[fan.gpus.\"{slot}\"] in the config ({', '.join(config.fan.gpus) or 'none'})", file=sys.stderr)
        return EXIT_USAGE
    if slot not in config.fan.gpus:
        print(f"# GPU {slot}: no [fan.gpus.\"{slot}\"] overrides, it follows the global curve")
    print(render_curve(config.fan.for_gpu(slot)), end="")
    return 0


def _amdgpu_gpus(config: Config) -> list[tuple[str, str]]:
    """(slot, DRM card) of the amdgpu GPUs of the sysfs tree the config means (the fan curve drives only those)."""
    from gpuwatch.gpus.amdgpu import discover
    from gpuwatch.sysfs import Sysfs

    return [(card.gpu_id, card.card) for card in discover(Sysfs(config.with_effective_sysfs().sysfs_root)).cards]


def cmd_check_config(args: argparse.Namespace) -> int:
    from gpuwatch.supervise.preflight import check_trainers

    path = check_config_path(args)
    config = load_config(path)
    # As root, check as the daemon (a root service) will run it; as a user, what holds for anyone.
    check_trainers(config, str(path), as_daemon=os.geteuid() == 0)
    if config.http.web_config is not None:
        from gpuwatch.publish.tls import load_gate

        load_gate(config.http.web_config)  # the web config and the files it names, as the daemon's start reads them
    print(f"# {path}: valid. Effective configuration:")
    print(effective_config_toml(config), end="")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    from gpuwatch.cli.leftovers import leftovers
    from gpuwatch.daemon.lock import holder

    config = load_cli_config(args, client=True, simulators=args.remote is None)
    if args.history is not None:
        return _show_history(args, config)
    if args.remote is not None:
        if args.gpu:
            args.parser.error("--gpu chooses among this machine's GPUs: not with --remote")
        return _show_remote(args, config)
    # A daemon that lives (its runtime directory's lock) owns its restore files, also when it cannot be asked.
    return show(args, status_fetch(config, args.processes), lambda doc: [] if holder(config.resolved_runtime_dir)
                else leftovers(doc, config.resolved_runtime_dir))


def _remote_targets(args: argparse.Namespace, config: Config, command: str) -> tuple[list[str], Access] | None:
    """``--remote``'s machines (else ``[status] remote``) and how to reach them; None after a one-line error."""
    from gpuwatch.cli.remote import access

    try:
        urls = [remote_base_url(url) for url in args.remote] or config.status.remote
        return urls, access(config.status, os.environ, args.ca_file, args.user, args.password_file)
    except ValueError as exc:
        print(f"{command}: {exc}", file=sys.stderr)
        return None


def _show_remote(args: argparse.Namespace, config: Config) -> int:
    from gpuwatch.cli import fleet
    from gpuwatch.cli.remote import fetch_all

    if (targets := _remote_targets(args, config, "gpuwatch status --remote")) is None:
        return EXIT_USAGE
    urls, reach = targets
    if not urls:
        print("gpuwatch status --remote: no machines: name them (--remote box1 box2:9840) or list them in "
              "[status] remote", file=sys.stderr)
        return EXIT_USAGE
    timeout_s = args.timeout or config.status.timeout_s

    def once(color: bool) -> tuple[str, int]:
        results = fetch_all(urls, timeout_s, reach)
        now = time.time()
        text = document_text(fleet.to_json(results, now), args) if args.json else fleet.render(results, now, color)
        return text, fleet.fleet_exit_code(results)

    return repeat(args, once)


def _show_history(args: argparse.Namespace, config: Config) -> int:
    """`status --history`: the ring's files on this machine, or one host's /history (--remote HOST)."""
    from gpuwatch.cli import history_view

    if args.gpu or args.processes:
        args.parser.error("--history shows every GPU's charts: not with --gpu or --processes")
    if args.remote is not None:
        from gpuwatch.cli.remote import fetch_history

        if (targets := _remote_targets(args, config, "gpuwatch status --history")) is None:
            return EXIT_USAGE
        urls, reach = targets
        if len(urls) != 1:
            print("gpuwatch status --history --remote: name one machine (--remote box1)", file=sys.stderr)
            return EXIT_USAGE
        timeout_s = args.timeout or config.status.timeout_s

        def fetch() -> tuple[dict[str, Any] | None, str | None]:
            return fetch_history(urls[0], args.history, timeout_s, reach)
    else:
        from gpuwatch.publish.history_store import read_local

        def fetch() -> tuple[dict[str, Any] | None, str | None]:
            return read_local(config.history_dir, args.history, time.time())

    def once(color: bool) -> tuple[str, int]:
        document, problem = fetch()
        if document is None:
            print(f"gpuwatch status --history: {problem}", file=sys.stderr)
            return "", 1
        return (document_text(document, args) if args.json else history_view.render(document, color)), 0

    return repeat(args, once)


def cmd_sensors(args: argparse.Namespace) -> int:
    return show(args, sensors_fetch(load_cli_config(args, client=True, simulators=True), args.processes))
