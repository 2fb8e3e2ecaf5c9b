"""`gpuwatch train`'s run: the training command as the wrapper's child, the signals passed on, its exit
status, and `--restart on-failure[:N]`.

The command runs in a session of its own (like a configured trainer, supervise/process.py), so a Ctrl-C
in the terminal reaches the wrapper alone, which passes it on once to the command's process group:
SIGINT, SIGTERM, SIGHUP and SIGQUIT are forwarded, never doubled, and a command ended by one is not restarted.
SIGTSTP (Ctrl-Z), SIGTTIN and SIGTTOU stop the command's group, then the wrapper; a SIGCONT to the
wrapper (fg, bg) continues both (cli/train/job_control.py), and the daemon lists the run ``suspended`` meanwhile.
The wrapper's exit status is the command's (128+N for a signal N, as a shell reports it); a run stopped
by the daemon (`gpuwatch stop`) exits 143 (128+SIGTERM) whatever the command returned.

Restarts: a non-zero exit starts the command again when ``--restart`` allows another (the delay is the
configured trainers' backoff, ``supervise.exits.backoff_delay_s``, doubled per failure in a row without
progress), resuming from the newest complete checkpoint (``supervise.checkpoint.spawn_argv``) when
``--checkpoint-glob`` and ``--resume-args`` say how. A ``hung`` event from the daemon stops the tree
(SIGTERM, ``--grace-s``, SIGKILL) and restarts it when ``--restart`` allows, else it says one line and
the run goes on. Those modules are imported only when a restart happens: the start stays cheap.
"""

from __future__ import annotations

import logging
import os
import queue
import random
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

from gpuwatch.attach import Event
from gpuwatch.cli.train.job_control import JOB_CONTROL, JobControl
from gpuwatch.cli.train.link import AttachLink
from gpuwatch.heartbeat import read_heartbeat, read_rank_heartbeats, remove_heartbeats
from gpuwatch.train.argv import RestartPolicy

if TYPE_CHECKING:
    from gpuwatch.config.trainer import TrainerConfig

FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)  # a terminal's, a kill's, a hangup's
EXIT_STOPPED = 128 + signal.SIGTERM  # `gpuwatch stop`: stopped gracefully, not restarted
EXIT_CANNOT_RUN = 127  # as a shell says for a command it cannot run
POLL_S = 0.25  # how often the wait looks at the signals received and the kill deadline

Build = Callable[[list[str]], tuple[list[str], dict[str, str]]]
Say = Callable[[str], None]


@dataclass(frozen=True)
class RunSettings:
    command: list[str]  # the user's command, as given after `--`
    restart: RestartPolicy = RestartPolicy()
    grace_s: float = 120.0
    backoff_s: float = 10.0
    checkpoint_glob: str | None = None
    resume_args: list[str] = field(default_factory=list)
    heartbeat_file: Path | None = None  # where the run's heartbeats are: cleared at each start, read for progress
    # The command's stdout and stderr (cli/train/output.py's copy); None: the wrapper's own.
    output_fds: tuple[int, int] | None = None


def exit_status(returncode: int) -> int:
    """Popen's returncode (negative: killed by that signal) as a shell reports it."""
    return 128 - returncode if returncode < 0 else returncode


