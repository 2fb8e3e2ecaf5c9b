"""One rank's side of the job-wide pause: agree on the step, hold and release through the job's store.

**Joining** (``join.py``). At its first lockstep optimizer step every rank joins: the ranks agree
through the job's store, bounded in time, whether the job's pause is on (all of them built the side
group: a gloo group of its own, on keys under the incarnation id) or off (none takes part). Then,
every k lockstep steps (``cadence.py``), in the optimizer pre-step hook, one blocking
``all_reduce(MAX)`` of ``[want, requester rank + 1, next k]`` on that group, with the job's own
timeout: ``want`` is "my node's pause file exists". Every rank gets the same answer at the same step,
after backward's gradient all-reduce and before any later collective. A requesting rank puts its
reason in the store first.

**Hold and release** use the store only (``add``/``check``/``set``; ``get`` only on keys that
exist), so no collective is in flight while held and the process-group timeout does not apply.
Each rank drains its device, then adds 1 to ``e<n>/held`` (its acknowledgement) and, while its node
asks, 1 to ``e<n>/wanting``. Rank 0 alone writes ``e<n>/release``, once every rank holds and no
rank's node asks; the others poll it. The node that asked last is ``e<n>/asker``. A store error
(its host died) propagates: the job is dead, and the rank's exit lets torchrun act.
"""

from __future__ import annotations

import datetime
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.distributed as dist

from gpuwatch.heartbeat import pause_age_s, pause_reason, pause_requested
from gpuwatch.train.pause.cadence import Cadence, ewma, steps_between
from gpuwatch.train.pause.join import DEFAULT_BOUND_S, gloo_connect, gloo_devices, join
from gpuwatch.train.pause.lockstep import job_store, local_world_size, pg_timeout
from gpuwatch.train.pause.notice import HoldNotice, say


@dataclass(frozen=True)
class JobInfo:
    rank: int
    world_size: int
    local_world_size: int
    job: str  # incarnation id, hex
    pg_timeout_s: float
    backend: str


@dataclass(frozen=True)
class HoldView:
    """What a held rank reports: job-wide counts from the store, and who asks."""

    ranks_held: int
    wanting: int
    wants: bool
    paused_by: str


class NotTakingPart(RuntimeError):
    """The ranks agreed that the job's pause is off (the message says why)."""


Publish = Callable[[HoldView | None], None]  # a heartbeat: held (with the view) or running (None)


