"""What /proc says about a control-socket peer and the run it attaches (through procfs.py).

SO_PEERCRED's pid and uid are the machine's own kernel's, so these read the machine's own /proc (the
daemon's pre-simulation ``proc_root``: a simulated proc tree holds no real process). A run's pid is
accepted when it exists, its real uid is the peer's (root may attach any user's), and it is the peer or a
descendant of it (the ppid chain): a user cannot register a stranger's process as their run. Its Slurm job is
its cgroup's when it runs in one (a wrapper without SLURM_JOB_ID, or with a stale one, still gets the right job).
"""

from __future__ import annotations

from gpuwatch.procfs import ProcError, Procfs
from gpuwatch.procs.fdinfo import parse_stat, parse_uid
from gpuwatch.procs.jobs import job_of_cgroup
from gpuwatch.supervise.access import Peer, parse_groups

MAX_ANCESTRY = 256  # ppid hops before a chain counts as not the peer's (pid namespaces nest far less)


def _read(procfs: Procfs, pid: int, name: str) -> str | None:
    try:
        return procfs.read(pid, name)
    except ProcError:
        return None


def with_groups(procfs: Procfs, peer: Peer) -> Peer:
    """``peer`` with its supplementary groups (none when its status cannot be read)."""
    status = _read(procfs, peer.pid, "status")
    return peer if status is None else Peer(peer.pid, peer.uid, peer.gid, parse_groups(status))


def gone(procfs: Procfs, pid: int) -> bool:
    """Whether ``pid`` names no process (now)."""
    return _read(procfs, pid, "stat") is None


def run_refusal(procfs: Procfs, peer: Peer, pid: int) -> str | None:
    """Why ``peer`` may not attach ``pid`` as its run (one line), None when it may. The one check for every pid a
    session names: its ``Attach`` and every later ``Restarted``."""
    if pid <= 0:
        return f"pid {pid} is not a process"
    status = _read(procfs, pid, "status")
    if status is None:
        return f"no process {pid}"
    uid = parse_uid(status)
    if peer.uid != 0 and uid != peer.uid:
        return f"pid {pid} is not yours (uid {uid})"
    hops, current = 0, pid
    while current != peer.pid:
        text = _read(procfs, current, "stat")
        stat = parse_stat(text) if text else None
        hops += 1
        if stat is None or stat.ppid <= 1 or hops > MAX_ANCESTRY:
            return f"pid {pid} is not the caller's process or a descendant of it"
        current = stat.ppid
    return None


def run_job(procfs: Procfs, pid: int, claimed: str | None) -> str | None:
    """An attached run's Slurm job: its cgroup's (the kernel's word, proctrack/cgroup: procs/jobs.py) when it is in
    one, else ``claimed`` (its wrapper's SLURM_JOB_ID: without a job cgroup, proctrack/linuxproc, nothing better)."""
    cgroup = _read(procfs, pid, "cgroup")
    ref = job_of_cgroup(cgroup) if cgroup else None
    return ref.job_id if ref is not None else claimed