class TrainRun:
    """Runs the command (again, with ``--restart``) until it is done; ``run`` returns the exit status."""

    def __init__(self, settings: RunSettings, build: Build, say: Say,
                 link_factory: Callable[[int, Callable[[Event], None]], AttachLink | None]) -> None:
        self.settings = settings
        self._build = build
        self._say = say
        self._link_factory = link_factory
        self._link: AttachLink | None = None
        self._child: subprocess.Popen[bytes] | None = None
        self._signalled: int | None = None  # the last signal received (no restart after it)
        self._pending: int | None = None  # received while no child could take it: passed on at the next start
        self._inbox: queue.Queue[tuple[str, object]] = queue.Queue()
        self._stopping: str | None = None  # "stop" | "hung": the wrapper ends this run itself
        self._trainer: TrainerConfig | None = None
        self._job_control = JobControl(self._signal_group, lambda: self._link)  # Ctrl-Z, fg, bg

    def run(self) -> int:
        # A signal ignored at the start stays ignored (a background job's SIGINT, nohup's SIGHUP), as in a shell.
        handlers = {**{sig: self._forward for sig in FORWARDED},
                    **{sig: self._job_control.suspend for sig in JOB_CONTROL}}
        previous = {sig: signal.signal(sig, handler) for sig, handler in handlers.items()
                    if signal.getsignal(sig) is not signal.SIG_IGN}
        try:
            return self._runs()
        finally:
            if self._link is not None:
                self._link.close()
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    # ---- one command after another ----
    def _runs(self) -> int:
        command, restarts, crashes = list(self.settings.command), 0, 0
        while True:
            if self._signalled is not None:  # stopped before the command started: it does not start
                return 128 + self._signalled
            child = self._spawn(command)
            if child is None:
                return EXIT_CANNOT_RUN
            if self._link is None:
                self._link = self._link_factory(child.pid, self._event)
            else:
                self._link.restarted(child.pid)
            returncode = self._wait(child)
            status = exit_status(returncode)
            stopping, self._stopping = self._stopping, None
            # A hung run stopped to be restarted restarts whatever it returned once stopped.
            again = ((status != 0 or stopping == "hung") and stopping != "stop" and self._signalled is None
                     and self.settings.restart.allows(restarts))
            if self._link is not None:  # a signal passed on: its user ended it (stopped, not failed)
                self._link.exited(returncode, again, self._signalled)
            if stopping == "stop":
                self._say(f"gpuwatch train: stopped by the gpuwatch daemon (the command exited with {status}); "
                          "not restarted")
                return EXIT_STOPPED
            if not again:
                return status
            crashes = 1 if self._progressed() else crashes + 1
            restarts += 1
            delay_s = self._backoff_s(crashes)
            limit = self.settings.restart.max_restarts
            self._say(f"gpuwatch train: the command exited with {status}: restart {restarts}"
                      f"{f' of {limit}' if limit is not None else ''} in {delay_s:.1f} s")
            ended = self._wait_out(delay_s)
            if ended is not None:
                return status if ended == "signal" else EXIT_STOPPED
            command = self._resume_command()

    def _spawn(self, command: list[str]) -> subprocess.Popen[bytes] | None:
        argv, env = self._build(command)
        if self.settings.heartbeat_file is not None:
            remove_heartbeats(self.settings.heartbeat_file)  # a new run starts without the last one's
        try:
            # Its own session: the terminal's Ctrl-C reaches the wrapper alone, which passes it on once.
            out, err = self.settings.output_fds or (None, None)
            self._child = subprocess.Popen(argv, env=env, start_new_session=True, stdout=out, stderr=err)
        except (OSError, ValueError, subprocess.SubprocessError) as exc:
            why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            self._say(f"gpuwatch train: cannot run {argv[0]!r}: {why}")
            return None
        pending, self._pending = self._pending, None
        if pending is not None:  # a Ctrl-C between the start and the child's pid known to the handler
            self._signal_group(pending)
        return self._child

    def _wait(self, child: subprocess.Popen[bytes]) -> int:
        threading.Thread(target=lambda: self._inbox.put(("exit", child.wait())), name="wait-child",
                         daemon=True).start()
        kill_at: float | None = None
        while True:
            try:
                kind, value = self._inbox.get(timeout=POLL_S)
            except queue.Empty:
                kind, value = "", None
            if kind == "exit":
                assert isinstance(value, int)
                return value
            if kind == "event" and isinstance(value, Event) and self._stopping is None:
                if self._wants_stop(value):
                    self._stopping = "stop" if value.event == "stop" else "hung"
                    self._signal_group(signal.SIGCONT)  # a stopped process acts on TERM only once continued
                    self._signal_group(signal.SIGTERM)
                    kill_at = time.monotonic() + self.settings.grace_s
            if kill_at is not None and time.monotonic() >= kill_at:
                self._say(f"gpuwatch train: still running {self.settings.grace_s:g} s after SIGTERM: SIGKILL")
                self._kill_tree(child.pid)
                kill_at = None

    def _wants_stop(self, event: Event) -> bool:
        why = f" ({event.reason})" if event.reason else ""
        if event.event == "stop":
            self._say(f"gpuwatch train: the gpuwatch daemon stops this run{why}: SIGTERM, SIGKILL after "
                      f"{self.settings.grace_s:g} s")
            return True
        if event.event != "hung":
            return False
        if self.settings.restart.on_failure:
            self._say(f"gpuwatch train: the gpuwatch daemon reports this run hung{why}: stopping it to restart it")
            return True
        self._say(f"gpuwatch train: the gpuwatch daemon reports this run hung{why}; it goes on "
                  "(--restart on-failure would restart it)")
        return False

    def _wait_out(self, delay_s: float) -> str | None:
        """The backoff between two runs; "signal" or "stop" when it ends the run instead."""
        deadline = time.monotonic() + delay_s
        while time.monotonic() < deadline:
            if self._signalled is not None:
                return "signal"
            try:
                kind, value = self._inbox.get(timeout=min(POLL_S, max(0.0, deadline - time.monotonic())))
            except queue.Empty:
                continue
            if kind == "event" and isinstance(value, Event) and value.event == "stop":
                self._say("gpuwatch train: stopped by the gpuwatch daemon before its restart")
                return "stop"
        return "signal" if self._signalled is not None else None

    # ---- what a restart needs (imported here only: a plain run never pays for it) ----
    def _trainer_config(self) -> TrainerConfig:
        if self._trainer is None:
            from gpuwatch.config.trainer import BackoffConfig, TrainerConfig

            settings = self.settings
            resume = [*settings.command, *settings.resume_args] if settings.resume_args else None
            self._trainer = TrainerConfig(name="run", command=settings.command, restart_command=resume,
                                          checkpoint_glob=settings.checkpoint_glob,
                                          backoff=BackoffConfig(initial_s=settings.backoff_s))
        return self._trainer

    def _backoff_s(self, crashes: int) -> float:
        from gpuwatch.supervise.exits import backoff_delay_s

        return backoff_delay_s(self._trainer_config(), crashes, random.uniform(-1.0, 1.0))

    def _resume_command(self) -> list[str]:
        from gpuwatch.supervise.checkpoint import spawn_argv

        # What it logs (the checkpoint it resumes from, or why none) is said the wrapper's way, for this call only.
        logger, handler = logging.getLogger("gpuwatch"), _SayHandler(self._say)
        level, propagate = logger.level, logger.propagate
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False
        try:
            return spawn_argv(self._trainer_config(), resume=True)
        finally:
            logger.removeHandler(handler)
            logger.setLevel(level)
            logger.propagate = propagate

    def _progressed(self) -> bool:
        """The run that ended made steps (its heartbeats say so): a crash after progress restarts the backoff."""
        path = self.settings.heartbeat_file
        if path is None:
            return False
        beats = [*read_rank_heartbeats(path), read_heartbeat(path)]
        return any(beat is not None and beat.steps_total > 0 for beat in beats)

    # ---- signals ----
    def _event(self, event: Event) -> None:
        """The link's thread: stop and hung are the run's to carry out."""
        self._inbox.put(("event", event))

    def _forward(self, signum: int, frame: FrameType | None) -> None:
        """A signal to the wrapper goes to the command's process group, once (no lock, no queue here)."""
        self._signalled = signum
        if not self._signal_group(signum):
            self._pending = signum

    def _signal_group(self, signum: int) -> bool:
        """Whether the command's group was there to take it."""
        child = self._child
        if child is None or child.returncode is not None:
            return False
        try:
            os.killpg(child.pid, signum)  # its own session: the group id is its pid
        except (ProcessLookupError, PermissionError):
            return False
        return True

    def _kill_tree(self, pid: int) -> None:
        """SIGKILL the group and every descendant (torchrun's ranks run in sessions of their own)."""
        import psutil

        try:
            tree = psutil.Process(pid).children(recursive=True)
        except psutil.Error:
            tree = []
        self._signal_group(signal.SIGKILL)
        for proc in tree:
            try:
                proc.kill()
            except psutil.Error:
                pass


class _SayHandler(logging.Handler):
    """A log record of the reused supervisor code as one of the wrapper's lines."""

    def __init__(self, say: Say) -> None:
        super().__init__(logging.INFO)
        self._say_line = say

    def emit(self, record: logging.LogRecord) -> None:
        self._say_line(f"gpuwatch train: {record.getMessage()}")
