"""Each tick, after every part acted: the jobs the prologs mapped onto the GPUs' processes, the job
receipts, and the node's health verdict, added to the tick's PublishedState (docs/cluster.md).

The state that spans ticks lives here (since when each GPU is over crit, the receipts, the previous
state the counters' increases are taken from); the rules are pure (publish/verdict.py,
publish/receipts.py, procs/jobs.py). The [health] settings come with each tick's configuration.
"""

from __future__ import annotations

from dataclasses import replace

from gpuwatch.config.file import Config
from gpuwatch.model import JobReceipt, PublishedState
from gpuwatch.procs.jobs import attribute, read_mappings
from gpuwatch.publish import receipts
from gpuwatch.publish.verdict import judge, over_crit_since


class NodeWatch:
    def __init__(self) -> None:
        self._since: dict[str, float] = {}
        self._jobs: tuple[JobReceipt, ...] = ()
        self._previous: PublishedState | None = None

    def observe(self, state: PublishedState, config: Config) -> PublishedState:
        settings = config.health
        snap = state.snapshot
        if settings.job_mapping_dirs:
            mappings = read_mappings(settings.job_mapping_dirs, [gpu.gpu_id for gpu in snap.gpus])
            state = replace(state, snapshot=replace(snap, processes=attribute(snap.processes, mappings)))
        self._jobs = receipts.step(self._jobs, self._previous, state, settings.jobs_kept)
        now = state.snapshot.taken_monotonic
        self._since = over_crit_since(self._since, state, now)
        state = replace(state, health=judge(state, settings, self._since, now), jobs=self._jobs)
        self._previous = state
        return state
