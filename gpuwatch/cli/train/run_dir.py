"""An attached run's own directory: where `gpuwatch train` keeps the run's heartbeat and pause files and its log.

$XDG_RUNTIME_DIR/gpuwatch/runs/<run>/ (else, or when that directory does not exist here, as under a Slurm job
whose environment came from a login node: /tmp/gpuwatch-<uid>/runs/<run>/), mode 0700, owned by the
user who trains. The daemon never opens it (the wrapper relays the heartbeats over the attach socket and
makes the pause file itself); only its user, and root's `gpuwatch logs`, read its log. Under /tmp another user
could have made the parent folders first (to read the heartbeats or to swap a folder for a symlink to their own): every
level this module makes or finds must be a real directory, not a symlink, owned by the user and not
writable by anyone else, or there is no run directory and the run trains unattached (one line).

A run's log outlives its wrapper (`gpuwatch logs NAME` after a crash), up to 80 MiB each (4 files of 20 MiB), in a
directory that may be a small tmpfs (/run/user/<uid>): each new wrapper prunes its user's finished runs to the
newest ``KEEP_FINISHED_RUNS`` whose logs together stay within ``KEEP_FINISHED_BYTES`` (the newest is always kept).
A wrapper holds flock(2) on its run directory while it lives, so a run whose lock can be taken is finished (its
wrapper exited, or was killed: the kernel drops the lock); a directory that holds anything but its log (a run of
an older wrapper, one being made) is never touched. Only the user's own wrapper prunes, in the folder this module
has just checked is theirs: root never walks another user's runs.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import stat
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

HEARTBEAT_NAME = "heartbeat.json"  # the ranks' files go beside it (heartbeat.rank_heartbeat_path)
PAUSE_NAME = "pause"
LOG_NAME = "output.log"  # the command's output (cli/train/output.py), rotated to output.log.1...: kept at the end
KEEP_FINISHED_RUNS = 8  # finished runs whose logs a new wrapper keeps (the newest first)
KEEP_FINISHED_BYTES = 160 * 1024 * 1024  # and their logs' bytes together: two full runs (4 x 20 MiB each)


class RunDirError(Exception):
    """No safe run directory; the message is one line for the user."""


@dataclass(frozen=True)
class RunDir:
    path: Path
    lock_fd: int | None = field(default=None, compare=False)  # flock(2)ed while the wrapper lives: not finished

    @property
    def heartbeat_file(self) -> Path:
        return self.path / HEARTBEAT_NAME

    @property
    def pause_file(self) -> Path:
        return self.path / PAUSE_NAME

    @property
    def log_file(self) -> Path:
        return self.path / LOG_NAME

    def remove(self) -> None:
        """At the wrapper's exit: the run's files go with it, but for its log (`gpuwatch logs NAME` after a crash),
        which goes with the directory when the user's runtime directory goes (logout) or /tmp is cleaned."""
        try:
            names = os.listdir(self.path)
        except OSError:
            return
        for name in names:
            if is_log_name(name):
                continue
            entry = self.path / name
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                with contextlib.suppress(OSError):
                    entry.unlink()
        with contextlib.suppress(OSError):
            self.path.rmdir()  # empty: no log was kept (the output was not copied)
        if self.lock_fd is not None:
            os.close(self.lock_fd)  # the run is finished: the next wrapper may prune its log


@dataclass(frozen=True)
class FinishedRun:
    path: Path
    modified_s: float  # its newest log file's mtime: when the run last wrote
    size_bytes: int


def runs_to_prune(finished: list[FinishedRun], keep_runs: int = KEEP_FINISHED_RUNS,
                  keep_bytes: int = KEEP_FINISHED_BYTES) -> list[Path]:
    """The finished runs whose logs go: all but the newest ``keep_runs`` that fit in ``keep_bytes`` together
    (the newest is kept whatever its size)."""
    kept_bytes = 0
    prune: list[Path] = []
    for index, run in enumerate(sorted(finished, key=lambda run: run.modified_s, reverse=True)):
        kept_bytes += run.size_bytes
        if index > 0 and (index >= keep_runs or kept_bytes > keep_bytes):
            prune.append(run.path)
    return prune


