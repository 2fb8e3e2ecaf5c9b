"""The metric families of the node's health verdict and of the scheduler's jobs (from the PublishedState only).

``gpuwatch_node_healthy`` is what `gpuwatch health` answers (1 healthy, 0 the verdict that drains the node),
``gpuwatch_health_fault{gpu, code}`` one series per fault in force (codes: docs/cluster.md). Job series
exist only while the job's processes use the GPU: a finished job's label goes with its last process, so the
cardinality stays one job per GPU at a time (its receipt stays in the state file, not in /metrics).
"""

from __future__ import annotations

from gpuwatch.model import PublishedState
from gpuwatch.publish.families import Family, counter, gauge


def node_families(state: PublishedState) -> list[Family]:
    healthy = gauge("node_healthy", "1 when gpuwatch's health verdict finds no fault (what `gpuwatch health` "
                    "answers), 0 when it would drain the node.", [])
    faults = gauge("health_fault", "1 per fault of the health verdict in force, by GPU (\"\" for the node) and code "
                   "(G004 GPU down, G006 fan failsafe, ...: docs/cluster.md).", ["gpu", "code"])
    if state.health is not None:
        healthy.add_metric([], 1 if state.health.healthy else 0)
        for fault in state.health.faults:
            faults.add_metric([fault.gpu_id or "", fault.code], 1)
    info = gauge("gpu_job_info", "1 per scheduler job with a process on the GPU (its Slurm cgroup, else the "
                 "prolog's mapping file).", ["gpu", "job_id"])
    energy = counter("job_energy_joules", "Energy of the GPU while the job's processes used it (the increase of "
                     "gpuwatch_gpu_energy_joules_total over the job's ticks), while the job runs.", ["gpu", "job_id"])
    for job in state.jobs:
        if not job.active:
            continue
        for use in job.gpus:
            info.add_metric([use.gpu_id, job.job_id], 1)
            energy.add_metric([use.gpu_id, job.job_id], use.energy_j)
    return [healthy, faults, info, energy]
