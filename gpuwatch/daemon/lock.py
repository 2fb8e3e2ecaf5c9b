"""One daemon per runtime directory: a POSIX record lock on ``<runtime_dir>/gpuwatch.lock``.

A second `gpuwatch run` with the same runtime directory would start a second copy of every trainer,
drive the same fans and caps, take the control socket over and, on exit, remove the first one's socket
and state file. The lock makes it exit 2 at once instead, naming the pid that holds the lock.

Why fcntl(F_SETLK) rather than flock: the kernel tells who holds a record lock (F_GETLK's ``l_pid``), so
the holder is named even when its pid could not be written into the file (a full runtime directory),
and record locks are not inherited by the trainers the daemon forks. The kernel drops the lock when
the process dies, SIGKILL included: a stale file never blocks a start, and `gpuwatch restore`
(ExecStopPost, after the daemon exited) sees the directory free.

The directory itself must be the daemon's: owned by its user and writable by nobody else (``safefs.dir_problem``,
ancestors included). Another user who made ``/tmp/gpuwatch-<uid>`` or a root daemon's ``runtime_dir`` first could
otherwise put links there (the lock file, the state file, the restore records) and have the daemon truncate
their targets; such a directory is refused (``Untrusted``: one line, exit 2).
"""

from __future__ import annotations

import errno
import fcntl
import os
import struct
from dataclasses import dataclass
from pathlib import Path

from gpuwatch.safefs import Unsafe, dir_problem, open_regular

LOCK_FILE_NAME = "gpuwatch.lock"
# struct flock on Linux (asm-generic/fcntl.h): short l_type, short l_whence, off_t l_start, off_t l_len,
# pid_t l_pid, in native alignment.
_FLOCK = "hhqqi4x"


class Held(Exception):
    """Another live process holds the runtime directory; the message names it."""

    def __init__(self, path: Path, pid: int | None) -> None:
        self.path, self.pid = path, pid
        who = f"pid {pid}" if pid else "another process"
        super().__init__(f"another gpuwatch daemon ({who}) runs with the runtime directory {path.parent} "
                         f"(it holds {path})")


class Untrusted(Exception):
    """The runtime directory is not the daemon's own, or others may write it; the message says which."""


@dataclass
class RuntimeLock:
    """The lock held for the life of the process (its descriptor stays open; closing it releases it)."""

    path: Path
    fd: int | None  # None: the directory could not hold a lock file (read-only); ``problem`` says why
    problem: str | None = None

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def lock_path(runtime_dir: Path) -> Path:
    return runtime_dir / LOCK_FILE_NAME


def acquire(runtime_dir: Path) -> RuntimeLock:
    """Lock ``runtime_dir`` for this process; raises ``Held`` when a live process holds it already.

    A directory that cannot take the lock file (read-only, not creatable) gives an unlocked RuntimeLock
    with the reason: the daemon still runs (its fans and caps matter more), and says so."""
    path = lock_path(runtime_dir)
    try:
        runtime_dir.mkdir(mode=0o755, parents=True, exist_ok=True)
    except OSError:
        pass  # a read-only directory that is there is checked below; a missing one fails the open
    problem = dir_problem(runtime_dir, (os.geteuid(),))
    if problem is not None:
        raise Untrusted(f"refusing the runtime directory: {problem}")
    try:
        fd = open_regular(path, os.O_RDWR | os.O_CREAT, 0o644, owners=(os.geteuid(),))
    except Unsafe as exc:
        raise Untrusted(f"refusing the runtime directory: {exc.strerror}") from None
    except OSError as exc:
        return RuntimeLock(path, None, f"cannot create {path}: {exc.strerror or exc}")
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        pid = _holder_fd(fd)
        os.close(fd)
        if exc.errno in (errno.EACCES, errno.EAGAIN):
            raise Held(path, pid) from None
        return RuntimeLock(path, None, f"cannot lock {path}: {exc.strerror or exc}")
    try:  # for people reading the file; the kernel's answer (holder) does not need it
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    except OSError:
        pass  # a full directory: the lock holds all the same
    return RuntimeLock(path, fd)


def holder(runtime_dir: Path) -> int | None:
    """The pid of the live process that holds ``runtime_dir``'s lock, None when nobody does.

    Opens the file read-only and asks the kernel (F_GETLK places no lock), so it works in a read-only
    or full directory and never takes the lock itself."""
    try:
        fd = open_regular(lock_path(runtime_dir), os.O_RDONLY)
    except OSError:
        return None
    try:
        return _holder_fd(fd)
    finally:
        os.close(fd)


def _holder_fd(fd: int) -> int | None:
    # F_GETLK with a write lock asks who would block it; a read-only descriptor may ask (it places nothing).
    query = struct.pack(_FLOCK, fcntl.F_WRLCK, os.SEEK_SET, 0, 0, 0)
    try:
        answer = fcntl.fcntl(fd, fcntl.F_GETLK, query)
    except OSError:
        return None
    lock_type, _, _, _, pid = struct.unpack(_FLOCK, answer)
    if lock_type == fcntl.F_UNLCK:
        return None
    return int(pid) or None
