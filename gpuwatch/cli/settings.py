"""What a command runs with: its config (the file named, else the default file, else defaults, with the command line's
overrides, the runtime directory and `--simulate`) and the log format."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path
from typing import Any

from gpuwatch.config.file import Config, load_config, parse_config
from gpuwatch.config.quick import config_file
from gpuwatch.config.runtime import (
    DEFAULT_CONFIG_PATH,
    client_runtime_dir,
    daemon_files_in,
    default_runtime_dir,
    is_simulator_dir,
    simulator_notice,
    simulator_runtime_dir,
)


def cli_config_path(args: argparse.Namespace) -> Path | None:
    """The config named on the command line, else the default file if it exists, else None (defaults)."""
    path = config_file(args.config)  # a str from `gpuwatch health`'s parser (cli/health/options.py), else a Path
    return Path(path) if path is not None else None


def load_cli_config(args: argparse.Namespace, *, client: bool = False, simulators: bool = False,
                    simulate: int | None = None, **overrides: Any) -> Config:
    """The config named on the command line, else the default file if it exists, else defaults.

    ``client``: a command that talks to a running daemon (status, pause...), which finds the system
    service's runtime directory too (``config.client_runtime_dir``), and with ``simulators`` a running
    simulator's when no real daemon runs; the daemon and ``fans-auto`` use their own
    (``config.default_runtime_dir``). ``simulate``: `run --simulate [N]` (``with_simulation``), before the runtime
    directory is chosen (a simulator's is never a real daemon's).
    """
    path = cli_config_path(args)
    for key in ("sysfs_root", "proc_root"):
        if getattr(args, key, None) is not None:
            overrides[key] = str(Path(getattr(args, key)))  # as a Path spells it, also `gpuwatch health`'s str
    config = load_config(path, overrides)
    if simulate is not None:
        config = with_simulation(config, simulate)
    return with_runtime_dir(config, client=client, simulators=simulators)


def load_daemon_config(args: argparse.Namespace) -> Config:
    """What `gpuwatch run` starts with and what every SIGHUP re-reads (the loader the Daemon is given): the
    file with the command line's overrides (``--sysfs-root``, ``--dry-run``, ``--simulate`` win over the file),
    and the start's checks of every ``[[trainer]]`` (supervise.preflight), so a reload refuses what a start
    refuses. Raises ConfigError: exit 2 at start, the file rejected whole (running config kept) at a reload."""
    from gpuwatch.supervise.preflight import check_trainers

    config = load_cli_config(args, simulate=args.simulate)
    if args.dry_run:
        config = config.model_copy(update={"fan": config.fan.model_copy(update={"mode": "dry-run"}),
                                           "power": config.power.model_copy(update={"mode": "dry-run"})})
    check_trainers(config, str(cli_config_path(args) or "the default configuration"), as_daemon=True)
    if config.http.enabled and config.http.web_config is not None:
        from gpuwatch.publish.tls import load_gate

        load_gate(config.http.web_config)  # a web config that cannot be used: exit 2, or the reload rejected
    return config


def check_config_path(args: argparse.Namespace) -> Path:
    """`check-config`'s file: ``-c FILE`` like every other command, or the positional FILE of its first form."""
    if args.file is not None and args.config is not None and args.file != args.config:
        args.parser.error(f"two files named ({args.config} and {args.file}): check one at a time")
    path: Path = args.file or args.config or Path(DEFAULT_CONFIG_PATH)
    return path


def with_runtime_dir(config: Config, *, client: bool = False, simulators: bool = False) -> Config:
    """The runtime directory resolved once, here (environment and euid), instead of on every use. A simulating
    config's is never a real daemon's (``config.runtime.simulator_runtime_dir``), for its daemon and its clients
    alike. A client that finds a simulator (``simulators``: no real daemon runs) says so on stderr, in one line."""
    if config.simulating:
        configured = None if config.runtime_dir is None else str(config.runtime_dir)
        runtime_dir, _ = simulator_runtime_dir(configured, os.environ, os.geteuid())
        return config.model_copy(update={"runtime_dir": Path(runtime_dir)})
    if config.runtime_dir is not None:
        return config
    if client:
        runtime_dir = client_runtime_dir(os.environ, os.geteuid(), daemon_files_in, simulators=simulators)
        if simulators and is_simulator_dir(runtime_dir):
            print(simulator_notice(runtime_dir), file=sys.stderr)
    else:
        runtime_dir = default_runtime_dir(os.environ, os.geteuid())
    return config.model_copy(update={"runtime_dir": Path(runtime_dir)})  # model_copy does not validate: the type


def setup_logging(level: str) -> None:
    logging.basicConfig(
        level=getattr(logging, level.upper()),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )


def with_simulation(config: Config, gpus: int) -> Config:
    """``--simulate [N]``: the config's [simulate] section switched on, N cards if given (0: keep)."""
    update: dict[str, Any] = {"enabled": True}
    if gpus:
        update["gpus"] = gpus
    data = config.model_dump()
    data["simulate"].update(update)
    return parse_config(data, "--simulate")
