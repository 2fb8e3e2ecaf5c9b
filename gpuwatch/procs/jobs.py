"""Which scheduler job a GPU process belongs to: Slurm's cgroup path, else a prolog's per-GPU mapping file.

Slurm puts every process of a job step in a cgroup of its own (proctrack/cgroup, task/cgroup), and
/proc/<pid>/cgroup (cgroups(7)) names it:

* cgroup v1, one line per hierarchy: ``4:memory:/slurm/uid_1000/job_123/step_0/task_0`` (``slurm_<node>``
  with several slurmd per host: ``/slurm_n1/uid_1000/job_123/step_batch``);
* cgroup v2, the one line ``0::/system.slice/slurmstepd.scope/job_123/step_0/user/task_0``.

``job_<id>`` is the job wherever it appears; the ``step_`` after it is the step. A process outside a job
cgroup (proctrack/linuxproc, or a GPU process the job did not start) gets its GPU's job from a mapping
directory a prolog writes, ``<dir>/<gpu index>`` (the GPU's position in the sorted PCI slot list, as
`gpuwatch status --gpu INDEX` counts): DCGM's form (``DCGM_HPC_JOB_MAPPING_DIR``: job ids, one per line)
or AMD device-metrics-exporter's (``/var/run/exporter/<gpu>``: a JSON object with ``SLURM_JOB_ID``).

A job's start on this node, where the scheduler gives it, is when slurmd made the job's cgroup directory
(``job_cgroup_dir``, ``cgroup_made_unix``); ``job_start`` takes it, else its processes' earliest start.
"""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from gpuwatch.model import GpuProcess, JobStart
from gpuwatch.procfs import ProcError, Procfs

_JOB = re.compile(r"/job_(?P<job>\d+)(?:/step_(?P<step>[^/\s]+))?")
MAX_MAPPING_BYTES = 64 * 1024  # a prolog's file is a few lines; anything larger is not one
# Where the kernel's cgroup file system is mounted under the sysfs root (cgroups(7): /sys/fs/cgroup), v2 itself,
# v1 one directory per hierarchy; relative, so it follows the injected sysfs root like every other sysfs path.
CGROUP_DIR = "fs/cgroup"
# A process's start (psutil: the boot time from /proc/stat, whole seconds, plus its start in clock ticks) may read
# up to a second early; a job's processes start after its cgroup is made.
START_SLACK_S = 2.0


@dataclass(frozen=True)
class JobRef:
    job_id: str
    step: str | None = None  # "0", "batch", "extern", "interactive"; None: the job's own cgroup


def _job_match(text: str) -> tuple[str, str, re.Match[str]] | None:
    """The first line of /proc/<pid>/cgroup naming a job: its hierarchy's controllers, its path, the match."""
    for line in text.splitlines():
        _, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        match = _JOB.search(path)
        if match:
            return controllers, path, match
    return None


def job_of_cgroup(text: str) -> JobRef | None:
    """The Slurm job in /proc/<pid>/cgroup's text (v1 or v2 layout), or None outside a job."""
    found = _job_match(text)
    return None if found is None else JobRef(found[2]["job"], found[2]["step"])


def job_cgroup_dir(text: str) -> str | None:
    """The job's own cgroup directory in /proc/<pid>/cgroup's text, relative to the cgroup mount (``CGROUP_DIR``
    under the sysfs root): v2 the path up
    to ``job_<id>``; v1 the hierarchy's mount directory first (its controllers as the kernel lists them,
    ``cpu,cpuacct``; a named hierarchy ``name=systemd`` is mounted as ``systemd``). None outside a job."""
    found = _job_match(text)
    if found is None:
        return None
    controllers, path, match = found
    job_path = path[:match.end("job")].lstrip("/")
    if not controllers:  # v2: the one unified hierarchy (the line "0::/...")
        return job_path
    return controllers.removeprefix("name=") + "/" + job_path


