"""One running training command: spawn in its own session, signal the whole tree, capture its output.

The tree is the process group (start_new_session) plus every descendant seen by a walk, so a worker
that called setsid() is still reached (torchrun starts every rank in a session of its own), plus every
process that carries the run's ``GPUWATCH_RUN_ID`` where orphans go (the unit's cgroup, or the daemon's
own descendants: supervise/orphans.py), so a double-forked setsid grandchild is reached too.
psutil.Process objects check the create time before
signalling, which protects against a recycled pid. Output goes through one pipe into a size-capped
RotatingFileHandler (output.py); a `\\r` progress bar keeps only its last segment per line so it cannot fill the disk.
"""

from __future__ import annotations

import collections
import errno
import grp
import logging
import os
import pwd
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import TypedDict

import psutil

from gpuwatch.supervise.orphans import RUN_ENV, candidates, descendant_pids, of_run
from gpuwatch.supervise.output import OutputLog, file_logger

log = logging.getLogger("gpuwatch.supervisor")
STRIPPED_ENV = ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID", "LISTEN_FDS", "LISTEN_PID", "LISTEN_FDNAMES")
MAX_LINE_BYTES = 16 * 1024
TAIL_LINES = 40


class SpawnError(Exception):
    """The command could not be started (bad user, missing program, bad cwd).

    ``permanent``: starting it again cannot help until the config or the machine changes; False for a
    shortage that passes (fork's EAGAIN, ENOMEM).
    """

    def __init__(self, message: str, permanent: bool = True) -> None:
        super().__init__(message)
        self.permanent = permanent


class Identity(TypedDict, total=False):
    """Popen's keyword arguments for the user the command runs as."""

    user: int
    group: int
    extra_groups: list[int]


def identity(user: str | None, group: str | None) -> Identity:
    """Popen kwargs for running as ``user`` with its supplementary groups (video/render).

    A root daemon never starts a trainer as root by default: ``user`` must be set (``"root"`` to ask for it).
    """
    entry = passwd_entry(user) if user is not None else None
    gid = group_id(group) if group is not None else None
    if os.geteuid() != 0:
        if entry is not None and entry.pw_uid != os.geteuid() or gid is not None and gid != os.getegid():
            raise SpawnError(f"cannot run as user {user!r} / group {group!r}: the daemon is not root")
        return Identity()
    if entry is None:
        raise SpawnError('the daemon runs as root: set user = "..." for this trainer '
                         '(user = "root" if it really must run as root)')
    assert user is not None
    return {
        "user": entry.pw_uid,
        "group": entry.pw_gid if gid is None else gid,
        "extra_groups": os.getgrouplist(user, entry.pw_gid),
    }


def passwd_entry(user: str) -> pwd.struct_passwd:
    try:
        return pwd.getpwnam(user)
    except KeyError:
        raise SpawnError(f"no such user {user!r}") from None


def group_id(group: str) -> int:
    try:
        return grp.getgrnam(group).gr_gid
    except KeyError:
        raise SpawnError(f"no such group {group!r}") from None


