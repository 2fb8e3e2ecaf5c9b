"""The training supervisor (effects): each tick, every trainer is observed, stepped and its actions carried out.

Called by the daemon once per tick with the same snapshot the fan controller and the power governor
used, and with the live configuration: each trainer's thermal limits (``[thermal]`` with its own
overrides) and the governor's backstop (``power.pause_backstop_s``) are read from it where they are
used, never copied, so a reload reaches the supervisor with no hand-over. Manual commands from the
control socket arrive on another thread and are queued for the next tick, so every decision is still
made by the pure state machine in policy.py. One trainer's effects live in trainer.py.
"""

from __future__ import annotations

import logging
import os
import secrets
import time
from pathlib import Path
from typing import get_args

from gpuwatch.config.file import Config
from gpuwatch.config.trainer import TrainerConfig
from gpuwatch.model import FanState, PowerState, Snapshot, TrainerState
from gpuwatch.supervise import energy, orphans
from gpuwatch.supervise.actions import Command, Thermal, thermal_verdict
from gpuwatch.supervise.machine import LIVE
from gpuwatch.supervise.orphans import reap_adopted, sweep, unit_cgroup
from gpuwatch.supervise.policy import step
from gpuwatch.supervise.trainer import Trainer

log = logging.getLogger("gpuwatch.supervisor")

COMMANDS: dict[str, Command] = {command: command for command in get_args(Command)}


class Supervisor:
    """The daemon's TrainerConsumer: start(), tick(snapshot, fans, powers, config), command(), trees(), stop()."""

    def __init__(self, trainers: list[TrainerConfig], state_dir: Path) -> None:
        # Every run's GPUWATCH_RUN_ID starts with this daemon's mark: its leftovers are found by it.
        self.runs_prefix = f"{os.getpid()}-{secrets.token_hex(4)}"
        self.cgroup = unit_cgroup()
        self.trainers = [Trainer(cfg, state_dir, self.runs_prefix, self.cgroup) for cfg in trainers]
        # The last readings seen: a tick without a snapshot judges, reports and gathers hang evidence on them.
        self.last_snapshot: Snapshot | None = None
        self.last_fans: tuple[FanState, ...] = ()
        self.last_powers: tuple[PowerState, ...] = ()

    def start(self) -> None:
        """Once, before the first tick, on the daemon's main thread: a trainer's double-forked setsid worker
        comes back to us, not to init, so its leftovers can be reaped and swept (orphans.py)."""
        orphans.become_subreaper()

    def tick(self, snapshot: Snapshot | None, fans: tuple[FanState, ...], powers: tuple[PowerState, ...],
             config: Config) -> tuple[TrainerState, ...]:
        """Step every trainer against this tick's readings and the live ``config``."""
        now = time.monotonic()
        if snapshot is not None:
            self.last_snapshot, self.last_fans, self.last_powers = snapshot, fans, powers
        for trainer in self.trainers:
            self._step(trainer, snapshot, self._thermal_verdict(trainer, config), now, shutdown=False)
        reap_adopted({t.proc.pid for t in self.trainers if t.proc is not None})
        return self.states(now)

    def _thermal_verdict(self, trainer: Trainer, config: Config) -> Thermal:
        """Hot, cool or critical for ``trainer``'s GPUs under the limits in force now (cool before any snapshot)."""
        if self.last_snapshot is None:
            return Thermal()
        return thermal_verdict(self.last_snapshot, trainer.gpus(), trainer.config.thermal(config.thermal),
                               self.last_fans, self.last_powers, config.power.pause_backstop_s)

    def _shutdown_tick(self, now: float) -> None:
        """One tick of the daemon's shutdown: every trainer is being stopped, so no thermal verdict matters
        (policy.step's shutdown path never reads it) and the neutral one stands in."""
        for trainer in self.trainers:
            self._step(trainer, None, Thermal(), now, shutdown=True)
        reap_adopted({t.proc.pid for t in self.trainers if t.proc is not None})

    def _step(self, trainer: Trainer, snapshot: Snapshot | None, verdict: Thermal, now: float, shutdown: bool) -> None:
        """Observe ``trainer``, step its machine, carry out the actions, account its energy, log its events."""
        gpus = trainer.gpu_verdict(snapshot)
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
            self._shutdown_tick(time.monotonic())
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
