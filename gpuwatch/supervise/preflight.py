"""What can be known about a ``[[trainer]]`` before it starts: its program, its cwd and its user.

The daemon checks every trainer at start (and `gpuwatch check-config` does the same), so a typo is one
line and exit 2 instead of a trainer that fails at every spawn. What only fails at spawn time (a
program deleted later, a user removed) puts the trainer in ``failed`` (supervisor.py).

The user rule is process.identity's, the one the spawn itself applies.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Mapping
from pathlib import Path

from gpuwatch.config.base import ConfigError
from gpuwatch.config.file import Config
from gpuwatch.config.trainer import TrainerConfig
from gpuwatch.supervise.process import SpawnError, group_id, identity, passwd_entry


def check_trainers(config: Config, source: str, as_daemon: bool) -> None:
    """Raise ConfigError with one line per problem of every ``[[trainer]]`` (the CLI exits 2)."""
    problems = [problem for trainer in config.trainer for problem in trainer_problems(trainer, as_daemon)]
    if problems:
        lines = [f"{source}: the trainers cannot be started ({len(problems)} problem(s)):"]
        raise ConfigError("\n".join(lines + [f"  {problem}" for problem in problems]))


def trainer_problems(trainer: TrainerConfig, as_daemon: bool, environ: Mapping[str, str] | None = None) -> list[str]:
    """One line per problem of ``trainer``, each naming the key, the value and what is wrong.

    ``as_daemon``: check as the daemon that will spawn it, i.e. this process (its euid decides the
    user rules); False for a non-root `check-config` of a file a root daemon runs, where only the
    existence of the user and group can be checked.
    """
    environ = os.environ if environ is None else environ
    key = f"trainer {trainer.name!r}"
    problems = []
    cwd = trainer.cwd if trainer.cwd is not None else Path.cwd()
    if trainer.cwd is not None and not trainer.cwd.is_dir():
        what = "not a directory" if trainer.cwd.exists() else "no such directory"
        problems.append(f"{key}: cwd = {str(trainer.cwd)!r}: {what}")
    path = trainer.env.get("PATH", environ.get("PATH", os.defpath))
    for name, command in (("command", trainer.command), ("restart_command", trainer.restart_command)):
        if command:
            problem = program_problem(command[0], cwd, path)
            if problem:
                problems.append(f"{key}: {name}[0] = {command[0]!r}: {problem}")
    checks: list[Callable[[], object]] = [lambda: identity(trainer.user, trainer.group)] if as_daemon else [
        lambda: trainer.user is None or passwd_entry(trainer.user),
        lambda: trainer.group is None or group_id(trainer.group),
    ]
    for check in checks:
        try:
            check()
        except SpawnError as exc:
            problems.append(f"{key}: {exc}")
    return problems


def program_problem(program: str, cwd: Path, path: str) -> str | None:
    """Why ``program`` cannot be executed as a command's first word, or None.

    A name with a slash is a path (relative ones to the trainer's cwd, where the child execs); a bare
    name is looked up on PATH, as exec does with the environment the trainer gets.
    """
    if "/" not in program:
        return None if shutil.which(program, path=path) else f"not found on PATH ({path})"
    target = Path(program) if Path(program).is_absolute() else cwd / program
    if not target.exists():
        return "no such file"
    if target.is_dir():
        return "is a directory"
    if not os.access(target, os.X_OK):
        return "not executable (chmod +x, or run it through its interpreter: command = [\"python3\", ...])"
    return None
