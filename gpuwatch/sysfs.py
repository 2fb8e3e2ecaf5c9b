"""The only file I/O on sysfs: read, write, list and resolve links below one injected root.

``read`` returns the stripped text, ``None`` when the file is absent, and raises ``SysfsError`` for
anything else (EIO, EPERM, EINVAL, ENODATA, non-text bytes). ``read_bytes`` is the one place a file is
read (binary ``gpu_metrics`` directly, text through ``read``). Callers decide what an error means;
nothing here guesses a value.

**Held descriptors.** A file read every tick is kept open from its second read on and read again with
``pread`` at offset 0: the ``open`` (the walk of a long sysfs path) was over a third of a read's cost.
Each thread keeps its own descriptors (``_Held``, in a ``threading.local``), so no lock is taken on a read
and a descriptor is only ever closed by the thread that reads it (or, once it has ended, by its finaliser). ``forget``
makes every thread let its descriptors go at its next read (the source's re-discovery); writes, ``read_all``
and ``list`` open the path each time. A held file of a fake tree (tmpfs: tests, the simulator) is checked
for having been unlinked before each read; one on sysfs proper is not (``on_sysfs``: sysfs never unlinks a
live attribute, a removed one answers ENODEV).
"""

from __future__ import annotations

import ctypes
import errno
import os
import resource
import stat
import threading
from collections.abc import Callable
from pathlib import Path

