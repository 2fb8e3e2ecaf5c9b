"""The only file I/O on sysfs: read, write, list and resolve links below one injected root.

``read`` returns the stripped text, ``None`` when the file is absent, and raises ``SysfsError`` for
anything else (EIO, EPERM, EINVAL, ENODATA, non-text bytes). ``read_bytes`` is the one place a file is
read (binary ``gpu_metrics`` directly, text through ``read``). Callers decide what an error means;
nothing here guesses a value.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path


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
        text read goes through here too); ``None`` when the file is absent."""
        path = self._prefix + relative.lstrip("/")
        try:
            # One read() of up to a page is how sysfs serves attributes; buffered reads add nothing.
            fd = os.open(path, os.O_RDONLY)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as exc:
            raise SysfsError(path, _reason(exc)) from exc
        try:
            return os.read(fd, 65536)
        except OSError as exc:
            raise SysfsError(path, _reason(exc)) from exc
        finally:
            os.close(fd)

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
            return sorted(os.listdir(self.path(relative)))
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
