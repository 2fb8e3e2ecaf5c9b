"""One daemon per GPU, across runtime directories: an exclusive flock(2) on each card's PCI device directory.

Two daemons with two runtime directories on one card each took the other's lowered cap for the card's default
and both stopped with the cap lowered and no record anywhere (issue 46). The runtime directory's lock
(``daemon/lock.py``) cannot see that: the lock must belong to the card, not to the directory.

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

from gpuwatch.config.file import REAL_PROC_ROOT
from gpuwatch.sysfs import Sysfs, SysfsError

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
            pid = holder(fd)
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


def holder(fd: int) -> int | None:
    """The pid that holds a flock on ``fd``'s file, from /proc/locks; None when it cannot be told. The
    machine's own /proc (``REAL_PROC_ROOT``), not the injected root: the locks are the running kernel's, which
    no test or simulated proc tree stands in for (a documented exception, docs/architecture.md)."""
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
