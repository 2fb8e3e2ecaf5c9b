"""One trainer's ranks on this node, from their heartbeats (pure): the acknowledgement and the job's view.

Each rank of a distributed job writes its own heartbeat (``heartbeat.rank_heartbeat_path``). A node's
supervisor sees its local ranks only; what it needs from them:

* how many ranks this node runs (``local_world_size``; torchrun says so) and how many hold: the job
  counts as paused here only when every local rank holds and has registered this node's request
  (``wants``: a job held by another node's request could otherwise be released a moment later, before
  our ranks saw our own pause file); "k/N ranks held" until then;
* one step counter per job step: the minimum over the ranks (they count the same lockstep steps);
* whether the job is held at *another* node's request: every local rank holds, and the job has more
  ranks asking than this node's own (``job_wanting`` against the local ranks' ``wants``); then
  ``held_by`` names that node and its reason;
* the job's process-group timeout, backend and whether it spans nodes (the SIGSTOP bound).

Beats of processes no longer in the trainer's tree are ignored (ranks that torchrun restarted or an
elastic job dropped), and so are those of an older incarnation of the job (``job``).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass

from gpuwatch.heartbeat import Heartbeat


@dataclass(frozen=True)
class RankView:
    ranks: int  # ranks this node runs (expected)
    ranks_seen: int
    ranks_held: int
    steps_total: int | None  # min over the ranks, once every local rank reported
    steps_per_s: float | None
    last_step_unix: float | None  # the rank that stepped least recently
    paused: bool  # every local rank holds
    acknowledged: bool  # ...and has registered this node's own request: the acknowledgement of our pause
    held_by: str | None  # "node-b: hot ..." while another node's request holds the job
    paused_by: str | None  # who asked, as the held ranks report it
    job: str | None
    world_size: int | None
    pg_timeout_s: float | None
    backend: str | None

    @property
    def spans_nodes(self) -> bool:
        return self.world_size is not None and self.world_size > self.ranks


def aggregate(beats: Iterable[Heartbeat], live_pids: Collection[int] | None) -> RankView | None:
    """The view of the live ranks' beats (None: no rank of a live process has written one)."""
    live = [b for b in beats if b.rank is not None and (live_pids is None or b.pid in live_pids)]
    if not live:
        return None
    newest = max(live, key=lambda b: b.updated_unix)
    by_rank: dict[int, Heartbeat] = {}
    for beat in live:
        if beat.job == newest.job and beat.rank is not None:
            if beat.rank not in by_rank or beat.updated_unix > by_rank[beat.rank].updated_unix:
                by_rank[beat.rank] = beat
    ranks = list(by_rank.values())
    expected = max(max((b.local_world_size or 1) for b in ranks), len(ranks))
    held = [b for b in ranks if b.paused]
    complete = len(ranks) == expected
    paused = complete and len(held) == expected
    asking_here = sum(1 for b in held if b.wants)
    asking_job = max((b.job_wanting or 0 for b in held), default=0)
    reporter = max(held, key=lambda b: b.updated_unix) if held else None
    paused_by = reporter.paused_by if reporter else None
    rates = [b.steps_per_s for b in ranks if b.steps_per_s is not None]
    last_steps = [b.last_step_unix for b in ranks if b.last_step_unix is not None]
    return RankView(
        ranks=expected, ranks_seen=len(ranks), ranks_held=len(held),
        steps_total=min(b.steps_total for b in ranks) if complete else None,
        steps_per_s=min(rates) if rates else None,
        last_step_unix=min(last_steps) if len(last_steps) == len(ranks) else None,
        paused=paused, acknowledged=paused and all(b.wants for b in held), held_by=(paused_by or "another node") if paused and asking_job > asking_here else None, paused_by=paused_by,
        job=newest.job, world_size=newest.world_size, pg_timeout_s=newest.pg_timeout_s, backend=newest.backend,
    )
