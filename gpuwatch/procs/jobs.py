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
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from gpuwatch.model import GpuProcess

_JOB = re.compile(r"/job_(?P<job>\d+)(?:/step_(?P<step>[^/\s]+))?")
MAX_MAPPING_BYTES = 64 * 1024  # a prolog's file is a few lines; anything larger is not one


@dataclass(frozen=True)
class JobRef:
    job_id: str
    step: str | None = None  # "0", "batch", "extern", "interactive"; None: the job's own cgroup


def job_of_cgroup(text: str) -> JobRef | None:
    """The Slurm job in /proc/<pid>/cgroup's text (v1 or v2 layout), or None outside a job."""
    for line in text.splitlines():
        _, _, path = line.partition(":")
        _, _, path = path.partition(":")
        match = _JOB.search(path)
        if match:
            return JobRef(match["job"], match["step"])
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
