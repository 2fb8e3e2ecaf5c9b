"""An attached run's own directory: where `gpuwatch train` keeps the run's heartbeat and pause files and its log.

$XDG_RUNTIME_DIR/gpuwatch/runs/<run>/ (else, or when that directory does not exist here, as under a Slurm job
whose environment came from a login node: /tmp/gpuwatch-<uid>/runs/<run>/), mode 0700, owned by the
user who trains. The daemon never opens it (the wrapper relays the heartbeats over the attach socket and
makes the pause file itself); only its user, and root's `gpuwatch logs`, read its log. Under /tmp another user
could have made the parent folders first (to read the heartbeats or to swap a folder for a symlink to their own): every
level this module makes or finds must be a real directory, not a symlink, owned by the user and not
writable by anyone else, or there is no run directory and the run trains unattached (one line).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

HEARTBEAT_NAME = "heartbeat.json"  # the ranks' files go beside it (heartbeat.rank_heartbeat_path)
PAUSE_NAME = "pause"
LOG_NAME = "output.log"  # the command's output (cli/train/output.py), rotated to output.log.1...: kept at the end


class RunDirError(Exception):
    """No safe run directory; the message is one line for the user."""


@dataclass(frozen=True)
class RunDir:
    path: Path

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
            if name == LOG_NAME or name.startswith(f"{LOG_NAME}."):
                continue
            entry = self.path / name
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                with contextlib.suppress(OSError):
                    entry.unlink()
        with contextlib.suppress(OSError):
            self.path.rmdir()  # empty: no log was kept (the output was not copied)


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
    try:
        return RunDir(Path(tempfile.mkdtemp(prefix=f"{pid}-", dir=base)))  # mkdtemp makes it 0700
    except OSError as exc:
        raise RunDirError(f"cannot make a run directory in {base}: {exc.strerror}") from None


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
