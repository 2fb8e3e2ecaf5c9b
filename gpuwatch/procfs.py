"""The only file I/O on /proc: pids, a process's fds and their link targets, and its text files, below one
injected root (``/proc`` on a real machine; a fake tree in tests, benchmarks and the simulator).

/proc races with the processes it describes (proc(5); psutil's ``wrap_exceptions`` says the same): a pid
or fd that vanished between listing and reading raises ENOENT on open or ESRCH on read, and reads here
as ``None``. A file we may not read (another user's ``fd/`` and ``fdinfo/`` need ptrace-read access,
EACCES/EPERM) raises ``ProcError``. Nothing here parses; ``procs/fdinfo.py`` does.
"""

from __future__ import annotations

import errno
import os

# ENOENT: gone before open; ESRCH: gone between open and read; ENOTDIR/EINVAL: a dying task's files.
_GONE = (errno.ENOENT, errno.ESRCH, errno.ENOTDIR, errno.EINVAL)


class ProcError(Exception):
    """A /proc file exists but may not be read (EACCES, EPERM) or failed otherwise."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


def _is_id(name: str) -> bool:
    """A pid or tid directory: ASCII digits only (``str.isdigit`` also takes ``²``, which ``int`` refuses; such a
    name in a proc root made the whole process scan raise, issue 46)."""
    return name.isascii() and name.isdigit()


def _raise_unless_gone(path: str, exc: OSError) -> None:
    """A process or fd that vanished is no error (the caller returns None); anything else (EACCES,
    EPERM...) raises ProcError."""
    if exc.errno in _GONE:
        return
    raise ProcError(path, errno.errorcode.get(exc.errno or 0) or exc.strerror or type(exc).__name__) from exc


class Procfs:
    """A /proc tree rooted at ``root``."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = os.fspath(root)
        self._prefix = os.path.join(self.root, "")
        self._children_lists: bool | None = None  # whether the kernel keeps task/<tid>/children (looked once)

    def pids(self) -> list[int]:
        """Every numeric entry of the root, unsorted (a process can be gone by the time it is read)."""
        try:
            return [int(name) for name in os.listdir(self.root) if _is_id(name)]
        except OSError as exc:  # the root itself missing is no race: a wrong proc_root
            raise ProcError(self.root, exc.strerror or type(exc).__name__) from exc

    def fds(self, pid: int) -> list[tuple[int, str]] | None:
        """``(fd, link target)`` of every open file of ``pid``; None when the process is gone.

        An fd closed between the listing and its readlink is skipped. Raises ProcError when the
        directory may not be listed (another user's process without CAP_SYS_PTRACE).
        """
        base = f"{self._prefix}{pid}/fd"
        try:
            # One open of the directory, then each link relative to it: no path walk per fd.
            dir_fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY)
        except OSError as exc:
            _raise_unless_gone(base, exc)
            return None
        found = []
        try:
            for name in os.listdir(dir_fd):
                try:
                    found.append((int(name), os.readlink(name, dir_fd=dir_fd)))
                except (OSError, ValueError):
                    continue
        except OSError as exc:
            _raise_unless_gone(base, exc)
            return None
        finally:
            os.close(dir_fd)
        return found

    def read(self, pid: int, name: str) -> str | None:
        """The text of ``/proc/<pid>/<name>`` (e.g. ``stat``, ``fdinfo/7``, ``task/4251/stat``); None when gone."""
        path = f"{self._prefix}{pid}/{name}"
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError as exc:
            _raise_unless_gone(path, exc)
            return None
        try:
            # /proc files are generated on read; one read of 64 KiB holds every file read here whole.
            raw = os.read(fd, 65536)
        except OSError as exc:
            _raise_unless_gone(path, exc)
            return None
        finally:
            os.close(fd)
        return raw.decode("utf-8", "replace")

    def tasks(self, pid: int) -> list[int]:
        """The thread ids of ``pid`` (empty when it is gone or not readable)."""
        try:
            return [int(name) for name in os.listdir(f"{self._prefix}{pid}/task") if _is_id(name)]
        except OSError:
            return []

    def descendants(self, pid: int) -> list[int] | None:
        """Every descendant of ``pid``, parents before their children, from the kernel's per-thread lists of
        children (``task/<tid>/children``, proc(5), CONFIG_PROC_CHILDREN): only the tree's own files are read,
        where a walk by parent pid (psutil's ``children(recursive=True)``) reads every process's ``stat``.

        Like any walk of /proc it is a moment's view: a process forked or reparented while it runs may be
        missing until the next walk (proc(5): reliable only while the children are stopped). A child forked
        by any thread of a process is listed under that thread, so every thread's list is read. [] when
        ``pid`` is gone; None when the kernel keeps no such lists or one may not be read (the caller walks
        by parent pid instead)."""
        if self._children_lists is None:
            self._children_lists = os.path.exists(f"{self._prefix}{os.getpid()}/task/{os.getpid()}/children")
        if not self._children_lists:
            return None
        found: list[int] = []
        seen = {pid}
        parents = [pid]
        try:
            while parents:
                parent = parents.pop()
                for tid in self.tasks(parent):
                    for word in (self.read(parent, f"task/{tid}/children") or "").split():
                        child = int(word)
                        if child not in seen:
                            seen.add(child)
                            found.append(child)
                            parents.append(child)
        except (ProcError, ValueError):
            return None
        return found
