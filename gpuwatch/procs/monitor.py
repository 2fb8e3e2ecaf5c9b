"""Who uses which GPU: per-process VRAM, GTT and engine time from DRM fdinfo (plus KFD for ROCm).

Per tick the supervised trees' GPU files are read; every other process holding a GPU is read when the
index re-lists it (``processes.scan_all_every_s``; a ROCm process as soon as KFD lists it), so the
cost stays bounded however many processes run (benchmarks/process_scan.py). Rules (the kernel's
Documentation/gpu/drm-usage-stats.rst, amdgpu_fdinfo.c):

* a client is ``(drm-pdev, drm-client-id)``: a dup'd fd or one a DataLoader worker inherited is the same
  client on several fds and pids, counted once, in the first process listed (trees first, lowest pid);
* engine busy = delta drm-engine-* ns over wall ns between two reads of the client; the counter may
  step back, and then the larger previous value is kept (drm-usage-stats.rst);
* GPUs in ``careful`` (resetting, or gone) are not read through fdinfo or KFD (a read can block on the
  VM lock during a reset, and before 6.15 reading a client of an unbound device could crash the kernel);
  their holders' threads are checked for D state instead.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from gpuwatch.model import GpuProcess
from gpuwatch.procfs import ProcError, Procfs
from gpuwatch.procs import jobs, kfd
from gpuwatch.procs.fdinfo import DrmClient, parse_fdinfo, parse_stat
from gpuwatch.procs.index import TREE_EVERY_S, FdIndex, Holder
from gpuwatch.sysfs import Sysfs

ClientKey = tuple[str | None, int | None]
KFD_TOPOLOGY_EVERY_S = 60.0


@dataclass
class _Reading:
    """The last read of one holder."""

    at: float
    state: str | None
    full_at: float  # when every fd was last read (a client also open in another pid may be reused in between)
    clients: dict[int, tuple[DrmClient, float | None]] = field(default_factory=dict)  # fd -> (client, busy ratio)
    kfd: list[kfd.KfdUse] = field(default_factory=list)
    job_id: str | None = None  # its Slurm job (procs/jobs.py), read once per process: a cgroup move is rare


class ProcessMonitor:
    """``sample(trees, now)`` -> this tick's GpuProcess rows and how many processes could not be read."""

    def __init__(self, procfs: Procfs, sysfs: Sysfs | None, all_every_s: float) -> None:
        self.procfs = procfs
        self.sysfs = sysfs
        self.index = FdIndex(procfs, all_every_s)
        self._readings: dict[int, _Reading] = {}
        self._engine: dict[ClientKey, tuple[int, float]] = {}  # client -> (largest ns seen, when)
        self._kfd_nodes: dict[str, kfd.KfdNode] = {}
        self._kfd_read_at: float | None = None

    def sample(self, trees: Mapping[str, Iterable[int]], now: float, careful: frozenset[str] = frozenset(),
               now_unix: float | None = None) -> tuple[tuple[GpuProcess, ...], int]:
        """``now``: monotonic seconds (engine busy, cadence); ``now_unix`` dates the rows (default: the clock)."""
        owner = {pid: name for name, pids in trees.items() for pid in pids}
        listed = self.index.refresh(set(owner), now, kfd.pids(self.sysfs) if self.sysfs is not None else set())
        due = set(owner) | listed | {pid for pid, r in self._readings.items() if careful & _gpus(r)}
        fresh: dict[ClientKey, tuple[DrmClient, float | None]] = {}  # read this tick
        for pid in sorted(due & set(self.index.holders)):
            self._read(self.index.holders[pid], now, careful, fresh)
        for pid in [p for p in self._readings if p not in self.index.holders]:
            del self._readings[pid]
        self._engine = {k: v for k, v in self._engine.items() if now - v[1] <= 3 * max(self.index.all_every_s, 10.0)}
        wall = time.time() if now_unix is None else now_unix
        return self._rows(owner, wall - now), len(self.index.unreadable)

    def _read(self, holder: Holder, now: float, careful: frozenset[str],
              fresh: dict[ClientKey, tuple[DrmClient, float | None]]) -> None:
        pid = holder.pid
        stat = parse_stat(self._text(pid, "stat") or "")
        if stat is None:
            self.index.drop(pid)
            return
        if stat.start_ticks != holder.start_ticks:  # the pid was reused
            relisted = self.index.index(pid, now, stat)
            if relisted is None:
                return
            holder = relisted
            self._readings.pop(pid, None)
        last = self._readings.get(pid)
        # A DataLoader worker's inherited fd is the client its parent's read gave this tick: reused, except
        # on a full read every TREE_EVERY_S (the fd may have been closed and its number reused since).
        full = last is None or now - last.full_at >= TREE_EVERY_S
        reading = _Reading(at=now, state=stat.state, full_at=now if full or last is None else last.full_at,
                           job_id=last.job_id if last is not None else _job(self._text(pid, "cgroup")))
        for fd in holder.drm_fds:
            previous = last.clients.get(fd) if last else None
            if previous is not None and previous[0].pdev in careful:
                reading.clients[fd] = (previous[0], None)  # not read while its GPU resets
                continue
            if previous is not None and previous[0].key in fresh and not full:
                reading.clients[fd] = fresh[previous[0].key]
                continue
            text = self._text(pid, f"fdinfo/{fd}")
            if text is None:
                self.index.stale(pid)  # closed: list the fds again next time
                continue
            client = parse_fdinfo(text)
            if client is not None and client.driver == "amdgpu" and client.pdev:
                if client.key not in fresh:
                    fresh[client.key] = (client, self._busy(client, now))
                reading.clients[fd] = fresh[client.key]
        if careful & _gpus(reading) or careful & _gpus(last):
            reading.state = self._deepest_state(pid, stat.state)
        if holder.kfd and self.sysfs is not None:
            if self._kfd_read_at is None or now - self._kfd_read_at >= KFD_TOPOLOGY_EVERY_S:
                # GPUs come and go (a reset that rebinds the driver, hotplug): the topology is read again.
                self._kfd_nodes, self._kfd_read_at = kfd.topology(self.sysfs), now
            reading.kfd = kfd.usage(self.sysfs, pid, self._kfd_nodes, careful)
        self._readings[pid] = reading

    def _busy(self, client: DrmClient, now: float) -> float | None:
        previous = self._engine.get(client.key)
        ns = client.engine_ns if previous is None else max(previous[0], client.engine_ns)
        self._engine[client.key] = (ns, now)
        if previous is None or now <= previous[1]:
            return None
        return (ns - previous[0]) / ((now - previous[1]) * 1e9)

    def _deepest_state(self, pid: int, state: str) -> str:
        """``D`` when any thread sleeps uninterruptibly: the main thread of a trainer may sleep in ``S``
        while a worker thread waits on the GPU in ``D`` (proc_pid_stat(5) shows the main thread only)."""
        for tid in self.procfs.tasks(pid):
            task = parse_stat(self._text(pid, f"task/{tid}/stat") or "")
            if task is not None and task.state == "D":
                return "D"
        return state

    def _rows(self, owner: Mapping[int, str], to_unix: float) -> tuple[GpuProcess, ...]:
        order = sorted(self._readings, key=lambda pid: (pid not in owner, owner.get(pid, ""), pid))
        seen: set[ClientKey] = set()
        rows: list[GpuProcess] = []
        for pid in order:
            reading, holder = self._readings[pid], self.index.holders[pid]
            # Every holder gets a row (a stuck DataLoader worker must show), the numbers only the first.
            per_gpu: dict[str, list[tuple[DrmClient, float | None]]] = {}
            for client, busy in reading.clients.values():
                mine = per_gpu.setdefault(client.pdev or "", [])
                if client.key not in seen:
                    seen.add(client.key)
                    mine.append((client, busy))
            uses = {use.gpu_id: use for use in reading.kfd}
            for gpu_id in sorted(set(per_gpu) | set(uses)):
                clients, use = per_gpu.get(gpu_id, []), uses.get(gpu_id)
                ratios = [b for _, b in clients if b is not None]
                rows.append(GpuProcess(
                    pid=pid, gpu_id=gpu_id, command=holder.command, user=holder.user, trainer=owner.get(pid),
                    state=reading.state, vram_bytes=_total(c.vram_bytes for c, _ in clients),
                    gtt_bytes=_total(c.gtt_bytes for c, _ in clients),
                    engine_busy_ratio=sum(ratios) if ratios else None,
                    kfd=holder.kfd, kfd_vram_bytes=use.vram_bytes if use else None,
                    kfd_cu_occupancy_ratio=use.cu_occupancy_ratio if use else None, sampled_unix=reading.at + to_unix,
                    job_id=reading.job_id,
                ))
        return tuple(rows)

    def _text(self, pid: int, name: str) -> str | None:
        try:
            return self.procfs.read(pid, name)
        except ProcError:
            return None


def _gpus(reading: _Reading | None) -> set[str]:
    if reading is None:
        return set()
    return {c.pdev for c, _ in reading.clients.values() if c.pdev} | {use.gpu_id for use in reading.kfd}


def _job(cgroup: str | None) -> str | None:
    ref = jobs.job_of_cgroup(cgroup) if cgroup else None
    return ref.job_id if ref is not None else None


def _total(values: Iterable[int | None]) -> int | None:
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def scan_once(procfs: Procfs, sysfs: Sysfs | None, settle_s: float = 0.25) -> tuple[tuple[GpuProcess, ...], int]:
    """Every process, read twice ``settle_s`` apart so engine busy has a value (`status` without a daemon)."""
    procfs.pids()  # a proc root that cannot be listed is the caller's error (ProcError), not "no process"
    monitor = ProcessMonitor(procfs, sysfs, all_every_s=1e-9)  # every round is whole
    monitor.sample({}, time.monotonic())
    time.sleep(settle_s)
    return monitor.sample({}, time.monotonic())
