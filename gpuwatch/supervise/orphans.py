"""What a trainer's process tree leaves behind, found where it went: the unit's cgroup under systemd,
the daemon's own descendants otherwise (the daemon is a child subreaper).

A worker that forks twice and calls ``setsid`` leaves its trainer's tree: its parent exits, and the
kernel hands it to the nearest subreaper, else to init. Its process group and its ancestry no longer
lead to the trainer, so neither ``killpg`` nor a walk of the tree (``descendant_pids``) reaches it. Two things still do:

* every process of a run carries ``GPUWATCH_RUN_ID`` in its environment, inherited through fork and
  exec (/proc/PID/environ is the environment it was started with), so a process can be attributed
  to its run wherever it went;
* where it went is known: under systemd every process of the unit stays in the unit's cgroup
  (``/proc/self/cgroup``; ProtectControlGroups= keeps anything from leaving it), and outside systemd
  the daemon makes itself a child subreaper (prctl PR_SET_CHILD_SUBREAPER), so an orphan of its
  trainers becomes the daemon's child instead of init's.

docs/supervisor.md says what neither catches.
"""

from __future__ import annotations

import ctypes
import logging
import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

import psutil

from gpuwatch.config.file import REAL_PROC_ROOT, REAL_SYSFS_ROOT
from gpuwatch.procfs import ProcError, Procfs
from gpuwatch.procs.fdinfo import parse_stat

log = logging.getLogger("gpuwatch.supervisor")

RUN_ENV = "GPUWATCH_RUN_ID"
_PR_SET_CHILD_SUBREAPER = 36  # <linux/prctl.h>
_subreaper = False
_PROC = Procfs(REAL_PROC_ROOT)  # the /proc psutil reads: the pids walked are this machine's


def started_at(pid: int) -> int | None:
    """``pid``'s start time (clock ticks since boot, /proc/<pid>/stat field 22: with the pid, what tells a reused
    pid apart); None when it is gone or cannot be read. One read of its own stat, a third of what psutil's
    ``Process(pid).create_time()`` costs: a run's pid is checked every tick."""
    try:
        stat = parse_stat(_PROC.read(pid, "stat") or "")
    except ProcError:
        return None
    return None if stat is None else stat.start_ticks


def descendant_pids(proc: psutil.Process | int) -> list[int]:
    """``proc``'s descendants, parents first: from the kernel's lists of children (procfs.Procfs.descendants,
    only the tree's own files); psutil's walk by parent pid, which reads every process's stat, only on a kernel
    without them. ``proc``: a psutil handle, or a pid (its handle is made only for psutil's walk: making one
    reads the pid's stat, which an attached run's tick has just read). Raises psutil.Error when psutil walks and
    ``proc`` is gone; the kernel's lists of a pid gone are empty."""
    pid = proc if isinstance(proc, int) else proc.pid
    kids = _PROC.descendants(pid)
    if kids is not None:
        return kids
    handle = psutil.Process(pid) if isinstance(proc, int) else proc
    return [child.pid for child in handle.children(recursive=True)]


def become_subreaper(on: bool = True) -> bool:
    """Orphaned descendants of this process are re-parented to it (Linux >= 3.4); whether it now is one."""
    global _subreaper
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        done = libc.prctl(_PR_SET_CHILD_SUBREAPER, int(on), 0, 0, 0) == 0
    except (OSError, AttributeError):
        done = False
    _subreaper = on and done
    return _subreaper


def unified_path(proc_cgroup: str) -> str | None:
    """The cgroup v2 path from /proc/PID/cgroup's text (``0::/system.slice/gpuwatch.service``), else the
    ``name=systemd`` v1 path; None when there is neither or it is the root (pure)."""
    paths = dict(line.split(":", 2)[1:] for line in proc_cgroup.splitlines() if line.count(":") >= 2)
    for hierarchy in ("", "name=systemd"):
        path = paths.get(hierarchy)
        if path and path != "/":
            return path
    return None


def unit_cgroup(environ: Mapping[str, str] = os.environ, proc: Path = REAL_PROC_ROOT,
                cgroupfs: Path = REAL_SYSFS_ROOT / "fs/cgroup") -> Path | None:
    """The directory of the systemd service's cgroup this process runs in; None outside a service.

    ``INVOCATION_ID`` is set by systemd for every process of a unit; the path must name a ``.service``
    (a login session's scope is not ours to sweep).
    """
    if not environ.get("INVOCATION_ID"):
        return None
    try:
        path = unified_path((proc / "self/cgroup").read_text())
    except OSError:
        return None
    if path is None or not path.endswith(".service"):
        return None
    for mount in (cgroupfs, cgroupfs / "unified", cgroupfs / "systemd"):  # v2, hybrid, v1 (name=systemd)
        directory = mount / path.lstrip("/")
        if (directory / "cgroup.procs").is_file():
            return directory
    return None


def candidates(cgroup: Path | None) -> list[psutil.Process]:
    """Where a run's processes can be: the cgroup's members, else this process's descendants."""
    me = os.getpid()
    try:
        pids = (descendant_pids(psutil.Process(me)) if cgroup is None
                else [int(line) for line in (cgroup / "cgroup.procs").read_text().split()])
    except (psutil.Error, OSError, ValueError):
        return []
    found = []
    for pid in pids:
        if pid != me:
            try:
                found.append(psutil.Process(pid))
            except psutil.Error:
                pass
    return found


def of_run(processes: Iterable[psutil.Process], match: Callable[[str], bool]) -> list[psutil.Process]:
    """Those whose ``GPUWATCH_RUN_ID`` ``match`` accepts; unreadable ones (gone, another user's) are skipped."""
    found = []
    for proc in processes:
        try:
            mark = proc.environ().get(RUN_ENV)
        except psutil.Error:
            continue
        if mark is not None and match(mark):
            found.append(proc)
    return found


def sweep(cgroup: Path | None, runs_prefix: str) -> None:
    """SIGKILL whatever still carries one of this daemon's run marks (the daemon's last act at shutdown)."""
    left = of_run(candidates(cgroup), lambda mark: mark.startswith(runs_prefix + "/"))
    if left:
        log.warning("SIGKILL to %d process(es) of earlier runs still running at shutdown: %s", len(left),
                    " ".join(str(p.pid) for p in left))
    for proc in left:
        try:
            proc.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(left, timeout=2.0)


def reap_adopted(keep: set[int]) -> None:
    """Collect the exit status of orphans the kernel handed to this subreaper (else they stay zombies).

    ``keep`` are the children whose status their Popen collects (the trainers' leaders). One waitid
    per tick while nothing is waiting, not a scan of the process table.
    """
    while _subreaper:
        try:
            waiting = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return
        if waiting is None or waiting.si_pid in keep:
            return  # nothing exited, or a trainer's leader: its Popen reaps it, the rest next tick
        try:
            os.waitpid(waiting.si_pid, os.WNOHANG)
        except ChildProcessError:
            return
