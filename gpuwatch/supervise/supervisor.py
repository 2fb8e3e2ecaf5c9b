"""The training supervisor (effects): observes each trainer, runs policy.step, carries out its actions.

Called by the daemon once per tick with the same snapshot the fan controller used. Manual commands
from the control socket arrive on another thread and are queued for the next tick, so every decision
is still made by the pure state machine in policy.py.
"""

from __future__ import annotations

import logging
import os
import queue
import random
import secrets
import shutil
import socket
import time
from pathlib import Path
from typing import get_args

from gpuwatch.config.cooling import ThermalConfig
from gpuwatch.config.trainer import TrainerConfig
from gpuwatch.heartbeat import (
    HEARTBEAT_ENV,
    NODE_ENV,
    PAUSE_ENV,
    TRAINER_ENV_DEFAULTS,
    read_heartbeat,
    read_rank_heartbeats,
    remove_heartbeats,
    request_pause,
)
from gpuwatch.model import FanState, PowerState, Snapshot, TrainerState
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
    thermal_verdict,
)
from gpuwatch.supervise import energy
from gpuwatch.supervise.checkpoint import newest_complete_checkpoint
from gpuwatch.supervise.evidence import hang_evidence
from gpuwatch.supervise.gpu_use import GpuVerdict, gpu_verdict, judged_gpus, trainer_use
from gpuwatch.supervise.orphans import RUN_ENV, reap_adopted, sweep, unit_cgroup
from gpuwatch.supervise.machine import LIVE, Machine
from gpuwatch.supervise.policy import step
from gpuwatch.supervise.process import STRIPPED_ENV, SpawnError, TrainerProcess
from gpuwatch.supervise.ranks import RankView, aggregate

log = logging.getLogger("gpuwatch.supervisor")

COMMANDS: dict[str, Command] = {command: command for command in get_args(Command)}


