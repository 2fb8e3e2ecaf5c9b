"""Which processes hold a GPU (a DRM node or /dev/kfd open), re-listed within a per-tick bound.

Finding them means listing every process's ``fd/`` and reading every link: 17 ms for 500 processes on the 2-core
dev VM (benchmarks/process_scan.py), too much for every tick. amdgpu_top rebuilds its fd list every 5 s; here
every pid is re-listed once per ``all_every_s`` round, spread evenly over the round's ticks (the first round
runs whole, at start; processes without GPU files only every ``QUIET_EVERY``-th round), the supervised trees'
pids every ``TREE_EVERY_S`` (a new one at once), so a trainer that opens the GPU late shows within seconds, and
a process KFD lists (ROCm) at once. A holder's user and command are read once per process identity (pid + start
time: a reused pid is a new process).
"""

from __future__ import annotations

import math
import pwd
from dataclasses import dataclass
from functools import lru_cache

from gpuwatch.procfs import ProcError, Procfs
from gpuwatch.procs.fdinfo import ProcStat, command_line, parse_stat, parse_uid

TREE_EVERY_S = 2.0
# A process that had no GPU file open at its last listing is listed again only every QUIET_EVERY-th round
# (a process that opens the GPU does so when it starts, as a new pid, and ROCm ones KFD lists at once):
# the rounds then cost about a quarter, spread evenly because the quiet pids take turns by pid.
QUIET_EVERY = 4
DRM_PREFIX = "/dev/dri/"  # renderD128, card0; "(deleted)" appended once the driver was unbound
KFD_NODE = "/dev/kfd"


@dataclass(frozen=True)
class Holder:
    """A process with GPU files open, as of its last listing."""

    pid: int
    start_ticks: int
    drm_fds: tuple[int, ...]
    kfd: bool
    user: str | None
    command: str
    indexed_at: float


@lru_cache(maxsize=256)
def user_name(uid: int | None) -> str | None:
    if uid is None:
        return None
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


class FdIndex:
    def __init__(self, procfs: Procfs, all_every_s: float) -> None:
        self.procfs = procfs
        self.all_every_s = all_every_s
        self.holders: dict[int, Holder] = {}
        self.unreadable: set[int] = set()  # fd/ not listable: another user's process without CAP_SYS_PTRACE
        self._pending: list[int] = []
        self._round_size = 0
        self._round_start = 0.0
        self._rounds = 0
        self._quiet: set[int] = set()  # listed last time without a GPU file
        self._last: float | None = None
        self._tree_listed: dict[int, float] = {}  # a supervised tree's pid -> when it was last listed

    def refresh(self, tree: set[int], now: float, known: set[int] | None = None) -> set[int]:
        """Re-list the trees' pids that are due, ``known`` GPU users not listed yet (KFD's own process list)
        and this tick's share of the round; the pids listed."""
        if known is None:
            known = set()
        listed = set()
        # A tree's pid that holds no GPU file is listed again at the holders' cadence too: listing every run's
        # processes every tick was most of the process scan with two attached runs (docs/performance.md).
        # A new pid (a rank started since) is listed at once.
        tree_listed = {pid: at for pid, at in self._tree_listed.items() if pid in tree}
        for pid in sorted(tree):
            holder = self.holders.get(pid)
            at = holder.indexed_at if holder is not None else tree_listed.get(pid)
            if at is None or not 0 <= now - at < TREE_EVERY_S:
                self.index(pid, now)
                listed.add(pid)
                tree_listed[pid] = now
        self._tree_listed = tree_listed
        for pid in sorted(known - set(self.holders) - self.unreadable - listed):
            self.index(pid, now)
            listed.add(pid)
        for pid in self._rotation(now):
            if pid not in listed:
                self.index(pid, now)
                listed.add(pid)
        return listed

    def index(self, pid: int, now: float, stat: ProcStat | None = None) -> Holder | None:
        """List ``pid``'s fds; keep it if it holds a GPU file."""
        try:
            fds = self.procfs.fds(pid)
        except ProcError:
            self.unreadable.add(pid)
            self.holders.pop(pid, None)
            return None
        self.unreadable.discard(pid)
        drm = tuple(sorted(fd for fd, target in fds or () if target.startswith(DRM_PREFIX)))
        kfd = any(target == KFD_NODE for _, target in fds or ())
        stat = (stat or self._stat(pid)) if drm or kfd else None
        if stat is None:  # no GPU file open, or gone
            self.holders.pop(pid, None)
            self._quiet.add(pid)
            return None
        self._quiet.discard(pid)
        known = self.holders.get(pid)
        if known is not None and known.start_ticks == stat.start_ticks:
            user, command = known.user, known.command
        else:
            user = user_name(parse_uid(self._text(pid, "status") or ""))
            command = command_line(self._text(pid, "cmdline"), stat.comm)
        holder = Holder(pid=pid, start_ticks=stat.start_ticks, drm_fds=drm, kfd=kfd, user=user, command=command,
                        indexed_at=now)
        self.holders[pid] = holder
        return holder

    def drop(self, pid: int) -> None:
        self.holders.pop(pid, None)

    def stale(self, pid: int) -> None:
        """An fd of ``pid`` was closed: list it again at its next read."""
        holder = self.holders.get(pid)
        if holder is not None:
            self.holders[pid] = Holder(**{**holder.__dict__, "indexed_at": -math.inf})

    def _rotation(self, now: float) -> list[int]:
        """This tick's share of the current round; a new round starts as soon as one ends."""
        last, self._last = self._last, now
        if self.all_every_s <= 0:
            return []
        if not self._pending:
            try:
                listing = self.procfs.pids()
            except ProcError:
                return []
            present = set(listing)
            for pid in [p for p in self.holders if p not in present]:
                del self.holders[pid]
            self.unreadable &= present
            self._quiet &= present
            self._rounds += 1
            turn = self._rounds % QUIET_EVERY
            due = [pid for pid in sorted(listing) if pid not in self._quiet or pid % QUIET_EVERY == turn]
            self._pending, self._round_size = due, len(due)
            if last is None:  # the first round runs whole: the table is complete from the first tick
                batch, self._pending = self._pending, []
                return batch
            self._round_start = last  # the round began after the previous tick
        done = self._round_size - len(self._pending)
        share = math.ceil(self._round_size * min(1.0, (now - self._round_start) / self.all_every_s))
        count = max(0, share - done)  # the round's last pids are due only at its end: one round per all_every_s
        batch, self._pending = self._pending[:count], self._pending[count:]
        return batch

    def _stat(self, pid: int) -> ProcStat | None:
        text = self._text(pid, "stat")
        return parse_stat(text) if text else None

    def _text(self, pid: int, name: str) -> str | None:
        try:
            return self.procfs.read(pid, name)
        except ProcError:
            return None
