"""Global optimizer-step hooks: publish a throttled heartbeat, and hold at the step boundary on pause.

The post-hook counts steps and rewrites the heartbeat file (``gpuwatch.heartbeat``) at most every
``interval_s`` (always on the first step); the pre-hook does one ``stat`` of the pause file per step
and, while it exists, blocks there, reporting ``paused: true`` every ``paused_every_s``. Both are
installed with ``register_optimizer_step_*_hook`` so they see every optimizer of an unmodified script.
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

from gpuwatch.heartbeat import HEARTBEAT_ENV, PAUSE_ENV, Heartbeat, pause_requested, write_heartbeat

INTERVAL_ENV = "GPUWATCH_HEARTBEAT_INTERVAL_S"
DEFAULT_INTERVAL_S = 0.25
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
    ) -> None:
        self.heartbeat_file = heartbeat_file
        self.pause_file = pause_file
        self.interval_s = interval_s
        self.paused_every_s = paused_every_s
        self.poll_s = poll_s
        self.steps = 0
        self.last_step_unix: float | None = None
        self.steps_per_s: float | None = None
        self._window: tuple[float, int] | None = None  # (monotonic time, steps) of the last write
        self._write_failed = False
        self._handles: list[Any] = []

    def install(self) -> StepHeartbeat:
        self._handles = [
            register_optimizer_step_pre_hook(self.before_step),
            register_optimizer_step_post_hook(self.after_step),
        ]
        return self

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []

    def before_step(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        if pause_requested(self.pause_file):
            self.hold()

    def after_step(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        # Every optimizer's step counts: scripts may rebuild optimizers between phases, and
        # matching steps of several optimizers (GANs) into "iterations" cannot be done reliably.
        self.steps += 1
        self.last_step_unix = time.time()
        now = time.monotonic()
        if self._window is None or now - self._window[0] >= self.interval_s:
            self._publish(now, paused=False)

    def flush(self) -> None:
        """Write the steps the throttle held back: called when the process ends, so the last heartbeat
        counts every step (50 steps report 50, not the count of the last throttled write)."""
        written = self._window[1] if self._window is not None else 0
        if self.steps > written:
            self._publish(time.monotonic(), paused=False)

    def hold(self) -> None:
        """Block while the pause file exists; the device is drained first so "paused" means idle."""
        if torch.cuda.is_initialized():
            torch.cuda.synchronize()
        last_report = float("-inf")
        while pause_requested(self.pause_file):
            now = time.monotonic()
            if now - last_report >= self.paused_every_s:
                self._publish(now, paused=True)
                last_report = now
            time.sleep(self.poll_s)
        self._window = None  # the pause must not count against the step rate
        self._publish(time.monotonic(), paused=False)

    def _publish(self, now: float, paused: bool) -> None:
        if not paused and self._window is not None:
            elapsed = now - self._window[0]
            if elapsed > 0 and self.steps > self._window[1]:
                self.steps_per_s = (self.steps - self._window[1]) / elapsed
        if not paused:
            self._window = (now, self.steps)
        if self.heartbeat_file is None:
            return
        beat = Heartbeat(
            pid=os.getpid(),
            steps_total=self.steps,
            last_step_unix=self.last_step_unix,
            steps_per_s=self.steps_per_s,
            updated_unix=time.time(),
            paused=paused,
        )
        try:
            write_heartbeat(self.heartbeat_file, beat)
        except OSError as exc:  # a missing heartbeat must never stop the training
            if not self._write_failed:
                _log.warning("cannot write heartbeat %s: %s", self.heartbeat_file, exc)
            self._write_failed = True


def install_step_hooks(
    heartbeat_file: str | os.PathLike[str] | None = None,
    pause_file: str | os.PathLike[str] | None = None,
    interval_s: float | None = None,
    environ: dict[str, str] | None = None,
) -> StepHeartbeat | None:
    """Install the hooks for the given paths, falling back to the supervisor's environment variables.

    Returns None when there is neither a heartbeat nor a pause file. Under torch.distributed only
    rank 0 writes the heartbeat (one file, one writer); every rank honours the pause.
    """
    env = os.environ if environ is None else environ
    heartbeat_file = heartbeat_file or env.get(HEARTBEAT_ENV) or None
    pause_file = pause_file or env.get(PAUSE_ENV) or None
    if env.get("RANK", "0") != "0":
        heartbeat_file = None
    if heartbeat_file is None and pause_file is None:
        return None
    if interval_s is None:
        interval_s = float(env.get(INTERVAL_ENV, DEFAULT_INTERVAL_S))
    return StepHeartbeat(heartbeat_file, pause_file, interval_s).install()
