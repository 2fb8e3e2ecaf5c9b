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


@dataclass(frozen=True)
class Reported:
    """What a trainer reports of its progress: its job's ranks when it runs one, else its one heartbeat."""

    steps_total: int | None
    steps_per_s: float | None
    last_step_unix: float | None
    acknowledged: bool  # it holds for our pause (a job: every local rank, having seen our own request)


def reported(ranks: RankView | None, beat: Heartbeat | None) -> Reported:
    """A distributed job's ranks (one file each) speak for it, their view being the job's; a single process
    has its one heartbeat; a trainer that never wrote either reports nothing."""
    if ranks is not None:
        return Reported(ranks.steps_total, ranks.steps_per_s, ranks.last_step_unix, ranks.acknowledged)
    if beat is not None:
        return Reported(beat.steps_total, beat.steps_per_s, beat.last_step_unix, beat.paused)
    return Reported(None, None, None, False)


def aggregate(beats: Iterable[Heartbeat], live_pids: Collection[int] | None) -> RankView | None:
    """The view of the live ranks' beats (None: no rank of a live process has written one)."""
    live = _live_rank_beats(beats, live_pids)
    if not live:
        return None
    newest = max(live, key=lambda b: b.updated_unix)
    ranks = _newest_per_rank(live, newest.job)
    expected = _expected_ranks(ranks)
    held = [b for b in ranks if b.paused]
    complete = len(ranks) == expected
    paused = complete and len(held) == expected
    paused_by = _reported_paused_by(held)
    return RankView(
        ranks=expected, ranks_seen=len(ranks), ranks_held=len(held),
        steps_total=min(b.steps_total for b in ranks) if complete else None,
        steps_per_s=_slowest_rate(ranks), last_step_unix=_least_recent_step_unix(ranks),
        paused=paused, acknowledged=paused and all(b.wants for b in held),
        held_by=_held_by_another_node(held, paused_by) if paused else None, paused_by=paused_by,
        job=newest.job, world_size=newest.world_size, pg_timeout_s=newest.pg_timeout_s, backend=newest.backend,
    )


def _live_rank_beats(beats: Iterable[Heartbeat], live_pids: Collection[int] | None) -> list[Heartbeat]:
    """Rank beats of processes still in the trainer's tree (every rank beat when ``live_pids`` is None)."""
    return [b for b in beats if b.rank is not None and (live_pids is None or b.pid in live_pids)]


def _newest_per_rank(beats: Iterable[Heartbeat], job: str | None) -> list[Heartbeat]:
    """Each rank's newest beat of incarnation ``job``: an older incarnation's ranks are gone."""
    by_rank: dict[int, Heartbeat] = {}
    for beat in beats:
        if beat.job != job or beat.rank is None:
            continue
        known = by_rank.get(beat.rank)
        if known is None or beat.updated_unix > known.updated_unix:
            by_rank[beat.rank] = beat
    return list(by_rank.values())


def _expected_ranks(ranks: list[Heartbeat]) -> int:
    """The ranks this node runs: what torchrun says (``local_world_size``), never fewer than seen."""
    return max(max((b.local_world_size or 1) for b in ranks), len(ranks))


def _reported_paused_by(held: list[Heartbeat]) -> str | None:
    """Who asked for the hold, as the most recently updated held rank reports it."""
    if not held:
        return None
    return max(held, key=lambda b: b.updated_unix).paused_by


def _held_by_another_node(held: list[Heartbeat], paused_by: str | None) -> str | None:
    """Who holds a paused job when it is not (only) this node: more of the job's ranks ask for the pause
    (``job_wanting``) than this node's own ranks do (``wants``)."""
    asking_here = sum(1 for b in held if b.wants)
    asking_job = max((b.job_wanting or 0 for b in held), default=0)
    if asking_job <= asking_here:
        return None
    return paused_by or "another node"


def _slowest_rate(ranks: list[Heartbeat]) -> float | None:
    """The job's steps per second: its slowest rank sets the pace (lockstep)."""
    rates = [b.steps_per_s for b in ranks if b.steps_per_s is not None]
    return min(rates) if rates else None


def _least_recent_step_unix(ranks: list[Heartbeat]) -> float | None:
    """The last step of the rank that stepped least recently; None until every rank reported one."""
    last_steps = [b.last_step_unix for b in ranks if b.last_step_unix is not None]
    return min(last_steps) if len(last_steps) == len(ranks) else None
