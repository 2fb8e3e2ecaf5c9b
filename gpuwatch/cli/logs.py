"""`gpuwatch logs NAME [-n N] [-f]`: a supervised trainer's captured output (stdout and stderr), like `tail`.

NAME is a trainer of the configuration, else one the running daemon lists (its own configuration's, e.g. the
demo's, or a run attached with `gpuwatch train`). An attached run's log is its wrapper's copy of the output, in the
run's own directory (cli/train/output.py): only its user and root may read it, root through the same ``safefs``
open (no link, no FIFO, only a file of the run's user). A run of an older wrapper sent no log path: one line says
where its output went.

It reads the trainer's log file and needs no daemon: the path is the one the daemon published for it in the
state file, else the one the daemon would use (``supervise.trainer.log_path``: the trainer's ``log_dir``,
else its folder in the runtime directory). The supervisor rotates the file at ``log_max_bytes``
(``NAME.log.1``... up to ``log_backups``): the last N lines are taken across the rotated files too, and
``-f`` follows the file across a rotation, as ``tail -F`` does.
"""

from __future__ import annotations

import argparse
import os
import pwd
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

from gpuwatch.cli.settings import load_cli_config
from gpuwatch.cli.status import EXIT_ALARM, EXIT_OK, EXIT_USAGE
from gpuwatch.cli.text import safe
from gpuwatch.config.file import Config
from gpuwatch.config.trainer import TrainerConfig
from gpuwatch.publish.state import read_state_file
from gpuwatch.safefs import open_regular

FOLLOW_POLL_S = 0.25  # how often -f looks for new output (tail -f's default is 1 s)
BLOCK = 64 * 1024