class JobPause:
    def __init__(self, pause_file: str | os.PathLike[str] | None, node: str, cadence: Cadence,
                 publish: Publish, paused_every_s: float = 0.5) -> None:
        self.pause_file = pause_file
        self.node = node
        self.cadence = cadence
        self.publish = publish
        self.paused_every_s = paused_every_s
        self.world_group = dist.group.WORLD
        rank, world = dist.get_rank(), dist.get_world_size()
        timeout, store = pg_timeout(), job_store()
        bound_s = min(timeout.total_seconds(), DEFAULT_BOUND_S)
        joined = join(store, rank, world, gloo_devices,
                      gloo_connect(rank, world, datetime.timedelta(seconds=bound_s)), bound_s)
        if joined.group is None:
            raise NotTakingPart(joined.why_off)
        self.group = joined.group
        self.options = dist.AllreduceOptions()
        self.options.reduceOp = dist.ReduceOp.MAX  # type: ignore[assignment]
        self.options.timeout = timeout  # the agreement waits for a slow rank as long as the job's collectives
        self.store = dist.PrefixStore(f"gpuwatch/{joined.job}/", store)  # type: ignore[attr-defined]
        self.info = JobInfo(rank, world, local_world_size(world), joined.job, timeout.total_seconds(),
                            str(dist.get_backend()))
        self.pause_seq = 0  # agreed holds so far: the same on every rank
        self.next_agreement = 0  # step count of the next agreement: the same on every rank
        self.every = 1  # the agreed number of steps between two agreements
        self.agree_s: float | None = None
        self._announced = False

    def current(self) -> bool:
        """Is the process group this rank joined still the script's?"""
        return dist.is_initialized() and dist.group.WORLD is self.world_group

    def before_step(self, steps: int, step_s: float | None) -> bool:
        """At a lockstep pre-step hook: agree when due, hold when agreed; True when it held."""
        if steps < self.next_agreement:
            return False
        want = pause_requested(self.pause_file)
        if want and not self._announced:
            self._set_reason(f"reason/{self.info.rank}")
        self._announced = want
        flag = torch.tensor([int(want), self.info.rank + 1 if want else 0,
                             steps_between(self.cadence, step_s, self.agree_s)], dtype=torch.int64)
        started = time.perf_counter()
        self.group.allreduce([flag], self.options).wait()
        self.agree_s = ewma(self.agree_s, time.perf_counter() - started)
        self.every = int(flag[2])
        self.next_agreement = steps + self.every
        if not flag[0]:
            return False
        self.hold(int(flag[1]) - 1, steps)
        return True

    def hold(self, requester: int, steps: int) -> None:
        """Every rank is here, at the same step; only the store is used until rank 0 releases."""
        self.pause_seq += 1
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            torch.cuda.synchronize()  # drained: "held" means the device is idle
        store, rank, key = self.store, self.info.rank, f"e{self.pause_seq}/"
        first_reason = store.get(f"reason/{requester}").decode()  # set before the agreement
        notice = HoldNotice(self.pause_file, steps, time.monotonic())
        if rank == 0:
            say(notice.held(_said(first_reason, self.node)))
        wants = pause_requested(self.pause_file)
        if wants:
            store.add(key + "wanting", 1)
            self._set_reason(key + "asker")
        store.add(key + "held", 1)
        last_view: HoldView | None = None
        last_publish = float("-inf")
        last_wanting = None
        while True:
            now_wants = pause_requested(self.pause_file)
            if now_wants != wants:
                store.add(key + "wanting", 1 if now_wants else -1)
                wants = now_wants
                if wants:
                    self._set_reason(key + "asker")
            held, wanting = store.add(key + "held", 0), store.add(key + "wanting", 0)
            if wants and last_wanting is not None and wanting < last_wanting:
                self._set_reason(key + "asker")  # the node that asked last withdrew: we still ask
            last_wanting = wanting
            asker = store.get(key + "asker").decode() if store.check([key + "asker"]) else first_reason
            view = HoldView(held, wanting, wants, _describe(asker))
            now = time.monotonic()
            if view != last_view or now - last_publish >= self.paused_every_s:
                self.publish(view)
                last_view, last_publish = view, now
                self._stale(notice, key, wants)
            if rank == 0:
                if held == self.info.world_size and wanting == 0:
                    store.set(key + "release", "1")
                    break
            elif store.check([key + "release"]):
                break
            time.sleep(self.cadence.hold_poll_s)
        self._announced = False  # a request still standing is announced again at the next agreement
        if rank == 0:
            say(notice.released(time.monotonic()))
        self.publish(None)

    def _stale(self, notice: HoldNotice, key: str, wants: bool) -> None:
        """A rank whose node asks with a pause file nobody refreshes tells the job (once); rank 0 says it."""
        if wants and not notice.stale_said:
            line = notice.stale(pause_age_s(self.pause_file, time.time()), self.node)
            if line is not None:
                self.store.set(key + "stale", line)
        if self.info.rank == 0 and not notice.stale_printed and self.store.check([key + "stale"]):
            say(self.store.get(key + "stale").decode())
            notice.stale_printed = True

    def _set_reason(self, key: str) -> None:
        self.store.set(key, json.dumps({"node": self.node, "reason": pause_reason(self.pause_file)}))


def _describe(raw: str) -> str:
    """``{"node": "node-b", "reason": "junction 101 °C"}`` -> ``node-b: junction 101 °C`` (the heartbeat's
    ``paused_by``, which the daemon reads)."""
    try:
        data = json.loads(raw)
        return f"{data['node']}: {data['reason']}"
    except (ValueError, KeyError, TypeError):
        return raw


def _said(raw: str, here: str) -> str:
    """The requester as the held line names it to a person: ``node node-b: junction 101 °C``; this node's own
    request (``here``) as a single process's reads, ``junction 101 °C``, never as if another node asked."""
    try:
        data = json.loads(raw)
        return str(data["reason"]) if data["node"] == here else f"node {data['node']}: {data['reason']}"
    except (ValueError, KeyError, TypeError):
        return raw