# One read() of up to this much is how sysfs serves an attribute (a page, or a binary attribute's chunk).
READ_BYTES = 65536
# Descriptors one thread holds for one Sysfs, and all of the process's together: well under the service's
# LimitNOFILE=65536 (systemd/gpuwatch.service), and an eighth of any lower limit it runs under, beside the
# HTTP server's connections (publish/serve.py keeps 256 of the limit for all else) and the state, history and
# trainers' files. A daemon of 8 GPUs holds 136 (17 a GPU: its reads, the fan's and the cap's read-backs).
# A read beyond either cap opens and closes as before.
HELD_PER_THREAD = 256
SEEN_PER_THREAD = 4 * HELD_PER_THREAD  # paths read once, remembered to hold at their second read
_SOFT_NOFILE = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
HELD_PER_PROCESS = 4096 if _SOFT_NOFILE < 0 else min(4096, _SOFT_NOFILE // 8)
# The process's free places (``list.pop`` and ``append`` are atomic: no lock, even in a finaliser).
_free = [0] * HELD_PER_PROCESS
# A held descriptor's node was removed: kernfs answers ENODEV for a node removed under an open file
# (fs/kernfs/file.c, kernfs_get_active fails); ENOENT and ESTALE for the same on other filesystems.
_GONE = frozenset({errno.ENODEV, errno.ENOENT, errno.ESTALE})
SYSFS_MAGIC = 0x62656572  # include/uapi/linux/magic.h
# struct statfs (statfs(2)): f_type, a long (__fsword_t) on x86_64 and aarch64, is its first field. Room
# for the whole struct (120 bytes there) and more.
_STATFS_BYTES = 512


def _libc_fstatfs() -> Callable[[int, ctypes.Array[ctypes.c_char]], int] | None:
    try:
        fstatfs = ctypes.CDLL(None, use_errno=True).fstatfs
    except (OSError, AttributeError):
        return None
    fstatfs.argtypes = (ctypes.c_int, ctypes.c_char_p)
    fstatfs.restype = ctypes.c_int
    return fstatfs


_fstatfs = _libc_fstatfs()


def on_sysfs(fd: int) -> bool:
    """Whether ``fd``'s file is on sysfs proper (fstatfs(2)'s f_type is SYSFS_MAGIC); False on any doubt
    (no libc call, an error), which keeps the unlinked-file check of a held descriptor: never wrong, only
    slower. Asked once per descriptor held, not per read."""
    if _fstatfs is None:
        return False
    buffer = ctypes.create_string_buffer(_STATFS_BYTES)
    if _fstatfs(fd, buffer) != 0:
        return False
    return ctypes.c_long.from_buffer(buffer).value == SYSFS_MAGIC


class SysfsError(Exception):
    """A sysfs file exists but could not be read or written."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


def _reason(exc: OSError) -> str:
    name = errno.errorcode.get(exc.errno or 0)
    return name or (exc.strerror or type(exc).__name__)


class Sysfs:
    """A sysfs tree rooted at ``root`` (``/sys`` on a real machine, a tmp dir in tests)."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)
        # read() runs ~40 times per GPU per tick: plain string joins instead of pathlib, whose
        # parsing was 60% of a poll cycle (benchmarks/poll_cycle.py, docs/performance.md).
        self._prefix = os.path.join(os.fspath(self.root), "")
        self._local = threading.local()  # .held: this thread's _Held
        self._generation = 0  # forget() counts up; a thread whose _Held is older lets its descriptors go
        self._closed = False

    def forget(self) -> None:
        """Every thread lets its held descriptors go at its next read and holds afresh from then on (the
        cards were discovered again: a path may now lead to another device). Never closes a descriptor
        under another thread's read: each thread closes its own."""
        self._generation += 1

    def close(self) -> None:
        """No descriptor is held from now on: this thread's are closed now, every other thread's at its next
        read or when it ends. Reads still work (opened and closed each time)."""
        self._closed = True
        self.forget()
        held: _Held | None = getattr(self._local, "held", None)
        if held is not None:
            held.close_all()

    def path(self, relative: str) -> Path:
        return self.root / relative.lstrip("/")

    def read(self, relative: str) -> str | None:
        raw = self.read_bytes(relative)
        if raw is None:
            return None
        try:
            # Some dumps and kernels pad with NULs; they are not part of the value.
            return raw.rstrip(b"\x00").decode("ascii").strip()
        except UnicodeDecodeError as exc:
            # The bytes themselves are for nobody: their count says enough (a reading in reset, a broken driver).
            raise SysfsError(self._prefix + relative.lstrip("/"), f"not text ({len(raw)} bytes that are not ASCII)") \
                from exc

    def read_bytes(self, relative: str) -> bytes | None:
        """The file's bytes as one read() returns them (binary attributes such as gpu_metrics; every
        text read goes through here too); ``None`` when the file is absent.

        The thread's held descriptor of ``relative`` is read again at offset 0, which on sysfs runs the
        attribute's show() again: kernfs serves an attribute through seq_file (fs/kernfs/file.c,
        kernfs_fop_read_iter -> seq_read_iter), and fs/seq_file.c seq_read_iter says "if request is to
        read from zero offset, reset iterator to first record as it might have been already advanced by
        previous requests"; a binary attribute goes to kernfs_file_read_iter, which calls its read() at the
        offset given. amdgpu's gpu_metrics is a plain device attribute (amdgpu_pm.c, show() of at most a
        page), so it takes the first way."""
        held: _Held | None = getattr(self._local, "held", None)
        if held is None or held.generation != self._generation:
            held = self._renewed(held)
        fd = held.sysfs_fds.get(relative)
        check_unlinked = fd is None  # off sysfs proper: the file may have been unlinked since (below)
        if check_unlinked:
            fd = held.fds.get(relative)
        if fd is not None:
            try:
                # A fake tree (tmpfs: tests, the simulator) replaces or deletes files, which sysfs never does
                # to a live attribute (a removed one answers ENODEV): a descriptor of a file unlinked since
                # (st_nlink 0) must not serve its old bytes. fstat walks no path. A file rewritten in place is
                # the same inode: the pread sees its new bytes.
                if not check_unlinked or os.fstat(fd).st_nlink:
                    return os.pread(fd, READ_BYTES, 0)
            except OSError as exc:
                held.close(relative)
                if exc.errno not in _GONE:
                    raise SysfsError(self._prefix + relative.lstrip("/"), _reason(exc)) from exc
            else:
                held.close(relative)
            # Removed (ENODEV) or replaced: opened afresh once, so a file gone is None as without a held descriptor.
        path = self._prefix + relative.lstrip("/")
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as exc:
            raise SysfsError(path, _reason(exc)) from exc
        try:
            data = os.read(fd, READ_BYTES)
        except OSError as exc:
            os.close(fd)
            raise SysfsError(path, _reason(exc)) from exc
        if self._closed or not held.hold(relative, fd):
            os.close(fd)
        return data

    def _renewed(self, held: _Held | None) -> _Held:
        """This thread's _Held of the current generation (its older descriptors closed)."""
        if held is None:
            held = self._local.held = _Held()
        held.close_all()
        held.generation = self._generation
        return held

    def read_all(self, relative: str, max_bytes: int) -> bytes | None:
        """A binary attribute read until EOF (or ``max_bytes``): a devcoredump's ``data`` reports size 0
        and is produced by the driver chunk by chunk (drivers/base/devcoredump.c)."""
        path = self._prefix + relative.lstrip("/")
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise SysfsError(path, _reason(exc)) from exc
        chunks: list[bytes] = []
        size = 0
        try:
            while size < max_bytes:
                chunk = os.read(fd, min(65536, max_bytes - size))
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
        except OSError as exc:
            raise SysfsError(path, _reason(exc)) from exc
        finally:
            os.close(fd)
        return b"".join(chunks)

    def write(self, relative: str, value: str) -> None:
        """Write ``value`` to a file that is, links resolved, below the root. A path may come from a file
        (a restore record names the attribute it gives back): one that leads outside the root (``..``, or a
        link out of it) is refused, never written (issue 46: a record once made the fan's restore write
        anywhere). Writes are rare (an actuator's, on a change), so the resolve costs no tick."""
        path = self.path(relative)
        root = os.path.realpath(self.root)
        if not os.path.realpath(path).startswith(os.path.join(root, "")):
            raise SysfsError(str(path), f"outside the sysfs root {self.root}: refused")
        try:
            # O_TRUNC as the shell's `echo v > attr` does: sysfs ignores it, a fake tree needs it
            # so a shorter value does not leave the tail of the previous one behind.
            fd = os.open(path, os.O_WRONLY | os.O_TRUNC)
        except OSError as exc:
            raise SysfsError(str(path), _reason(exc)) from exc
        try:
            os.write(fd, value.encode("ascii"))
        except OSError as exc:
            raise SysfsError(str(path), _reason(exc)) from exc
        finally:
            os.close(fd)

    def list(self, relative: str) -> list[str]:
        """Sorted entry names of a directory; empty when it does not exist."""
        try:
            # The string join as read()'s: the reset watch and KFD's process list call this every tick, and the
            # pathlib join was half of a listing of an absent directory (docs/performance.md, round 7).
            return sorted(os.listdir(self._prefix + relative.lstrip("/")))
        except (FileNotFoundError, NotADirectoryError):
            return []
        except OSError as exc:
            raise SysfsError(str(self.path(relative)), _reason(exc)) from exc

    def exists(self, relative: str) -> bool:
        return os.path.exists(self._prefix + relative.lstrip("/"))

    def writable(self, relative: str) -> bool:
        return os.access(self.path(relative), os.W_OK)

    def resolve(self, relative: str) -> str | None:
        """The link-free path below the root, e.g. ``devices/pci0000:00/0000:00:01.1/0000:28:00.0``."""
        path = self.path(relative)
        if not path.exists():
            return None
        real = path.resolve()
        try:
            return str(real.relative_to(self.root.resolve()))
        except ValueError:
            return str(real)


class _Held:
    """One thread's held descriptors of one Sysfs (path relative to the root -> fd). Only its thread uses
    it; when the thread ends, its ``threading.local`` drops it and the finaliser closes what is left."""

    __slots__ = ("fds", "sysfs_fds", "seen", "generation", "places")

    def __init__(self) -> None:
        self.fds: dict[str, int] = {}  # checked for an unlinked file before each read (not on sysfs)
        self.sysfs_fds: dict[str, int] = {}  # on sysfs proper (on_sysfs): read without that check
        self.seen: set[str] = set()  # read once since the last forget(), not held
        self.generation = 0
        # The process's free places as they were when this thread first read: a place goes back to the
        # list it came from, even when a test has put a smaller one in its stead meanwhile.
        self.places = _free

    def hold(self, relative: str, fd: int) -> bool:
        """Keeps ``fd`` from the second read of ``relative`` on, if there is room (this thread's and the
        process's) and it is a regular file. A file read once per discovery (the fixed attributes, a
        card's uevent) takes no place; a FIFO or a device (a test's stand-in for a hung driver call) is
        opened and closed each time, as before."""
        if relative not in self.seen:
            if len(self.seen) >= SEEN_PER_THREAD:
                self.seen.clear()
            self.seen.add(relative)
            return False
        try:
            if self.held() >= HELD_PER_THREAD or not stat.S_ISREG(os.fstat(fd).st_mode):
                return False
        except OSError:
            return False
        try:
            self.places.pop()
        except IndexError:
            return False
        (self.sysfs_fds if on_sysfs(fd) else self.fds)[relative] = fd
        return True

    def held(self) -> int:
        return len(self.fds) + len(self.sysfs_fds)

    def close(self, relative: str) -> None:
        fd = self.sysfs_fds.pop(relative, None)
        if fd is None:
            fd = self.fds.pop(relative)
        self.places.append(0)
        try:
            os.close(fd)
        except OSError:  # Linux frees the descriptor even then (close(2)): nothing to give back
            pass

    def close_all(self) -> None:
        self.seen.clear()
        for fds in (self.fds, self.sysfs_fds):
            while fds:
                self.close(next(iter(fds)))

    def __del__(self) -> None:
        self.close_all()
