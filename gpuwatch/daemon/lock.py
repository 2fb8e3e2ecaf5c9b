"""The daemon's two locks: one daemon per runtime directory, and one daemon per GPU across runtime directories.

**One daemon per runtime directory**: a POSIX record lock on ``<runtime_dir>/gpuwatch.lock``.

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

**One daemon per GPU**, across runtime directories: an exclusive flock(2) on each card's PCI device directory.

Two daemons with two runtime directories on one card each took the other's lowered cap for the card's default
and both stopped with the cap lowered and no record anywhere (issue 46). The runtime directory's lock
(above) cannot see that: the lock must belong to the card, not to the directory.

Why the device directory, under the configured sysfs root (``devices/.../0000:03:00.0``, where
``class/drm/cardN/device`` leads): it is the card's one identity (its PCI slot), it exists exactly as long
as the card, it needs no file of ours (sysfs takes none), and fake trees and simulators of tests running side
by side never collide. flock(2) works on any open file, a directory's O_RDONLY descriptor included, and the
kernel drops it when the holder dies (SIGKILL included). A record lock (fcntl F_SETLK, which names its holder)
would need a descriptor open for writing, which a directory cannot be; the holder of a flock is named from
/proc/locks instead (proc(5): each FLOCK line's pid and MAJ:MIN:INODE).

A second daemon exits 2 naming the GPU and the holder's pid, as a second one on a runtime directory does: one
that drove the other cards would run half its configuration, and one that skipped a card silently would leave
its operator believing it governed. The descriptors are O_CLOEXEC (a trainer never inherits a lock).
"""

from __future__ import annotations

import errno
import fcntl
import os
import struct
from dataclasses import dataclass
from pathlib import Path

from gpuwatch.safefs import Unsafe, dir_problem, open_regular
from gpuwatch.sysfs import Sysfs, SysfsError

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


DRM_CLASS = "class/drm"
# The locks, held for the life of the process (closing a descriptor releases its lock), by (st_dev, st_ino) of the
# directory: a second build in one process (tests, the composition root called again) keeps what it holds, as a
# second flock on a new descriptor of the same directory would conflict with our own.
_held: dict[tuple[int, int], int] = {}


class GpuHeld(Exception):
    """Another live process drives a GPU of this configuration; the message names it."""


def lock_cards(sysfs: Sysfs) -> list[str]:
    """Lock every DRM card's device directory under ``sysfs``; the slots locked. Raises ``GpuHeld`` for a card
    another process holds (after releasing the ones this call took)."""
    taken: dict[tuple[int, int], int] = {}
    slots: list[str] = []
    for card in cards(sysfs):
        device = sysfs.path(card)
        try:
            fd = os.open(device, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError:
            continue  # gone since the listing
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino) in _held or (st.st_dev, st.st_ino) in taken:
            os.close(fd)
            slots.append(device.name)
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            pid = _card_holder(fd)
            os.close(fd)
            for mine in taken.values():
                os.close(mine)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                who = f"pid {pid}" if pid else "another process"
                raise GpuHeld(f"GPU {device.name} is driven by another gpuwatch daemon ({who}, which holds "
                              f"{device}); one daemon per GPU: stop that one first, or give this one a sysfs "
                              "root without that card") from None
            raise GpuHeld(f"cannot lock GPU {device.name} ({device}): {exc.strerror or exc}") from None
        taken[st.st_dev, st.st_ino] = fd
        slots.append(device.name)
    _held.update(taken)
    return slots


def cards(sysfs: Sysfs) -> list[str]:
    """Each DRM card's PCI device directory, link-free and relative to the root (one per card)."""
    found: dict[str, None] = {}
    try:
        names = sysfs.list(DRM_CLASS)
    except SysfsError:
        return []
    for name in names:
        if name.startswith("card") and name[4:].isdigit():
            resolved = sysfs.resolve(f"{DRM_CLASS}/{name}/device")
            if resolved is not None and not os.path.isabs(resolved):
                found[resolved] = None
    return list(found)


def _card_holder(fd: int) -> int | None:
    """The pid that holds a flock on ``fd``'s file, from /proc/locks; None when it cannot be told. The
    machine's own /proc (``REAL_PROC_ROOT``), not the injected root: the locks are the running kernel's, which
    no test or simulated proc tree stands in for (a documented exception, docs/architecture.md)."""
    from gpuwatch.config.file import REAL_PROC_ROOT  # here: `gpuwatch health` and `receipt` ask ``holder``, no pydantic

    st = os.fstat(fd)
    wanted = (os.major(st.st_dev), os.minor(st.st_dev), st.st_ino)
    try:
        text = (REAL_PROC_ROOT / "locks").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        fields = line.split()
        # "1: FLOCK  ADVISORY  WRITE 1234 00:2e:5678 0 EOF" (a blocked waiter's line has "->" after the number)
        if len(fields) < 6 or fields[1] != "FLOCK":
            continue
        try:
            major, minor, inode = fields[5].split(":")
            if (int(major, 16), int(minor, 16), int(inode)) == wanted:
                return int(fields[4])
        except ValueError:
            continue
    return None
