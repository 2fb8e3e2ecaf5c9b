"""Global optimizer-step hooks: count steps, publish a throttled heartbeat, hold at the step boundary on pause.

The hooks are installed with ``register_optimizer_step_*_hook``, so they see every optimizer of an
unmodified script. What they do depends on the process, read at its first optimizer step
(``lockstep.current_role``):

* a single process: the post-hook counts steps and rewrites the heartbeat file at most every
  ``interval_s`` (always on the first step); the pre-hook does one ``stat`` of the pause file and,
  while it exists, blocks there, reporting ``paused: true`` every ``paused_every_s``;
* a rank of a torch.distributed job: only lockstep optimizers count, the pause is the job's
  (``job.py``: every rank holds at the same step), and the heartbeat goes to the rank's own file
  beside the heartbeat file (``heartbeat.rank_heartbeat_path``) with the job's view;
* a DataLoader worker: nothing.
"""

from __future__ import annotations

import logging
import os
import socket
import time
import weakref
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

from gpuwatch.heartbeat import (
    HEARTBEAT_ENV,
    NODE_ENV,
    PAUSE_ENV,
    Heartbeat,
    pause_age_s,
    pause_reason,
    pause_requested,
    rank_heartbeat_path,
    write_heartbeat,
)
from gpuwatch.train.pause import lockstep
from gpuwatch.train.pause.cadence import Cadence, ewma
from gpuwatch.train.pause.job import HoldView, JobPause, NotTakingPart
from gpuwatch.train.pause.notice import HoldNotice, say

INTERVAL_ENV = "GPUWATCH_HEARTBEAT_INTERVAL_S"
# The daemon reads heartbeats once a tick (1 s by default). A write is an atomic rename, which costs
# 0.15-0.5 ms on a loaded VM disk (the 2-core dev box): every 0.25 s that was up to 0.4 % of a 100 ms
# step, in every rank. Pause and release are written at once, whatever the interval.
DEFAULT_INTERVAL_S = 1.0
# How often, at most, a step does more than count: sample the step time, let the next step stat the
# pause file (a single process; a rank's pause goes through the job's agreement), check whether the
# heartbeat is due. A stat per step cost a few µs, more on a loaded VM's disk; 50 ms adds nothing a
# supervisor ticking once a second could notice.
TICK_S = 0.05
_log = logging.getLogger("gpuwatch.train")


