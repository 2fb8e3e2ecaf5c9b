"""The one way gpuwatch opens, reads and writes a file in a directory another user may write, and decides
whether a directory can be trusted at all (stdlib only: ``os``, ``stat``, ``errno``; ``gpuwatch health``'s
fast path imports it, tests/cluster/test_health_imports.py).

A directory another user can write (a trainer's chowned directory, a ``/tmp/gpuwatch-<uid>`` someone else
made) may hold, in place of the file root expects, a symbolic link to a root-only file, a FIFO (an open
for reading blocks until a writer comes; one for writing until a reader does), a hard link to another
user's file, or a file of gigabytes. So every such file is opened here:

* ``O_NOFOLLOW``: a link in the last component is refused (ELOOP), never followed (open(2));
* ``O_NONBLOCK``: a FIFO or a device cannot block the open; ``fstat`` then refuses anything but a
  regular file (S_ISREG) before a byte is read or written;
* a regular file with more than one link, or owned by a user not in ``owners``, is refused (a hard link
  to root's file, or a file the other user made to be appended to);
* reads are bounded (``read_bounded``): the size is checked before the read and the read stops at the
  bound, so a huge file costs neither time nor memory;
* a new file is written under an unpredictable name with ``O_CREAT | O_EXCL | O_NOFOLLOW`` and renamed over
  the target (``write_atomic``): rename(2) replaces a link, it never writes through one.

``dir_problem`` is the directory rule: trusted only when owned by an allowed user (the daemon: itself; a
client: root or itself) and writable by nobody else. Each refusal is an ``Unsafe`` (an OSError) whose text is
one line that says what was found.
"""

from __future__ import annotations

import errno
import os
import stat

# A heartbeat, a pause file, a run record, a restore record: a few hundred bytes each. Anything near this
# bound is not one of ours.
SMALL_FILE_MAX_BYTES = 64 * 1024


class Unsafe(OSError):
    """A path refused: not a regular file, a link, another user's file, too large, an untrusted directory."""

    def __str__(self) -> str:  # the one line, without OSError's "[Errno N]"
        return self.strerror or super().__str__()


def _kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"


def open_regular(path: str | os.PathLike[str], flags: int = os.O_RDONLY, mode: int = 0o644,
                 owners: tuple[int, ...] | None = None) -> int:
    """A descriptor of the regular file ``path``, never through a link or onto a FIFO/device (see above).

    ``owners``: the uids the file may belong to (None: any, for a reader that only parses it). Raises
    ``Unsafe`` for a refused file, OSError (FileNotFoundError...) as os.open does otherwise."""
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, mode)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise Unsafe(errno.ELOOP, f"{os.fspath(path)} is a symbolic link: refused") from None
        if exc.errno == errno.ENXIO:  # O_WRONLY|O_NONBLOCK on a FIFO without a reader (fifo(7))
            raise Unsafe(errno.ENXIO, f"{os.fspath(path)} is a FIFO: refused") from None
        raise
    try:
        st = os.fstat(fd)
        problem = None
        if not stat.S_ISREG(st.st_mode):
            problem = _kind(st.st_mode)
        elif st.st_nlink > 1:
            problem = f"a hard link ({st.st_nlink} names)"
        elif owners is not None and st.st_uid not in owners:
            problem = f"owned by uid {st.st_uid}"
        if problem is not None:
            raise Unsafe(errno.EPERM, f"{os.fspath(path)} is {problem}: refused")
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_bounded(path: str | os.PathLike[str], max_bytes: int = SMALL_FILE_MAX_BYTES,
                 owners: tuple[int, ...] | None = None) -> bytes:
    """The whole regular file ``path``, refused (``Unsafe``) when larger than ``max_bytes``."""
    fd = open_regular(path, os.O_RDONLY, owners=owners)
    try:
        size = os.fstat(fd).st_size
        if size > max_bytes:
            raise Unsafe(errno.EFBIG, f"{os.fspath(path)} is {size} bytes, over the {max_bytes}-byte bound: refused")
        chunks = []
        left = max_bytes + 1  # one more: a file that grew past the bound since fstat is refused too
        while left > 0:
            chunk = os.read(fd, left)
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        data = b"".join(chunks)
        if len(data) > max_bytes:
            raise Unsafe(errno.EFBIG, f"{os.fspath(path)} grew over the {max_bytes}-byte bound: refused")
        return data
    finally:
        os.close(fd)


