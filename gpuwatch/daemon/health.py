"""Each tick, after every part acted: the jobs the prologs mapped onto the GPUs' processes, the job
receipts, and the node's health verdict, added to the tick's PublishedState (docs/cluster.md).

The state that spans ticks lives here (since when each GPU is over crit, the receipts, the previous
state the counters' increases are taken from); the rules are pure (publish/verdict.py,
publish/receipts.py, publish/receipt_resume.py, procs/jobs.py). The [health] settings come with each tick's
configuration. At the start the receipts are taken back from the previous daemon (publish/receipt_store.py) and
the first tick says the time no daemon ran on them; a reload keeps them (one NodeWatch for the daemon's life).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from gpuwatch.config.file import Config
from gpuwatch.gpus.accounting import counter_grew
from gpuwatch.model import JobReceipt, JobStart, PublishedState, replaced
from gpuwatch.procfs import Procfs
from gpuwatch.procs.jobs import CGROUP_DIR, attribute, cgroups_made, job_start, read_mappings
from gpuwatch.publish import receipt_store, receipts
from gpuwatch.publish.receipt_resume import Carried, resume, unseen_before
from gpuwatch.publish.verdict import judge, over_crit_since


class NodeWatch:
    def __init__(self, cgroup_root: Path | None = None) -> None:
        # Where a Slurm job's cgroup tells its start (procs/jobs.py); None: under the configured sysfs root.
        self._cgroup_root = cgroup_root
        self._since: dict[str, float] = {}
        self._jobs: tuple[JobReceipt, ...] = ()
        self._previous: PublishedState | None = None
        self._carried: Carried | None = None
        self._boot_id: str | None = None
        self._took_none = False  # take_back found nothing to take: the first tick says what it did not see

    def take_back(self, config: Config) -> None:
        """At the start, before the first tick writes the state file: the previous daemon's receipts, which the
        first tick resumes (a daemon that never calls this, a test's, starts empty and publishes no boot id)."""
        self._boot_id = receipt_store.boot_id(config.proc_root)
        self._carried = receipt_store.take_back(config.state_file, self._boot_id, config.health.jobs_kept)
        self._took_none = self._carried is None

    def observe(self, state: PublishedState, config: Config) -> PublishedState:
        settings = config.health
        snap = state.snapshot
        if settings.job_mapping_dirs:
            mappings = read_mappings(settings.job_mapping_dirs, [gpu.gpu_id for gpu in snap.gpus])
            state = replace(state, snapshot=replace(snap, processes=attribute(snap.processes, mappings)))
        jobs, carried, self._carried = self._jobs, self._carried, None
        if carried is not None:
            jobs = resume(carried, state, counter_grew)
        self._jobs = receipts.step(jobs, self._previous, state, settings.jobs_kept)
        if self._took_none and state.daemon is not None:  # a job already running: its start to now was not seen
            self._took_none = False
            cgroups = self._cgroup_root or Path(config.sysfs_root) / CGROUP_DIR
            self._jobs = unseen_before(self._jobs, _job_starts(state, Procfs(config.proc_root), cgroups),
                                       state.daemon.started_unix, state.snapshot.taken_unix)
        now = state.snapshot.taken_monotonic
        self._since = over_crit_since(self._since, state, now)
        # The boot id published so that the next daemon knows the receipts are this boot's.
        daemon = state.daemon if state.daemon is None else replaced(state.daemon, boot_id=self._boot_id)
        state = replaced(state, health=judge(state, settings, self._since, now), jobs=self._jobs, daemon=daemon)
        self._previous = state
        return state


def _job_starts(state: PublishedState, procfs: Procfs, cgroup_root: Path) -> dict[str, JobStart]:
    """Each job on a GPU now: its start where the scheduler gives it (its Slurm cgroup's creation), else the
    earliest start (psutil's create_time, /proc/<pid>/stat) of its processes (procs/jobs.job_start)."""
    import psutil

    earliest: dict[str, float] = {}
    for row in state.snapshot.processes:
        if row.job_id is None:
            continue
        try:
            created = psutil.Process(row.pid).create_time()
        except (psutil.Error, OSError):
            continue
        earliest[row.job_id] = min(created, earliest.get(row.job_id, created))
    made = cgroups_made(procfs, cgroup_root, state.snapshot.processes)
    starts = {job: job_start(made.get(job), earliest.get(job)) for job in {*made, *earliest}}
    return {job: start for job, start in starts.items() if start is not None}
