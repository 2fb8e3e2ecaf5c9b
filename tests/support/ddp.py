"""Distributed training jobs under the real supervisor, for the DDP tests (CPU, gloo, real torchrun).

``Supervised`` runs a ``Supervisor`` (no GPUs: nothing is ever hot, pauses are manual commands) that
ticks on its own thread every ``tick_s``; the test reads the published state and the ranks' heartbeats
and sends commands. Every trainer is stopped on exit, also when the test failed half way.
``tests/support/ddp_train.py`` is the trainer: it knows nothing of gpuwatch.
"""

from __future__ import annotations

import os
import pwd
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

from gpuwatch.config.file import Config
from gpuwatch.config.trainer import TrainerConfig
from gpuwatch.heartbeat import Heartbeat, read_rank_heartbeats
from gpuwatch.model import Acted, TrainerPhase, TrainerState
from gpuwatch.supervise.supervisor import Supervisor, Trainer
from tests.support.paths import REPO
from tests.support.processes import free_port
from tests.support.waiting import wait_for

T = TypeVar("T")
SCRIPT = str(REPO / "tests" / "support" / "ddp_train.py")
TORCHRUN = str(Path(sys.executable).parent / "torchrun")
# Agreements every ~50 ms of steps (never more than 0.1 s apart, whatever they cost on a busy box)
# and a held rank polling the store every 10 ms: many short pauses.
FAST_ENV = {"OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", "GPUWATCH_AGREE_INTERVAL_S": "0.05",
            "GPUWATCH_PAUSE_LATENCY_S": "0.1",
            "GPUWATCH_HOLD_POLL_S": "0.01", "GPUWATCH_HEARTBEAT_INTERVAL_S": "0.05"}
# One bounded wait for anything a job does on 2 busy cores (starting torch in 3-5 processes takes 5-20 s).
JOB_WAIT_S = 120.0
# The configuration each tick reads: the defaults (no GPUs here, so no limit is ever reached).
LIVE_CONFIG = Config()


def gpuwatch_train(*command: str, fallback: str = "auto") -> list[str]:
    return [sys.executable, "-m", "gpuwatch.cli", "train", "--conv2d-fallback", fallback, "--", *command]


def torchrun(nproc: int, *options: str, port: int | None = None) -> list[str]:
    """``torchrun`` with a c10d rendezvous on a free loopback port."""
    endpoint = f"127.0.0.1:{port or free_port()}"
    return [TORCHRUN, "--nproc-per-node", str(nproc), "--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint,
            "--monitor-interval", "0.2", *options]


def trainer(tmp: Path, command: list[str], **overrides: Any) -> dict[str, Any]:
    """A trainer section: quick to pause (manual), no hang timeout, short backoff; runs as this user."""
    base: dict[str, Any] = {
        "name": "ddp", "command": command, "cwd": str(tmp), "user": pwd.getpwuid(os.geteuid()).pw_name,
        "env": dict(FAST_ENV), "min_pause_s": 0, "pause_ack_timeout_s": 60, "hang_timeout_s": None,
        "grace_s": 10, "backoff": {"initial_s": 0.1, "max_s": 0.5, "jitter_ratio": 0.1},
    }
    return base | overrides


class Supervised:
    """One trainer under a Supervisor ticking every ``tick_s`` on its own thread."""

    def __init__(self, tmp: Path, config: dict[str, Any], tick_s: float = 0.02) -> None:
        self.supervisor = Supervisor([TrainerConfig(**config)], tmp / "run")
        self.trainer: Trainer = self.supervisor.trainers[0]
        self.tick_s = tick_s
        self._state: TrainerState | None = None
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="ticks", daemon=True)

    def __enter__(self) -> Supervised:
        self._state = self.supervisor.tick(None, Acted(), LIVE_CONFIG)[0]
        self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self._stop.set()
        self._thread.join(10)
        self.supervisor.stop()

    def _run(self) -> None:
        while not self._stop.is_set():
            states = self.supervisor.tick(None, Acted(), LIVE_CONFIG)
            with self._lock:
                self._state = states[0]
            self._stop.wait(self.tick_s)

    @property
    def state(self) -> TrainerState:
        with self._lock:
            assert self._state is not None
            return self._state

    def command(self, verb: str) -> None:
        ok, message = self.supervisor.command(verb, None)
        assert ok, message

    def pause(self, what: str) -> TrainerState:
        """Ask for a pause; the first state that reports it paused. The published state lags the
        supervisor's actions by up to a tick (a rank may release before the resume's state is out), so
        a PAUSED state counts only once ``pauses_total`` moved past the one before the command."""
        before = self.state.pauses_total
        self.command("pause")
        return self.wait(lambda: (s := self.state).phase is TrainerPhase.PAUSED and s.pauses_total > before and s,
                         what)

    def resume(self, what: str, pause_seq: int | None = None) -> None:
        """Resume; wait until the supervisor reports it running and every rank released (that pause)."""
        self.command("resume")
        self.wait(lambda: self.state.phase is TrainerPhase.RUNNING
                  and all(not b.paused and pause_seq in (None, b.pause_seq) for b in self.beats()), what)

    def beats(self) -> list[Heartbeat]:
        """The ranks' heartbeats of live processes only (as the supervisor counts them)."""
        proc = self.trainer.proc
        pids = set(proc.pids()) if proc is not None else set()
        return sorted((b for b in read_rank_heartbeats(self.trainer.heartbeat_file) if b.pid in pids),
                      key=lambda b: b.rank or 0)

    def wait(self, check: Callable[[], T], what: str, timeout_s: float = JOB_WAIT_S) -> T:
        return wait_for(check, what, timeout_s, interval_s=0.01, detail=self.detail)

    def detail(self) -> str:
        proc = self.trainer.proc
        tail = "\n".join(list(proc.tail)[-30:]) if proc is not None else ""
        return f"state: {self._state}\nbeats: {self.beats()}\nlast output:\n{tail}"


def held_alike(beats: list[Heartbeat], ranks: int, pause_seq: int) -> bool:
    """Every rank holds the same agreed pause at the same step: no split."""
    return (len(beats) == ranks and all(b.paused and b.pause_seq == pause_seq for b in beats)
            and len({b.steps_total for b in beats}) == 1)