class Trainer:
    """One configured trainer: its machine state, its current process and its files."""

    def __init__(self, config: TrainerConfig, thermal: ThermalConfig, state_dir: Path, runs_prefix: str,
                 cgroup: Path | None) -> None:
        """``runs_prefix`` marks this daemon's runs (``GPUWATCH_RUN_ID``), ``cgroup`` is the unit's."""
        self.config = config
        self.runs_prefix, self.runs, self.cgroup = runs_prefix, 0, cgroup
        self.thermal = config.thermal(thermal)
        self.dir = state_dir / config.name
        self.log_path = (config.log_dir or self.dir) / f"{config.name}.log"
        self.heartbeat_file = self.dir / "heartbeat.json"
        self.pause_file = self.dir / "pause"
        self.machine = Machine()
        self.proc: TrainerProcess | None = None
        self.spawn_error: str | None = None
        self.spawn_failed = False  # spawn_error is permanent (SpawnError.permanent)
        self.started_unix: float | None = None
        self.commands: queue.SimpleQueue[Command] = queue.SimpleQueue()
        self.paused_since_unix: float | None = None
        self.energy = energy.RunEnergy()
        self.used_gpus: set[str] = set()  # every GPU its trees were seen using
        self.seen_resets: dict[str, int] = {}
        self.stuck: list[TrainerProcess] = []  # abandoned after SIGKILL: still holding their GPU
        self.ranks: RankView | None = None  # the job's ranks on this node, as of the last observe

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

    def observe(self, verdict: Thermal, now: float, shutdown: bool, gpus: GpuVerdict = GpuVerdict()) -> Inputs:
        command = None if self.commands.empty() else self.commands.get_nowait()
        alive, code = False, None
        if self.proc is not None:
            code = self.proc.poll()
            alive = code is None
        beat = read_heartbeat(self.heartbeat_file)
        self.ranks = None
        if alive and self.proc is not None:
            self.ranks = aggregate(read_rank_heartbeats(self.heartbeat_file), set(self.proc.pids()))
        mtime = None
        if self.config.progress_file is not None:
            path = self.config.progress_file
            path = path if path.is_absolute() else (self.config.cwd or Path.cwd()) / path
            try:
                mtime = path.stat().st_mtime
            except OSError:
                pass
        return Inputs(
            now=now, thermal=verdict, alive=alive, exit_code=code, exit_reason=self.spawn_error,
            spawn_failed=self.spawn_failed,
            steps_total=self.ranks.steps_total if self.ranks else None if beat is None else beat.steps_total,
            heartbeat_paused=self.ranks.acknowledged if self.ranks else bool(beat and beat.paused), ranks=self.ranks,
            progress_mtime=mtime,
            log_bytes=0 if self.proc is None else self.proc.log_bytes,
            command=command, shutdown=shutdown, jitter=random.uniform(-1.0, 1.0),
            gpu_reset=gpus.reset, gpus_ready=gpus.ready, gpus_wait=gpus.wait,
        )

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

    def _spawn(self, resume: bool) -> None:
        self._retire()
        self.spawn_error, self.spawn_failed = None, False
        argv = self._argv(resume)
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

    def _argv(self, resume: bool) -> list[str]:
        cfg = self.config
        if not resume or not cfg.restart_command:
            return list(cfg.command)
        checkpoint = None
        if cfg.checkpoint_glob:
            checkpoint = newest_complete_checkpoint(cfg.checkpoint_glob, cfg.cwd)
        if checkpoint is None and any("{last_checkpoint}" in arg for arg in cfg.restart_command):
            log.warning("trainer %s: no complete checkpoint matches %r: starting with the original command",
                        cfg.name, cfg.checkpoint_glob)
            return list(cfg.command)
        log.info("trainer %s: resuming from %s", cfg.name, checkpoint)
        return [arg.replace("{last_checkpoint}", str(checkpoint)) for arg in cfg.restart_command]

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
                    "GPUWATCH_TRAINER": self.config.name, RUN_ENV: f"{self.runs_prefix}/{self.config.name}/{self.runs}"})
        return env

    def _chown_dir(self) -> None:
        """The trainer (not root) writes its heartbeat into this directory."""
        if os.geteuid() == 0 and self.config.user:
            shutil.chown(self.dir, user=self.config.user, group=self.config.group)

    def _retire(self) -> None:
        if self.proc is not None:
            self.proc.reap_leftovers()
            self.proc.close()
            self.proc = None

    def finish_exit(self) -> None:
        """The leader is gone: kill what it left behind and close its log (an abandoned one is not gone)."""
        if self.proc is not None and self.proc.popen.poll() is not None:
            self.proc.reap_leftovers()
            self.proc.close(timeout_s=1.0)  # the log holds the last words before the state says "exited"

    def published(self, now_mono: float, now_unix: float, snapshot: Snapshot | None = None) -> TrainerState:
        m = self.machine
        beat = read_heartbeat(self.heartbeat_file) if m.phase in LIVE else None
        live = m.phase in LIVE and self.proc is not None
        ranks = self.ranks if live else None
        steps = ranks.steps_total if ranks else beat.steps_total if beat else None
        rate = ranks.steps_per_s if ranks else beat.steps_per_s if beat else None
        last_step = ranks.last_step_unix if ranks else beat.last_step_unix if beat else None
        age = None if last_step is None else max(0.0, now_unix - last_step)
        paused_since = None if m.paused_since is None else now_unix - (now_mono - m.paused_since)
        return TrainerState(
            name=self.config.name, phase=m.phase, gpus=tuple(self.config.gpus),
            pid=self.proc.pid if live and self.proc else None,
            started_unix=self.started_unix if live else None,
            restarts_total=m.restarts_total, restarts_by_reason=m.restarts_by_reason,
            pauses_total=m.pauses_total, resumes_total=m.resumes_total,
            last_exit_code=m.last_exit_code, last_exit_reason=m.last_exit_reason,
            steps_total=steps, steps_per_s=rate, last_step_age_s=age, epoch=beat.epoch if beat else None,
            reason=m.reason, ranks=ranks.ranks if ranks else None, ranks_held=ranks.ranks_held if ranks else None,
            world_size=ranks.world_size if ranks else None, paused_by=ranks.paused_by if ranks else None,
            paused_since_unix=paused_since, log_path=str(self.log_path),
            next_start_unix=None if m.next_start is None else now_unix + max(0.0, m.next_start - now_mono),
            run_energy_j=self.energy.used_j, energy_total_j=self.energy.total_j,
            steps_per_kj=self.energy.steps_per_kj(steps),
            gpus_used=tuple(sorted(self.used_gpus)),
            gpu_use=trainer_use(snapshot.processes, self.config.name) if snapshot is not None else (),
            stuck_pids=tuple(pid for proc in self.stuck for pid in proc.pids()),
        )


