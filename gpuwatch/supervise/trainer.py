"""One configured trainer (effects): its machine state, its current process and its files.

The supervisor (supervisor.py) owns one per ``[[trainer]]`` and drives it every tick: ``gpu_verdict``
and ``observe`` turn the world into policy.step's ``Inputs``, ``apply`` carries out the actions the
step returns (spawn, pause file, signals, evidence), ``published`` is its ``TrainerState``. It keeps
no settings besides its own ``TrainerConfig``: the live thermal verdict is passed in.
"""

from __future__ import annotations

import logging
import os
import queue
import random
import shutil
import socket
import time
from pathlib import Path

from gpuwatch.config.cooling import ThermalConfig
from gpuwatch.config.trainer import TrainerConfig
from gpuwatch.heartbeat import (
    HEARTBEAT_ENV,
    NODE_ENV,
    PAUSE_ENV,
    TRAINER_ENV_DEFAULTS,
    read_heartbeat,
    read_rank_heartbeats,
    refresh_pause,
    remove_heartbeats,
    request_pause,
)
from gpuwatch.model import Snapshot, TrainerPhase, TrainerState
from gpuwatch.supervise import energy
from gpuwatch.supervise.actions import (
    Abandon,
    Action,
    CancelPause,
    CollectEvidence,
    Command,
    Freeze,
    Inputs,
    Kill,
    RequestPause,
    Spawn,
    Terminate,
    Thaw,
    Thermal,
)
from gpuwatch.supervise.checkpoint import spawn_argv
from gpuwatch.supervise.evidence import hang_evidence
from gpuwatch.supervise.gpu_use import GpuVerdict, gpu_verdict, judged_gpus
from gpuwatch.supervise.leftovers import PAUSE_FILE, clear_record, record_run
from gpuwatch.supervise.machine import LIVE, Machine
from gpuwatch.supervise.orphans import RUN_ENV
from gpuwatch.supervise.process import STRIPPED_ENV, SpawnError, TrainerProcess
from gpuwatch.supervise.progress import RunningRate, running_rate
from gpuwatch.supervise.ranks import RankView, aggregate, reported
from gpuwatch.supervise.trainer_state import due_unix, run_state

log = logging.getLogger("gpuwatch.supervisor")
# observe()'s default: no reset, every GPU ready. One shared instance: GpuVerdict is frozen.
_GPUS_READY = GpuVerdict()


def log_path(config: TrainerConfig, state_dir: Path) -> Path:
    """Where a trainer's output goes: ``log_dir``, else its folder in the supervisor's ``state_dir`` (also what
    `gpuwatch logs` reads when no daemon says)."""
    return (config.log_dir or state_dir / config.name) / f"{config.name}.log"