def is_log_name(name: str) -> bool:
    return name == LOG_NAME or (name.startswith(f"{LOG_NAME}.") and name[len(LOG_NAME) + 1:].isdigit())


def prune_finished_runs(base: Path, euid: int) -> None:
    """Removes the logs of ``base``'s finished runs that ``runs_to_prune`` lets go; never raises (a run directory
    it cannot read or remove is left as it is)."""
    finished: list[FinishedRun] = []
    try:
        names = os.listdir(base)
    except OSError:
        return
    for name in names:
        run = _finished(base / name, euid)
        if run is not None:
            finished.append(run)
    for path in runs_to_prune(finished):
        with contextlib.suppress(OSError):
            for name in os.listdir(path):
                if is_log_name(name):
                    os.unlink(path / name)
            path.rmdir()


def _finished(path: Path, euid: int) -> FinishedRun | None:
    """A run directory of this user's holding its log only, whose wrapper holds no lock on it; else None."""
    if unsafe_reason(path, euid) is not None:
        return None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        names = os.listdir(fd)
        if not names or not all(is_log_name(name) for name in names):
            return None
        infos = [os.stat(name, dir_fd=fd, follow_symlinks=False) for name in names]
    except OSError:  # EWOULDBLOCK: its wrapper lives
        return None
    finally:
        os.close(fd)  # the lock goes with it
    return FinishedRun(path, max(info.st_mtime for info in infos), sum(info.st_size for info in infos))


def runs_base(environ: Mapping[str, str], euid: int) -> tuple[Path, list[Path]]:
    """The folder that holds every run directory, and the levels under the user's own base to check."""
    xdg = environ.get("XDG_RUNTIME_DIR")
    # Only one that exists here: `srun` hands a job the submitting shell's environment (--export=ALL), whose
    # XDG_RUNTIME_DIR is the login node's /run/user/<uid>; a compute node without that login session has none.
    if xdg and os.path.isdir(xdg):
        top = Path(xdg) / "gpuwatch"
        return top / "runs", [top, top / "runs"]
    top = Path(f"/tmp/gpuwatch-{euid}")
    return top / "runs", [top, top / "runs"]


def make_run_dir(environ: Mapping[str, str], euid: int, pid: int) -> RunDir:
    """A fresh run directory (mode 0700, its name starts with the wrapper's pid); RunDirError saying why not."""
    base, levels = runs_base(environ, euid)
    for level in levels:
        try:
            os.mkdir(level, 0o700)
        except FileExistsError:
            pass
        except OSError as exc:
            raise RunDirError(f"cannot make {level}: {exc.strerror}") from None
        problem = unsafe_reason(level, euid)
        if problem:
            raise RunDirError(problem)
    prune_finished_runs(base, euid)
    try:
        path = Path(tempfile.mkdtemp(prefix=f"{pid}-", dir=base))  # mkdtemp makes it 0700
        lock_fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise RunDirError(f"cannot make a run directory in {base}: {exc.strerror}") from None
    fcntl.flock(lock_fd, fcntl.LOCK_EX)  # a fresh directory: nobody else holds it (a pruner only tries, LOCK_NB)
    return RunDir(path, lock_fd)


def unsafe_reason(path: Path, euid: int) -> str | None:
    """Why ``path`` may not hold a run's files (another user could read or replace them), or None."""
    try:
        info = os.lstat(path)
    except OSError as exc:
        return f"{path}: {exc.strerror}"
    if stat.S_ISLNK(info.st_mode):
        return f"{path} is a symlink: refusing to keep the run's files behind it"
    if not stat.S_ISDIR(info.st_mode):
        return f"{path} is not a directory"
    if info.st_uid != euid:
        return f"{path} belongs to uid {info.st_uid}, not to you (uid {euid}): refusing to keep the run's files there"
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        mode = f"{stat.S_IMODE(info.st_mode):o}"
        return f"{path} is writable by others (mode {mode}): refusing to keep the run's files there"
    return None