def cmd_logs(args: argparse.Namespace) -> int:
    config = load_cli_config(args, client=True, simulators=True)
    trainer = _trainer(config, args.name)
    name = args.name or ""
    if isinstance(trainer, str):  # not in this configuration: the running daemon may still list it
        published = _published(config, args.name)
        owners: tuple[int, ...] | None = None
        if published is not None and published.get("origin") == "attached":
            refusal, owners = attached_log_reader(published, os.getuid())
            if refusal is not None:
                print(f"gpuwatch logs: {refusal}", file=sys.stderr)
                return EXIT_ALARM
        elif published is None or not published.get("log_path"):
            print(f"gpuwatch logs: {trainer}", file=sys.stderr)
            return EXIT_USAGE
        # A trainer of the daemon's own configuration (another -c FILE), or an attached run's log.
        path = Path(published["log_path"])
    else:
        name, path, owners = trainer.name, trainer_log_path(config, trainer), None
    try:
        return _show(path, name, args.lines, args.follow, owners)
    except OSError as exc:  # a log only root may read (the daemon's user and group), a vanished folder...
        print(f"gpuwatch logs: cannot read {exc.filename or path}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_ALARM


def _show(path: Path, name: str, count: int, following: bool, owners: tuple[int, ...] | None = None) -> int:
    out = sys.stdout.buffer
    current = _open(path, owners)
    if current is None and not following:
        why = "its command wrote nothing yet" if owners is not None else "it has not run with this runtime directory"
        print(f"gpuwatch logs: no log of trainer {name} yet at {path} ({why}; -f waits for it)", file=sys.stderr)
        return EXIT_ALARM
    if current is None:
        print(f"gpuwatch logs: waiting for {path}", file=sys.stderr)
    try:
        out.writelines(last_lines(current, path, count, owners))
        out.flush()
        if not following:
            return EXIT_OK
        # From where the last lines ended, in the same open file: nothing written meanwhile is lost.
        for chunk in follow(path, current, owners=owners):
            out.write(chunk)
            out.flush()
    finally:
        if current is not None:
            current.close()
    return EXIT_OK  # follow() only ends on Ctrl-C (main: exit 130) or a closed pipe


def _published(config: Config, name: str | None) -> dict[str, Any] | None:
    """The trainer or attached run ``name`` as the running daemon lists it in its state file; None if none."""
    doc = read_state_file(config.state_file)
    for published in doc.get("trainers", []) if doc and name else []:
        if isinstance(published, dict) and published.get("name") == name:
            return published
    return None


def attached_log_reader(published: dict[str, Any], caller_uid: int) -> tuple[str | None, tuple[int, ...] | None]:
    """Whether ``caller_uid`` may read the attached run's log (its user or root), and the owner its file must have;
    else why not, in one line."""
    name = safe(str(published.get("name")))
    if not published.get("log_path"):
        return attached_run_note(published), None
    user = published.get("user")
    try:
        uid = pwd.getpwnam(str(user)).pw_uid
    except (KeyError, TypeError):
        return f"{name} is a run of a user this machine does not know ({safe(str(user))}): not reading its log", None
    if caller_uid not in (0, uid):
        return (f"{name} is a run of {safe(str(user))}: only that user and root may read its log "
                f"({safe(str(published['log_path']))})"), None
    return None, (uid,)


def attached_run_note(published: dict[str, Any]) -> str:
    """Where the output of a run attached by an older `gpuwatch train` (no log path) is, in one line: on the terminal
    it was started from (a pipe or a file if redirected); the daemon, which is not its parent, never sees it."""
    who = f" of {published['user']}" if published.get("user") else ""
    pid = f" (pid {published['pid']}{who})" if published.get("pid") else who
    return (f"{safe(str(published.get('name')))} is a run attached with `gpuwatch train`{safe(pid)}: its output goes "
            "where that command's output goes (its terminal, or the file it was redirected to); the daemon keeps "
            "no copy, and that `gpuwatch train` (an older one, which sent no log path) keeps none")


def trainer_log_path(config: Config, trainer: TrainerConfig) -> Path:
    """The daemon's published path for the trainer when its state file names one, else the daemon's rule."""
    from gpuwatch.supervise.trainer import log_path

    doc = read_state_file(config.state_file)
    for published in doc.get("trainers", []) if doc else []:
        path = published.get("log_path")
        if published.get("name") == trainer.name and path:
            return Path(path)
    # The supervisor's state directory, as daemon/compose.build_supervisor gives it.
    return log_path(trainer, config.resolved_runtime_dir / "trainers")


def last_lines(current: BinaryIO | None, path: Path, count: int,
               owners: tuple[int, ...] | None = None) -> list[bytes]:
    """The last ``count`` lines of the log (``current``: ``path`` open, left at the end of what was read), reaching
    into its rotated files (``.1`` is the newest of them)."""
    lines = _tail(current, count) if current is not None else []
    for part in _rotated(path):
        if len(lines) >= count:
            break
        f = _open(part, owners)
        if f is None:  # rotated away meanwhile
            continue
        with f:
            lines = _tail(f, count - len(lines)) + lines
    return lines[-count:] if count else []


def follow(path: Path, f: BinaryIO | None, poll_s: float = FOLLOW_POLL_S,
           owners: tuple[int, ...] | None = None) -> Iterator[bytes]:
    """What is written to ``path`` from ``f``'s position on (``f``: ``path`` open, or None), forever. A file that
    appears later, or that replaces it (a rotation) or was truncated, is read from its start. The files it opens
    itself it closes; ``f`` is the caller's."""
    given = f
    try:
        while True:
            if f is None:
                f = _open(path, owners)
                if f is None:
                    time.sleep(poll_s)
                    continue
            chunk = f.read(BLOCK)
            if chunk:
                yield chunk
                continue
            if _replaced(f, path):
                rest = f.read()  # what was written between the read above and the rotation
                if rest:
                    yield rest
                if f is not given:
                    f.close()
                f = None
                continue
            time.sleep(poll_s)
    finally:
        if f is not None and f is not given:
            f.close()


def _open(path: Path, owners: tuple[int, ...] | None = None) -> BinaryIO | None:
    """The log open for reading; None when it is not there. It is in the trainer's directory, which its user
    owns: a link or a FIFO in its place is refused (``safefs``: never read through, never blocking), in one
    line, as ``Unsafe``; so is a file of anyone but ``owners`` (an attached run's log: its user's only)."""
    try:
        return os.fdopen(open_regular(path, owners=owners), "rb")
    except FileNotFoundError:
        return None


def _replaced(f: BinaryIO, path: Path) -> bool:
    """Another file is under the name now (rotated), none is (rotating), or this one was truncated."""
    try:
        now = path.stat()
    except FileNotFoundError:
        return True
    return now.st_ino != os.fstat(f.fileno()).st_ino or now.st_size < f.tell()


def _tail(f: BinaryIO, count: int) -> list[bytes]:
    """The last ``count`` lines of an open file, read backwards in blocks (a 20 MB log is not read whole); the file
    is left at the end that was read to (where -f goes on)."""
    end = f.seek(0, os.SEEK_END)
    if count <= 0:
        return []
    data = b""
    position = end
    while position > 0 and data.count(b"\n") <= count:
        step = min(BLOCK, position)
        position -= step
        f.seek(position)
        data = f.read(step) + data
    f.seek(end)
    return data.splitlines(keepends=True)[-count:]  # a line still being written: as far as it is, as tail does


def _rotated(path: Path) -> Iterator[Path]:
    """The rotated files of ``path`` that exist, newest first (RotatingFileHandler's ``.1``, ``.2``...)."""
    index = 1
    while (rotated := path.with_name(f"{path.name}.{index}")).exists():
        yield rotated
        index += 1


def _trainer(config: Config, name: str | None) -> TrainerConfig | str:
    """The configured trainer called ``name`` (without one: the only trainer), else why not."""
    names = ", ".join(t.name for t in config.trainer) or "none configured"
    if name is None:
        if len(config.trainer) == 1:
            return config.trainer[0]
        return f"name the trainer (trainers: {names})"
    for trainer in config.trainer:
        if trainer.name == name:
            return trainer
    return f"no trainer named {name!r} in the configuration (trainers: {names})"