class Trainer:
    """One configured trainer: its machine state, its current process and its files."""

    def __init__(self, config: TrainerConfig, state_dir: Path, runs_prefix: str, cgroup: Path | None) -> None:
        self._thermal: tuple[ThermalConfig, TrainerConfig, ThermalConfig] | None = None  # (base, config, limits)
        """``runs_prefix`` marks this daemon's runs (``GPUWATCH_RUN_ID``), ``cgroup`` is the unit's. Its thermal
        limits are not kept here: the supervisor derives them from the live [thermal] every tick."""
        self.config = config
        self.runs_prefix, self.runs, self.cgroup = runs_prefix, 0, cgroup
        self.dir = state_dir / config.name
        self.log_path = log_path(config, state_dir)
        self.heartbeat_file = self.dir / "heartbeat.json"
        self.pause_file = self.dir / PAUSE_FILE
        self.machine = Machine()
        self.proc: TrainerProcess | None = None
        self.spawn_error: str | None = None
        self.spawn_failed = False  # spawn_error is permanent (SpawnError.permanent)
        self.started_unix: float | None = None
        self.commands: queue.SimpleQueue[Command] = queue.SimpleQueue()
        self.energy = energy.RunEnergy()
        self.used_gpus: set[str] = set()  # every GPU its trees were seen using
        self.seen_resets: dict[str, int] = {}
        self.stuck: list[TrainerProcess] = []  # abandoned after SIGKILL: still holding their GPU
        self.ranks: RankView | None = None  # the job's ranks on this node, as of the last observe
        self.rate = RunningRate()  # steps/s over the current running span (paused time never counts)
        self.heartbeat_read_errors = 0  # heartbeat files refused or unreadable (_count_heartbeat_problems)
        self._heartbeat_failing = False
        self.log_write_errors = 0  # output lines of its ended runs their log could not take (process.OutputLog)

    def reconfigure(self, config: TrainerConfig) -> None:
        """A reload's settings (same name): read from now on; a running process keeps its own until it is
        restarted (reconcile.py decides when)."""
        self.config = config
        self.log_path = log_path(config, self.dir.parent)

    def thermal(self, base: ThermalConfig) -> ThermalConfig:
        """Its limits: ``base`` (the live [thermal]) with its own overrides, made again only when either changed
        (they were copied every tick, per trainer)."""
        made = self._thermal
        if made is None or made[0] is not base or made[1] is not self.config:
            made = self._thermal = (base, self.config, self.config.thermal(base))
        return made[2]

    def gpus(self) -> tuple[str, ...]:
        """What its limits and resets are judged on: configured, else seen in use, else all (empty)."""
        return judged_gpus(self.config.gpus, self.used_gpus)

    def pids(self) -> list[int]:
        """Its process tree(s): the current run's and any stuck one's, for the process monitor."""
        procs = ([self.proc] if self.proc is not None else []) + self.stuck
        return [pid for proc in procs for pid in proc.pids()]

    def gpu_verdict(self, snapshot: Snapshot | None) -> GpuVerdict:
        """What this tick's GPU use and resets mean for it; remembers what it saw."""
        for proc in [p for p in self.stuck if p.poll() is not None]:
            log.info("trainer %s: stuck pid %d finally exited", self.config.name, proc.pid)
            proc.reap_leftovers()
            proc.close(timeout_s=1.0)
            self.stuck.remove(proc)
        if snapshot is None:
            return GpuVerdict()
        self.used_gpus |= {p.gpu_id for p in snapshot.processes if p.trainer == self.config.name}
        verdict = gpu_verdict(snapshot, self.gpus(), self.seen_resets)
        self.seen_resets = {r.gpu_id: r.resets_total for r in snapshot.resets}
        return verdict

    def observe(self, verdict: Thermal, now: float, shutdown: bool, gpus: GpuVerdict = _GPUS_READY) -> Inputs:
        """This tick's inputs for policy.step: the verdicts, a queued command, the process and what it reports."""
        command = None if self.commands.empty() else self.commands.get_nowait()
        code = self.proc.poll() if self.proc is not None else None
        alive = self.proc is not None and code is None
        problems: list[str] = []
        self.ranks = self._read_ranks(problems) if alive else None
        progress = reported(self.ranks, read_heartbeat(self.heartbeat_file, problems))
        self._count_heartbeat_problems(problems)
        stepping = alive and self.machine.phase in (TrainerPhase.RUNNING, TrainerPhase.PAUSING)
        self.rate = running_rate(self.rate, stepping and not progress.acknowledged, now, progress.steps_total)
        return Inputs(
            now=now, thermal=verdict, alive=alive, exit_code=code, exit_reason=self.spawn_error,
            spawn_failed=self.spawn_failed, steps_total=progress.steps_total,
            heartbeat_paused=progress.acknowledged, ranks=self.ranks, progress_mtime=self._progress_mtime(),
            log_bytes=0 if self.proc is None else self.proc.log_bytes,
            command=command, shutdown=shutdown, jitter=random.uniform(-1.0, 1.0),
            gpu_reset=gpus.reset, gpus_ready=gpus.ready, gpus_wait=gpus.wait,
        )

    def _read_ranks(self, problems: list[str]) -> RankView | None:
        """The job's ranks on this node, from the beats of processes still in the current run's tree."""
        live_pids = set(self.proc.pids()) if self.proc is not None else set()
        return aggregate(read_rank_heartbeats(self.heartbeat_file, problems), live_pids)

    def _count_heartbeat_problems(self, problems: list[str]) -> None:
        """A heartbeat file refused or unreadable (a link, a FIFO, too large: heartbeat.read_heartbeat) is
        counted, and said once per episode in one line; it never costs the tick."""
        self.heartbeat_read_errors += len(problems)
        if problems and not self._heartbeat_failing:
            log.warning("trainer %s: heartbeat unreadable: %s (counted, said again only after a good read)",
                        self.config.name, problems[0])
        self._heartbeat_failing = bool(problems)

    def _progress_mtime(self) -> float | None:
        """The progress file's mtime (relative to the trainer's cwd); None when there is none (yet)."""
        path = self.config.progress_file
        if path is None:
            return None
        path = path if path.is_absolute() else (self.config.cwd or Path.cwd()) / path
        try:
            return path.stat().st_mtime
        except OSError:
            return None

    def apply(self, actions: list[Action], snapshot: Snapshot | None) -> None:
        for action in actions:
            try:
                self._apply(action, snapshot)
            except Exception:  # a dying child must never take the daemon down
                log.exception("trainer %s: %s failed", self.config.name, type(action).__name__)

    def _apply(self, action: Action, snapshot: Snapshot | None) -> None:
        name = self.config.name
        if isinstance(action, Spawn):
            self._spawn(action.resume)
        elif isinstance(action, RequestPause):
            request_pause(self.pause_file, action.reason)
        elif isinstance(action, CancelPause):
            self.pause_file.unlink(missing_ok=True)
        elif self.proc is None:
            return
        elif isinstance(action, Freeze):
            self.proc.freeze()
        elif isinstance(action, Thaw):
            self.proc.thaw()
        elif isinstance(action, Terminate):
            log.info("trainer %s: SIGCONT+SIGTERM to pid %d and its tree (%s)", name, self.proc.pid, action.reason)
            self.proc.terminate()
        elif isinstance(action, Kill):
            log.warning("trainer %s: SIGKILL to pid %d and its tree (%s)", name, self.proc.pid, action.reason)
            self.proc.kill()
        elif isinstance(action, CollectEvidence):
            log.warning("%s", hang_evidence(name, action.reason, self.proc, snapshot, self.gpus()))
        elif isinstance(action, Abandon):
            log.error("trainer %s: pid %d %s; it keeps its GPU until it exits, and the host may need a reboot",
                      name, self.proc.pid, action.reason)
            self.stuck.append(self.proc)
            self.proc = None
            clear_record(self.dir)  # it cannot be stopped: a later daemon need not try

    def _spawn(self, resume: bool) -> None:
        self._retire()
        self.spawn_error, self.spawn_failed = None, False
        argv = spawn_argv(self.config, resume)
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
            remove_heartbeats(self.heartbeat_file)
            self.pause_file.unlink(missing_ok=True)
            self._chown_dir()
            self.proc = TrainerProcess(argv, self.config.cwd, self._env(), self.log_path, self.config.log_max_bytes,
                                       self.config.log_backups, self.config.user, self.config.group, self.cgroup)
        except (SpawnError, OSError, LookupError) as exc:
            # Said once, by the transition the next policy step makes of it (Supervisor.tick).
            self.spawn_error = f"spawn failed: {exc}"
            self.spawn_failed = not isinstance(exc, OSError) and getattr(exc, "permanent", True)
            return
        self.started_unix = time.time()
        log.info("trainer %s: started pid %d: %s", self.config.name, self.proc.pid, " ".join(argv))
        record_run(self.dir, self.config.name, self.proc.pid, self.proc.run_id or "", self.started_unix)

    def refresh_pause(self, now_unix: float) -> None:
        """While the pause file stands, its mtime says its requester (this daemon) is alive (heartbeat.py)."""
        refresh_pause(self.pause_file, now_unix)

    def _env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in STRIPPED_ENV}
        env = TRAINER_ENV_DEFAULTS | {NODE_ENV: self.config.node or socket.gethostname()} | env
        if self.config.node:
            env[NODE_ENV] = self.config.node
        if self.config.user and os.geteuid() == 0:
            import pwd

            entry = pwd.getpwnam(self.config.user)
            env.update(HOME=entry.pw_dir, USER=entry.pw_name, LOGNAME=entry.pw_name)
        env.update(self.config.env)
        self.runs += 1
        env.update({HEARTBEAT_ENV: str(self.heartbeat_file), PAUSE_ENV: str(self.pause_file),
                    "GPUWATCH_TRAINER": self.config.name,
                    RUN_ENV: f"{self.runs_prefix}/{self.config.name}/{self.runs}"})
        return env

    def _chown_dir(self) -> None:
        """The trainer (not root) writes its heartbeat into this directory."""
        if os.geteuid() == 0 and self.config.user:
            shutil.chown(self.dir, user=self.config.user, group=self.config.group)

    def _retire(self) -> None:
        if self.proc is not None:
            self.close_run()

    def close_run(self) -> None:
        """Its run is over: what the leader left is killed, its log closed (its lost lines counted), its
        record removed (no later daemon will look for it)."""
        if self.proc is not None:
            self.proc.reap_leftovers()
            self.proc.close()
            self.log_write_errors += self.proc.log_write_errors
            self.proc = None
        clear_record(self.dir)

    def finish_exit(self) -> None:
        """The leader is gone: kill what it left behind and close its log (an abandoned one is not gone)."""
        if self.proc is not None and self.proc.popen.poll() is not None:
            self.proc.reap_leftovers()
            self.proc.close(timeout_s=1.0)  # the log holds the last words before the state says "exited"
            clear_record(self.dir)

    def published(self, now_mono: float, now_unix: float, snapshot: Snapshot | None = None) -> TrainerState:
        """Its state for the status document and /metrics; monotonic times become Unix seconds."""
        machine = self.machine
        live = machine.phase in LIVE and self.proc is not None
        beat = read_heartbeat(self.heartbeat_file) if machine.phase in LIVE else None
        return run_state(
            self.config.name, machine.phase, live=live, ranks=self.ranks if live else None, beat=beat, rate=self.rate,
            run_energy=self.energy, used_gpus=self.used_gpus, paused_since=machine.paused_since, snapshot=snapshot,
            now_mono=now_mono, now_unix=now_unix, gpus=tuple(self.config.gpus),
            pid=self.proc.pid if live and self.proc else None,
            started_unix=self.started_unix if live else None,
            restarts_total=machine.restarts_total, restarts_by_reason=machine.restarts_by_reason,
            pauses_total=machine.pauses_total, resumes_total=machine.resumes_total,
            last_exit_code=machine.last_exit_code, last_exit_reason=machine.last_exit_reason,
            reason=machine.reason, log_path=str(self.log_path),
            next_start_unix=due_unix(machine.next_start, now_mono, now_unix),
            stuck_pids=tuple(pid for proc in self.stuck for pid in proc.pids()), user=self.config.user,
            heartbeat_read_errors_total=self.heartbeat_read_errors,
        )