def write_all(fd: int, data: bytes) -> None:
    """All of ``data`` to ``fd``: write(2) may write less than asked (a signal, a full disk's last blocks)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def write_atomic(path: str | os.PathLike[str], data: bytes, mode: int = 0o644) -> None:
    """Replace ``path`` with ``data``: a reader sees the old file or the new one; a link or FIFO at ``path``
    is replaced, never written through. The temporary name is unpredictable and created exclusively."""
    target = os.fspath(path)
    directory, name = os.path.split(target)
    tmp = os.path.join(directory, f".{name}.{os.urandom(6).hex()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    try:
        try:
            write_all(fd, data)
            os.fchmod(fd, mode)  # the umask's bits back
        finally:
            os.close(fd)
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def dir_problem(path: str | os.PathLike[str], owners: tuple[int, ...]) -> str | None:
    """Why the directory ``path`` may not be trusted (one line), None when it may: it must be a directory
    (a link to one counts only when the link too belongs to an allowed user) owned by a uid in ``owners``,
    and writable by no one else (no group or other write bit). Its ancestors must be root's or an allowed
    user's, and writable by others only with the sticky bit (``/tmp``): else another user could rename it
    away and put their own in its place. A missing directory is no problem here (the caller creates it, or
    finds nothing in it)."""
    shown = os.fspath(path)
    try:
        st = os.lstat(path)
        if stat.S_ISLNK(st.st_mode):
            if st.st_uid not in owners:
                return f"{shown} is a symbolic link owned by uid {st.st_uid}"
            st = os.stat(path)
    except FileNotFoundError:
        st = None
    except OSError as exc:
        return f"{shown}: {exc.strerror or exc}"
    if st is not None:
        if not stat.S_ISDIR(st.st_mode):
            return f"{shown} is {_kind(st.st_mode)}, not a directory"
        if st.st_uid not in owners:
            return f"{shown} is owned by uid {st.st_uid}, not by {' or '.join(f'uid {u}' for u in owners)}"
        if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            return f"{shown} is writable by other users (mode {stat.S_IMODE(st.st_mode):04o})"
    parent = os.path.dirname(os.path.realpath(path))
    while True:
        try:
            up = os.stat(parent)
        except OSError:
            up = None  # a missing ancestor: created by the caller, as its own
        if up is not None and (up.st_uid not in (0, *owners)
                               or up.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not up.st_mode & stat.S_ISVTX):
            return (f"{shown} is inside {parent}, which uid {up.st_uid} owns and others may write "
                    f"(mode {stat.S_IMODE(up.st_mode):04o})" if up.st_uid in (0, *owners)
                    else f"{shown} is inside {parent}, owned by uid {up.st_uid}")
        if parent == os.path.dirname(parent):
            return None
        parent = os.path.dirname(parent)


def trusted_owners(euid: int) -> tuple[int, ...]:
    """Whom a client trusts for a daemon's directory: root and itself."""
    return (0,) if euid == 0 else (0, euid)


def client_refusal(directory: str | os.PathLike[str]) -> str | None:
    """Why a client (`status`, `health`, `train`, `receipt`, `logs`, pause/resume/stop) must not trust a state
    file or control socket in ``directory`` (one line), None when it may: the directory is root's or the
    caller's and nobody else can write it (``dir_problem``)."""
    problem = dir_problem(directory, trusted_owners(os.geteuid()))
    return None if problem is None else f"not trusting {os.fspath(directory)}: {problem}"