class Supervisor:
    """The daemon's TrainerConsumer: tick(snapshot, fans, powers) and stop()."""

    def __init__(self, trainers: list[TrainerConfig], thermal: ThermalConfig, state_dir: Path,
                 governed_backstop_s: float = 60.0) -> None:
        # Every run's GPUWATCH_RUN_ID starts with this daemon's mark: its leftovers are found by it.
        self.runs_prefix = f"{os.getpid()}-{secrets.token_hex(4)}"
        self.cgroup = unit_cgroup()
        self.trainers = [Trainer(cfg, thermal, state_dir, self.runs_prefix, self.cgroup) for cfg in trainers]
        self.governed_backstop_s = governed_backstop_s
        self.last_snapshot: Snapshot | None = None
        self.last_fans: tuple[FanState, ...] = ()
        self.last_powers: tuple[PowerState, ...] = ()

    def tick(self, snapshot: Snapshot | None, fans: tuple[FanState, ...] = (), powers: tuple[PowerState, ...] = (),
             shutdown: bool = False, now: float | None = None) -> tuple[TrainerState, ...]:
        now = time.monotonic() if now is None else now
        if snapshot is not None:
            self.last_snapshot, self.last_fans, self.last_powers = snapshot, fans, powers
        for trainer in self.trainers:
            gpus = trainer.gpu_verdict(snapshot)
            verdict = Thermal()
            if self.last_snapshot is not None:
                verdict = thermal_verdict(self.last_snapshot, trainer.gpus(), trainer.thermal,
                                          self.last_fans, self.last_powers, self.governed_backstop_s)
            inputs = trainer.observe(verdict, now, shutdown, gpus)
            before = trainer.machine
            trainer.machine, actions = step(before, trainer.config, inputs)
            if before.phase in LIVE and trainer.machine.phase not in LIVE:
                trainer.finish_exit()
            trainer.apply(actions, self.last_snapshot)
            if trainer.spawn_error is not None and trainer.proc is None and trainer.machine.phase in LIVE:
                # It never started: say what became of it now, not "started" now and a crash next tick.
                trainer.machine, actions = step(trainer.machine, trainer.config, trainer.observe(verdict, now, shutdown))
                trainer.apply(actions, self.last_snapshot)
            if snapshot is not None and trainer.machine.phase in LIVE and trainer.proc and trainer.started_unix:
                trainer.energy = energy.update(trainer.energy, trainer.started_unix,
                                               energy.energies(snapshot, tuple(trainer.config.gpus)), inputs.steps_total)
            for event in trainer.machine.events:
                log.info("trainer %s: %s -> %s: %s", trainer.config.name, before.phase.value,
                         trainer.machine.phase.value, event)
        reap_adopted({t.proc.pid for t in self.trainers if t.proc is not None})
        return self.states(now)

    def set_thermal(self, thermal: ThermalConfig) -> None:
        """A reload's new [thermal]: each trainer's limits are it with the trainer's own overrides."""
        for trainer in self.trainers:
            trainer.thermal = trainer.config.thermal(thermal)

    def states(self, now: float | None = None) -> tuple[TrainerState, ...]:
        now = time.monotonic() if now is None else now
        return tuple(t.published(now, time.time(), self.last_snapshot) for t in self.trainers)

    def trees(self) -> dict[str, list[int]]:
        """Each trainer's process tree: the process monitor reads these every tick."""
        return {t.config.name: t.pids() for t in self.trainers}

    def command(self, verb: str, name: str | None) -> tuple[bool, str]:
        """Queue a manual command for the next tick (called from the control thread)."""
        command = COMMANDS.get(verb)
        if command is None:
            return False, f"unknown command {verb!r} (use {', '.join(COMMANDS)})"
        targets = [t for t in self.trainers if name is None or t.config.name == name]
        if not targets:
            known = ", ".join(t.config.name for t in self.trainers) or "none configured"
            return False, f"no trainer named {name!r} (trainers: {known})"
        for trainer in targets:
            trainer.commands.put(command)
        return True, f"{verb} requested for {', '.join(t.config.name for t in targets)}"

    def stop(self, poll_s: float = 0.1) -> None:
        """Daemon shutdown: TERM every trainer (after CONT), wait out their grace, then KILL; never orphan."""
        limit = max((t.config.grace_s for t in self.trainers), default=0.0) + 10.0
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            self.tick(None, shutdown=True)
            if all(t.machine.phase not in LIVE for t in self.trainers):
                break
            time.sleep(poll_s)
        for trainer in self.trainers:
            if trainer.proc is not None:
                if trainer.proc.poll() is None:
                    log.error("trainer %s: still running at the end of shutdown: SIGKILL", trainer.config.name)
                    trainer.proc.kill()
                    trainer.proc.popen.wait(5.0)
                trainer.proc.reap_leftovers()
                trainer.proc.close()
            trainer.pause_file.unlink(missing_ok=True)
        sweep(self.cgroup, self.runs_prefix)