class StepHeartbeat:
    """Step counter, heartbeat writer and pause gate for one training process."""

    def __init__(
        self,
        heartbeat_file: str | os.PathLike[str] | None,
        pause_file: str | os.PathLike[str] | None,
        interval_s: float = DEFAULT_INTERVAL_S,
        *,
        paused_every_s: float = 0.5,
        poll_s: float = 0.05,
        cadence: Cadence | None = None,
        node: str | None = None,
    ) -> None:
        self.heartbeat_file = heartbeat_file
        self.pause_file = pause_file
        self.interval_s = interval_s
        self.paused_every_s = paused_every_s
        self.poll_s = poll_s
        self.cadence = cadence or Cadence.from_env()
        self.node = node or os.environ.get(NODE_ENV) or socket.gethostname()
        self.steps = 0
        self.last_step_unix: float | None = None
        self.steps_per_s: float | None = None
        self.role: lockstep.Role | None = None
        self.job: JobPause | None = None
        self._step_s: float | None = None  # EWMA of the time between steps (the cadence's input)
        self._last_step: float | None = None  # monotonic time of the last step
        self._sample: tuple[float, int] | None = None  # (monotonic time, steps) of the last step-time sample
        self._due = 0.0  # monotonic time of the next tick
        self._look = True  # the next step looks for the pause file (a single process)
        self._window: tuple[float, int] | None = None  # (monotonic time, steps) of the last write
        self._write_failed = False
        self._lockstep: weakref.WeakKeyDictionary[torch.optim.Optimizer, bool] = weakref.WeakKeyDictionary()
        self._handles: list[Any] = []
        self._undo_tracking = lambda: None

    def install(self) -> StepHeartbeat:
        self._handles = [
            register_optimizer_step_pre_hook(self.before_step),
            register_optimizer_step_post_hook(self.after_step),
        ]
        self._undo_tracking = lockstep.track_ddp()
        return self

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []
        self._undo_tracking()

    def before_step(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        # The ordinary step does only what must happen every step (issue 38: the hooks cost 0.4-0.6 %
        # of a 4-5 ms step): a single process reads one flag, a rank compares two integers.
        role = self.role
        if role == "single":
            if self._look:
                self._look = False
                if pause_requested(self.pause_file):
                    self.hold()
            return
        if role is None:
            self.role = lockstep.current_role()
            return self.before_step(optimizer, args, kwargs)
        if not self._counts(optimizer):
            return
        job = self.job
        if job is not None and self.steps < job.next_agreement:
            return
        if job is not None and not job.current():
            self.job = None  # the script destroyed (or re-created) its process group: join it anew
        if self.job is None and (not dist.is_initialized() or not self._join()):
            return
        assert self.job is not None
        if self.job.before_step(self.steps, self._step_s):
            self._after_hold()

    def after_step(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        # A single process counts every optimizer's step: scripts may rebuild optimizers between
        # phases, and matching steps of several optimizers (GANs) into "iterations" cannot be done
        # reliably. A rank counts its lockstep optimizers' steps, so every rank counts alike.
        if self.role != "single" and not self._counts(optimizer):
            return
        self.steps += 1
        now = self._last_step = time.monotonic()
        if now >= self._due:
            self._tick(now)

    def _tick(self, now: float) -> None:
        """After a step, at most every ``TICK_S`` (every step when ``interval_s`` is shorter): sample the
        step time (the cadence's input), let the next step look for the pause file, write the heartbeat
        when ``interval_s`` has passed."""
        if self._sample is not None and self.steps > self._sample[1]:
            self._step_s = ewma(self._step_s, (now - self._sample[0]) / (self.steps - self._sample[1]))
        self._sample = (now, self.steps)
        self._look = True
        self._due = now + min(TICK_S, self.interval_s)
        if self._window is None or now - self._window[0] >= self.interval_s:
            self._publish(now, paused=False)

    def flush(self) -> None:
        """Write the steps the throttle held back: called when the process ends, so the last heartbeat
        counts every step (50 steps report 50, not the count of the last throttled write)."""
        written = self._window[1] if self._window is not None else 0
        if self.steps > written:
            self._publish(time.monotonic(), paused=False)

    def hold(self) -> None:
        """A single process: block while the pause file exists, the device drained first ("paused" = idle)."""
        if torch.cuda.is_initialized():
            torch.cuda.synchronize()
        notice = HoldNotice(self.pause_file, self.steps, time.monotonic())
        say(notice.held(pause_reason(self.pause_file)))
        last_report = float("-inf")
        while pause_requested(self.pause_file):
            now = time.monotonic()
            if now - last_report >= self.paused_every_s:
                self._publish(now, paused=True)
                say(notice.stale(pause_age_s(self.pause_file, time.time())))
                last_report = now
            time.sleep(self.poll_s)
        say(notice.released(time.monotonic()))
        self._after_hold()

    def _join(self) -> bool:
        try:
            self.job = JobPause(self.pause_file, self.node, self.cadence, self._publish_held, self.paused_every_s)
        except Exception as exc:  # the ranks agreed (join.py): none takes part, every one trains on
            why = str(exc) if isinstance(exc, NotTakingPart) else repr(exc)
            _log.warning("rank %d: the job's pause is off (%s): the supervisor pauses it with SIGSTOP",
                         dist.get_rank(), why)
            self.role = "inert"
            return False
        return True

    def _after_hold(self) -> None:
        self._window = self._sample = None  # the pause counts against neither rate nor step time
        self._publish(time.monotonic(), paused=False)

    def _counts(self, optimizer: torch.optim.Optimizer) -> bool:
        if self.role == "inert" or self.role is None:
            return False
        if self.role == "single":
            return True
        known = self._lockstep.get(optimizer)
        if known is None:
            known = self._lockstep[optimizer] = lockstep.is_lockstep(optimizer)
        return known

    def _publish_held(self, view: HoldView | None) -> None:
        if view is not None:
            self._publish(time.monotonic(), paused=True, view=view)

    def _publish(self, now: float, paused: bool, view: HoldView | None = None) -> None:
        if not paused and self._window is not None:
            elapsed = now - self._window[0]
            if elapsed > 0 and self.steps > self._window[1]:
                self.steps_per_s = (self.steps - self._window[1]) / elapsed
        if not paused:
            self._window = (now, self.steps)
        path = self._beat_path()
        if path is None:
            return
        if self._last_step is not None:  # the clock is read once a step; the wall clock only here
            self.last_step_unix = time.time() - (time.monotonic() - self._last_step)
        beat = Heartbeat(
            pid=os.getpid(), steps_total=self.steps, last_step_unix=self.last_step_unix,
            steps_per_s=self.steps_per_s, updated_unix=time.time(), paused=paused, **self._job_fields(view),
        )
        try:
            write_heartbeat(path, beat)
        except OSError as exc:  # a missing heartbeat must never stop the training
            if not self._write_failed:
                _log.warning("cannot write heartbeat %s: %s", path, exc)
            self._write_failed = True

    def _beat_path(self) -> Path | None:
        if self.heartbeat_file is None:
            return None
        if self.job is None:
            return Path(self.heartbeat_file)
        return rank_heartbeat_path(self.heartbeat_file, self.job.info.rank)

    def _job_fields(self, view: HoldView | None) -> dict[str, Any]:
        if self.job is None:
            return {}
        info = self.job.info
        fields: dict[str, Any] = dict(
            rank=info.rank, world_size=info.world_size, local_world_size=info.local_world_size, node=self.node,
            job=info.job, pause_seq=self.job.pause_seq, pg_timeout_s=info.pg_timeout_s, backend=info.backend,
            restart_count=lockstep.restart_count(),
        )
        if view is not None:
            fields.update(wants=view.wants, job_ranks_held=view.ranks_held, job_wanting=view.wanting,
                          paused_by=view.paused_by)
        return fields


def install_step_hooks(
    heartbeat_file: str | os.PathLike[str] | None = None,
    pause_file: str | os.PathLike[str] | None = None,
    interval_s: float | None = None,
    environ: dict[str, str] | None = None,
) -> StepHeartbeat | None:
    """Install the hooks for the given paths, falling back to the supervisor's environment variables.

    Returns None when there is neither a heartbeat nor a pause file.
    """
    env = os.environ if environ is None else environ
    heartbeat_file = heartbeat_file or env.get(HEARTBEAT_ENV) or None
    pause_file = pause_file or env.get(PAUSE_ENV) or None
    if heartbeat_file is None and pause_file is None:
        return None
    if interval_s is None:
        interval_s = float(env.get(INTERVAL_ENV, DEFAULT_INTERVAL_S))
    return StepHeartbeat(heartbeat_file, pause_file, interval_s, cadence=Cadence.from_env(env),
                         node=env.get(NODE_ENV)).install()