def cgroup_made_unix(cgroup_root: Path, relative: str) -> float | None:
    """When a job's cgroup directory was made: slurmd (its slurmstepd) makes it when the job starts on this node.

    Its birth time where the file system keeps one (statx(2) STATX_BTIME, Python's ``st_birthtime``), else its
    ctime: the cgroup file system (kernfs) fills no birth time, and gives a directory's inode its times when the
    inode is made, at the creation, which slurmstepd's own use of the directory follows at once; a root-owned
    directory's times change only at a setattr (chmod, chown). Should the kernel drop the inode and make it again
    later, or a directory Slurm chowned take a new step's time (kernfs_add_one stamps a parent that has its own
    attributes), the time is later than the job's processes' start: ``job_start`` then takes theirs. None where
    the directory cannot be read (gone, not Slurm's)."""
    if ".." in relative.split("/"):
        return None  # a path from a process's own cgroup file names a directory under the root, never above it
    try:
        found = os.stat(cgroup_root / relative, follow_symlinks=False)
    except (OSError, ValueError):
        return None
    if not stat.S_ISDIR(found.st_mode):
        return None  # a cgroup is a directory; a link's or a file's times are not its
    born = getattr(found, "st_birthtime", None)
    made = born if isinstance(born, float) and born > 0 else found.st_ctime
    return made if made > 0 else None


def cgroups_made(procfs: Procfs, cgroup_root: Path, rows: Iterable[GpuProcess]) -> dict[str, float]:
    """Each job's cgroup creation (``cgroup_made_unix``), found from the first of its processes on a GPU whose
    /proc/<pid>/cgroup names that job; a job none of whose processes tells it is absent."""
    made: dict[str, float] = {}
    for row in rows:
        if row.job_id is None or row.job_id in made:
            continue
        try:
            text = procfs.read(row.pid, "cgroup")
        except ProcError:
            continue
        ref = job_of_cgroup(text) if text else None
        relative = job_cgroup_dir(text) if text and ref is not None and ref.job_id == row.job_id else None
        when = cgroup_made_unix(cgroup_root, relative) if relative is not None else None
        if when is not None:
            made[row.job_id] = when
    return made


def job_start(cgroup_made: float | None, processes_started: float | None) -> JobStart | None:
    """A job's start on this node: its cgroup's creation (``cgroup_made_unix``) when known and not later than its
    processes' earliest start (``START_SLACK_S``: a later one is not the creation), else that earliest start."""
    if cgroup_made is not None and (processes_started is None or cgroup_made <= processes_started + START_SLACK_S):
        return JobStart(cgroup_made, "scheduler")
    if processes_started is not None:
        return JobStart(processes_started, "processes")
    return None


def parse_mapping(text: str) -> tuple[str, ...]:
    """The job ids of one mapping file: a JSON object with ``SLURM_JOB_ID`` (device-metrics-exporter), else one
    id per line (DCGM); blank lines and ``#`` comments skipped; garbage yields nothing."""
    stripped = text.strip()
    if stripped.startswith("{"):
        try:
            value = json.loads(stripped)
        except ValueError:
            return ()
        job = value.get("SLURM_JOB_ID") if isinstance(value, dict) else None
        return (str(job),) if isinstance(job, (str, int)) and str(job).strip() else ()
    ids = [line.strip() for line in stripped.splitlines()]
    return tuple(i for i in ids if i and not i.startswith("#") and i.replace(".", "").replace("_", "").isalnum())


def read_mappings(dirs: Iterable[Path], gpu_ids: Sequence[str]) -> dict[str, tuple[str, ...]]:
    """GPU id -> the job ids the mapping directories give it (first directory that names the GPU wins). A missing
    or unreadable file is no mapping (the prolog has not run, or the epilog removed it)."""
    slots = sorted(gpu_ids)
    found: dict[str, tuple[str, ...]] = {}
    for directory in dirs:
        for index, gpu_id in enumerate(slots):
            if gpu_id in found:
                continue
            try:
                with open(directory / str(index), "rb") as handle:
                    data = handle.read(MAX_MAPPING_BYTES)
            except OSError:
                continue
            jobs = parse_mapping(data.decode("utf-8", "replace"))
            if jobs:
                found[gpu_id] = jobs
    return found


def attribute(processes: tuple[GpuProcess, ...], mappings: dict[str, tuple[str, ...]]) -> tuple[GpuProcess, ...]:
    """Rows without a job (no Slurm cgroup) get their GPU's mapped job when the file names exactly one; a GPU
    shared by several jobs stays unattributed per process (which process is whose is not known)."""
    if not mappings:
        return processes
    return tuple(
        replace(row, job_id=mappings[row.gpu_id][0])
        if row.job_id is None and len(mappings.get(row.gpu_id, ())) == 1 else row
        for row in processes
    )