class TrainerProcess:
    """A started command; poll() for its exit, terminate()/kill() for the whole tree."""

    def __init__(self, argv: list[str], cwd: Path | None, env: dict[str, str], log_path: Path,
                 log_max_bytes: int, log_backups: int, user: str | None = None, group: str | None = None,
                 cgroup: Path | None = None) -> None:
        """``env`` carries the run's ``GPUWATCH_RUN_ID``; ``cgroup`` is the unit's (orphans.unit_cgroup)."""
        self.log_path = log_path
        self.run_id = env.get(RUN_ENV)
        self._cgroup = cgroup
        self.tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
        self.log_bytes = 0
        self._logger = file_logger(log_path, log_max_bytes, log_backups)
        self._output = next(h for h in self._logger.handlers if isinstance(h, OutputLog))
        self._logger.info("=== gpuwatch: %s started %s in %s", argv, time.strftime("%Y-%m-%d %H:%M:%S"), cwd or ".")
        try:
            ids = identity(user, group)
        except SpawnError:
            self._close_logger()
            raise
        try:
            self.popen: subprocess.Popen[bytes] = subprocess.Popen(
                argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT, start_new_session=True, close_fds=True,
                **ids,
            )
        except (OSError, ValueError, subprocess.SubprocessError) as exc:
            self._close_logger()
            passes = isinstance(exc, OSError) and exc.errno in (errno.EAGAIN, errno.ENOMEM)
            raise SpawnError(f"cannot start {argv[0]!r}: {exc}", permanent=not passes) from None
        self.pid = self.popen.pid
        self.pgid = self.popen.pid
        self._known: dict[int, psutil.Process] = {}
        self._reaped = False
        self._reader = threading.Thread(target=self._capture, name=f"log-{self.pid}", daemon=True)
        self._reader.start()

    # ---- status ----
    def poll(self) -> int | None:
        """The leader's exit code (negative: signal) once it is gone; refreshes the known tree while alive."""
        code = self.popen.poll()
        if code is None:
            self._refresh()
        return code

    def pids(self) -> list[int]:
        """The leader and the descendants seen at the last poll (no new /proc scan)."""
        known = list(self._known)  # one C-level copy: safe against a concurrent poll()
        return [self.pid, *(pid for pid in known if pid != self.pid)]

    def tree(self) -> list[psutil.Process]:
        self._refresh()
        return [p for p in self._known.values() if _running(p)]

    # ---- signals ----
    def freeze(self, rounds: int = 3) -> None:
        """SIGSTOP the tree, then walk it again: a rank its agent started between the walk and the
        signal (torchrun restarting workers) would otherwise run on unseen."""
        seen: set[int] = set()
        for _ in range(rounds):
            self._signal(signal.SIGSTOP)
            now = set(self._known)
            if now <= seen:
                return
            seen |= now

    def thaw(self) -> None:
        self._signal(signal.SIGCONT)

    def terminate(self) -> None:
        # A stopped process only acts on TERM after CONT; CONT first so nothing stays stopped.
        self._signal(signal.SIGCONT)
        self._signal(signal.SIGTERM)

    def kill(self) -> None:
        self._signal(signal.SIGCONT)
        self._signal(signal.SIGKILL)

    def reap_leftovers(self) -> None:
        """After the leader exited: no worker may outlive it (orphans hold GPU memory)."""
        if self.popen.poll() is None or self._reaped:
            return
        self.kill()
        self._reaped = True
        for proc in list(self._known.values()):
            try:
                proc.wait(timeout=1.0)
            except (psutil.Error, psutil.TimeoutExpired):
                pass

    @property
    def log_write_errors(self) -> int:
        """Output lines its log could not take (a full disk): counted, said once (OutputLog)."""
        return self._output.write_errors

    def close(self, timeout_s: float = 2.0) -> None:
        self._reader.join(timeout_s)
        self._close_logger()

    def _signal(self, sig: int) -> None:
        self._refresh()
        self._adopt_left_behind()
        grouped = False
        if not self._reaped:  # once reaped, the group id may belong to someone else
            try:
                os.killpg(self.pgid, sig)
                grouped = True
            except (ProcessLookupError, PermissionError):
                pass
        for proc in list(self._known.values()):
            # Only those that left the group: a second TERM can land while Python is finalizing
            # (handlers already reset to default) and turn a clean exit into "killed by SIGTERM".
            if grouped and _pgid(proc.pid) == self.pgid:
                continue
            try:
                proc.send_signal(sig)
            except psutil.Error:
                pass

    def _adopt_left_behind(self) -> None:
        """Processes of this run that left its tree (a double-forked setsid worker) join the known tree:
        signalled with it, and waited for once the leader is gone."""
        if self.run_id is None:
            return
        run_id = self.run_id
        outside = [p for p in of_run(candidates(self._cgroup), lambda mark: mark == run_id)
                   if p.pid not in self._known and p.pid != self.pid]
        if outside:
            log.warning("run %s: %d process(es) left its tree (setsid and double fork?), signalled with it: %s",
                        run_id, len(outside), " ".join(str(p.pid) for p in outside))
        for proc in outside:
            self._known.setdefault(proc.pid, proc)

    def _refresh(self) -> None:
        """The tree walked again (every tick: a rank's heartbeats count only from a process of the tree) by
        ``orphans.descendant_pids``, a psutil handle made only for a pid not known yet."""
        found: list[psutil.Process | None] = []
        try:
            if self.popen.poll() is None:
                leader = psutil.Process(self.pid)
                found = [leader, *(self._known.get(pid) or _handle(pid) for pid in descendant_pids(leader))]
        except psutil.Error:
            found = []
        for proc in found:
            if proc is not None:
                self._known.setdefault(proc.pid, proc)
        for pid, proc in list(self._known.items()):
            if not _running(proc):
                del self._known[pid]

    # ---- output ----
    def _capture(self) -> None:
        assert self.popen.stdout is not None
        fd = self.popen.stdout.fileno()
        line = b""
        while True:
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                break
            if not chunk:
                break
            self.log_bytes += len(chunk)
            parts = chunk.split(b"\n")
            for i, part in enumerate(parts):
                line += part
                if b"\r" in line:
                    line = line.rstrip(b"\r").rsplit(b"\r", 1)[-1]  # a progress bar: keep its latest state
                line = line[-MAX_LINE_BYTES:]
                if i < len(parts) - 1:
                    self._emit(line)
                    line = b""
        if line:
            self._emit(line)
        self.popen.stdout.close()

    def _emit(self, raw: bytes) -> None:
        text = raw.decode("utf-8", "replace")
        self.tail.append(text)
        self._logger.info("%s", text)

    def _close_logger(self) -> None:
        for handler in list(self._logger.handlers):
            handler.close()
            self._logger.removeHandler(handler)


def _handle(pid: int) -> psutil.Process | None:
    """psutil's handle of ``pid`` (its create time read now: a later signal goes to this process only); None when
    it is gone already."""
    try:
        return psutil.Process(pid)
    except psutil.Error:
        return None


def _running(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:
        return None
