"""The training supervisor (effects): each tick, every trainer is observed, stepped and its actions carried out.

Called by the daemon once per tick with the same snapshot the fan controller and the power governor
used, and with the live configuration: each trainer's thermal limits (``[thermal]`` with its own
overrides) and the governor's backstop (``power.pause_backstop_s``) are read from it where they are
used, never copied, so a reload reaches the supervisor with no hand-over. Manual commands from the
control socket arrive on another thread and are queued for the next tick, so every decision is still
made by the pure state machine in policy.py. One trainer's effects live in trainer.py.

Runs attached by `gpuwatch train` (attached_runs.py) are ticked after the trainers with the same thermal
verdict and published beside them; the control socket's threads register them (``attach``, ``receive``,
``detach``) and send commands for a peer (``command_as``, authorized by access.py).
"""

from __future__ import annotations

import logging
import os
import secrets
import time
from dataclasses import replace
from pathlib import Path
from typing import get_args

from gpuwatch.attach import Attach, Attached, Message
from gpuwatch.config.cooling import ThermalConfig
from gpuwatch.config.file import Config
from gpuwatch.config.sections import AttachedConfig
from gpuwatch.config.trainer import TrainerConfig
from gpuwatch.model import Acted, Snapshot, TrainerPhase, TrainerState
from gpuwatch.supervise import energy, orphans
from gpuwatch.supervise.access import Peer, Target, refusal
from gpuwatch.supervise.actions import Command, Heat, Thermal, combined_verdict
from gpuwatch.supervise.attached_runs import AttachedRuns, Link
from gpuwatch.supervise.leftovers import LeftoverStop, find
from gpuwatch.supervise.machine import LIVE, Supervised
from gpuwatch.supervise.orphans import reap_adopted, sweep, unit_cgroup
from gpuwatch.supervise.policy import step
from gpuwatch.supervise.reconcile import reconfigure
from gpuwatch.supervise.trainer import Trainer

log = logging.getLogger("gpuwatch.supervisor")

COMMANDS: dict[str, Command] = {command: command for command in get_args(Command)}


class Supervisor:
    """The daemon's TrainerConsumer: start(), tick(snapshot, fans, powers, config), command(), trees(), stop()."""

    def __init__(self, trainers: list[TrainerConfig], state_dir: Path) -> None:
        # Every run's GPUWATCH_RUN_ID starts with this daemon's mark: its leftovers are found by it.
        self.runs_prefix = f"{os.getpid()}-{secrets.token_hex(4)}"
        self.cgroup = unit_cgroup()
        self.state_dir = state_dir
        self.trainers = [Trainer(cfg, state_dir, self.runs_prefix, self.cgroup) for cfg in trainers]
        # The [[trainer]] list of the configuration last seen: a reload that changes it is reconciled.
        self.configured: list[TrainerConfig] | None = None
        self.removed: list[Trainer] = []  # gone from the config at a reload: stopped, then dropped
        # Runs an earlier daemon left (leftovers.py), by trainer name: stopped before that trainer starts.
        self.leftovers: dict[str, LeftoverStop] = {}
        self.looked_for_leftovers = False
        # The last readings seen: a tick without a snapshot judges, reports and gathers hang evidence on them.
        self.last_snapshot: Snapshot | None = None
        self.last_acted = Acted()  # the rungs below, as the last snapshot's tick left them
        self.heat: Heat | None = None  # the last snapshot's GPU shares of a verdict, for every run's verdict
        # The verdicts made on ``heat`` and ``last_acted``, by GPUs, limits and backstop: emptied when they are
        # replaced (a tick with a snapshot), which is all a verdict reads besides its key. Attached runs on the
        # same GPUs under [thermal] (every GPU, when none is declared or seen) share one.
        self._verdicts: dict[tuple[tuple[str, ...], ThermalConfig, float], Thermal] = {}
        # Runs `gpuwatch train` attached from users' shells (attached_runs.py), ticked with the trainers.
        self.attached = AttachedRuns()
        self.attached_config = AttachedConfig()  # the live [attached] of the last tick (attach() reads it)
        self.interval_s: float | None = None  # the live tick, told to an attaching wrapper

    def start(self) -> None:
        """Once, before the first tick, on the daemon's main thread: a trainer's double-forked setsid worker
        comes back to us, not to init, so its leftovers can be reaped and swept (orphans.py); runs an
        earlier daemon left are found (and stopped over the next ticks, before their trainers start)."""
        orphans.become_subreaper()
        self._find_leftovers()

    def _find_leftovers(self) -> None:
        grace = {t.config.name: t.config.grace_s for t in self.trainers}
        default_s = max(grace.values(), default=0.0)
        self.looked_for_leftovers = True
        for leftover in find(self.state_dir, own_daemon_pid=os.getpid()):
            name = leftover.record.trainer
            self.leftovers[name] = LeftoverStop(leftover, grace.get(name, default_s))  # said at its first step

    def tick(self, snapshot: Snapshot | None, below: Acted, config: Config) -> tuple[TrainerState, ...]:
        """Step every trainer against this tick's readings and the live ``config`` (its [[trainer]]s too)."""
        now = time.monotonic()
        if snapshot is not None:
            self.last_snapshot, self.last_acted, self.heat = snapshot, below, Heat(snapshot)
            self._verdicts = {}
        if not self.looked_for_leftovers:
            self._find_leftovers()
        if self.configured is None:
            self.configured = list(config.trainer)  # the first tick's list is the one the trainers came from
        elif config.trainer != self.configured:
            self.configured = list(config.trainer)
            self._reconcile(self.configured)
        waiting = self._stop_leftovers(now)
        for trainer in self.trainers:
            if trainer.config.name in waiting:
                trainer.machine = replace(trainer.machine, reason=waiting[trainer.config.name])
                continue
            self._step(trainer, snapshot, self._thermal_verdict(trainer, config), now, shutdown=False)
            trainer.refresh_pause(time.time())
        for trainer in list(self.removed):
            self._step(trainer, None, Thermal(), now, shutdown=True)
            if trainer.machine.phase not in LIVE:
                self._close(trainer)
                self.removed.remove(trainer)
        reap_adopted({t.proc.pid for t in self.trainers + self.removed if t.proc is not None})
        self.attached_config, self.interval_s = config.attached, config.interval_s
        self.attached.tick(snapshot, lambda gpus: self._verdict_on(gpus, config), config.attached, now)
        return self.states(now)

    def _stop_leftovers(self, now: float) -> dict[str, str]:
        """One step of stopping each leftover run; the reason each trainer still waits for (by name)."""
        waiting = {}
        for name, stop in list(self.leftovers.items()):
            if stop.step(now):
                del self.leftovers[name]
            else:
                waiting[name] = stop.reason
        return waiting

    def _reconcile(self, wanted: list[TrainerConfig]) -> None:
        """A reload's [[trainer]]s against the running ones: new ones start, removed ones are stopped (and
        dropped once gone), changed ones restart alone (reconcile.py says which changes need that)."""
        by_name = {t.config.name: t for t in self.trainers}
        kept = []
        for cfg in wanted:
            trainer = by_name.pop(cfg.name, None)
            back = next((t for t in self.removed if t.config.name == cfg.name), None)
            if back is not None:  # removed by an earlier reload, still stopping: it restarts once stopped
                self.removed.remove(back)
                back.reconfigure(cfg)
                back.commands.put("restart")
                trainer = back
            elif trainer is None:
                log.info("trainer %s: added by a reload", cfg.name)
                trainer = Trainer(cfg, self.state_dir, self.runs_prefix, self.cgroup)
            elif trainer.config != cfg:
                reconfigure(trainer, cfg)
            kept.append(trainer)
        for trainer in by_name.values():
            log.info("trainer %s: removed by a reload: stopping it (SIGTERM, SIGKILL after %gs)",
                     trainer.config.name, trainer.config.grace_s)
            self.removed.append(trainer)
        self.trainers = kept  # one assignment: the control thread sees the old list or the new one

    def _thermal_verdict(self, trainer: Trainer, config: Config) -> Thermal:
        """Hot, cool or critical for ``trainer``'s GPUs under the limits in force now (cool before any snapshot)."""
        return self._verdict(trainer.gpus(), trainer.thermal(config.thermal), config)

    def _verdict_on(self, gpus: tuple[str, ...], config: Config) -> Thermal:
        """An attached run's verdict: the [thermal] limits on ``gpus`` (all when empty), as a trainer's."""
        return self._verdict(gpus, config.thermal, config)

    def _verdict(self, gpus: tuple[str, ...], thermal: ThermalConfig, config: Config) -> Thermal:
        """actions.thermal_verdict on the last snapshot, of its GPU shares computed once (``Heat``), each verdict
        once per snapshot (``_verdicts``)."""
        if self.heat is None:
            return Thermal()
        key = (gpus, thermal, config.power.pause_backstop_s)
        verdict = self._verdicts.get(key)
        if verdict is None:
            below = self.last_acted
            verdict = self._verdicts[key] = combined_verdict(self.heat.of(gpus, thermal), below.fans, below.powers,
                                                             config.power.pause_backstop_s, below.clocks)
        return verdict

    def _shutdown_tick(self, now: float) -> None:
        """One tick of the daemon's shutdown: every trainer is being stopped, so no thermal verdict matters
        (policy.step's shutdown path never reads it) and the neutral one stands in."""
        for trainer in self.trainers + self.removed:
            self._step(trainer, None, Thermal(), now, shutdown=True)
        reap_adopted({t.proc.pid for t in self.trainers + self.removed if t.proc is not None})

    def _step(self, trainer: Trainer, snapshot: Snapshot | None, verdict: Thermal, now: float, shutdown: bool) -> None:
        """Observe ``trainer``, step its machine, carry out the actions, account its energy, log its events."""
        gpus = trainer.gpu_verdict(snapshot)
        inputs = trainer.observe(verdict, now, shutdown, gpus)
        observed = trainer.proc  # the run whose heartbeat ``inputs`` read (a spawn below starts another)
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
            # Steps read before this tick's spawn are the previous run's (or a previous daemon's) heartbeat:
            # never the new run's starting count (steps per kJ would go negative once it resumes lower).
            steps = inputs.steps_total if trainer.proc is observed else None
            trainer.energy = energy.update(trainer.energy, trainer.started_unix,
                                           energy.energies(snapshot, tuple(trainer.config.gpus)), steps)
        for event in trainer.machine.events:
            log.info("trainer %s: %s -> %s: %s", trainer.config.name, before.phase.value,
                     trainer.machine.phase.value, event)

    def states(self, now: float | None = None) -> tuple[TrainerState, ...]:
        now = time.monotonic() if now is None else now
        now_unix = time.time()
        configured = tuple(t.published(now, now_unix, self.last_snapshot) for t in self.trainers + self.removed)
        return configured + tuple(self.attached.states(now, now_unix, self.last_snapshot))

    def trees(self) -> dict[str, list[int]]:
        """Each trainer's and attached run's process tree: the process monitor reads these every tick."""
        return {t.config.name: t.pids() for t in self.trainers + self.removed} | self.attached.trees()

    # ---- attached runs: the control socket's side (its threads) ----------------------------------
    def attach(self, request: Attach, peer: Peer, user: str, link: Link) -> Attached:
        """A validated ``Attach`` (daemon/control.py checked the peer and the pid): registered, named uniquely
        among the configured trainers and the attached runs."""
        taken = {t.config.name for t in self.trainers + self.removed}
        here = None if self.last_snapshot is None else frozenset(g.gpu_id for g in self.last_snapshot.gpus)
        return self.attached.attach(request, peer, user, link, self.attached_config, taken, time.monotonic(),
                                    self.interval_s, here)

    def receive(self, run_id: str, message: Message) -> None:
        self.attached.receive(run_id, message)

    def detach(self, run_id: str, link: Link) -> None:
        self.attached.detach(run_id, link)

    def command_as(self, verb: str, name: str | None, peer: Peer, privileged: bool) -> tuple[bool, str]:
        """A command from ``peer``, authorized by access.refusal: NAME is a trainer's or an attached run's
        name, or any pid of an attached run's tree; an unprivileged peer without NAME means its own runs."""
        command = COMMANDS.get(verb)
        if command is None:
            return False, f"unknown command {verb!r} (use {', '.join(COMMANDS)})"
        if name is None:  # every trainer and run (privileged), else the caller's own runs
            trainers = list(self.trainers) if privileged else []
            runs = [] if command == "restart" else self.attached.of_user(None if privileged else peer.uid)
        else:
            trainers = [t for t in self.trainers if t.config.name == name]
            runs = self.attached.find(name)
        targets = [Target(t.config.name, attached=False, uid=None) for t in trainers] + [r.target() for r in runs]
        if not targets:
            if name is None:
                return False, "no trainer and no attached run of yours (name one: NAME or PID)"
            ended = self.attached.ended(name)
            if ended:  # listed in status until keep_ended_s: say that it ended, not that it does not exist
                again = " (start it again with gpuwatch train)" if command == "restart" else ""
                phase = ended[0].state.phase.value
                return False, f"run {ended[0].name} has already ended ({phase}): nothing to {verb}{again}"
            known = ", ".join([t.config.name for t in self.trainers] + sorted(self.attached.names(live=True))) or "none"
            if name.isascii() and name.isdigit():  # a pid: say so, not "no trainer named '1780'"
                return False, f"no attached run with a process {name} (trainers and runs: {known})"
            return False, f"no trainer or run named {name!r} (trainers and runs: {known})"
        if runs and command == "restart":  # the true reason first: nobody, root included, may restart it here
            return False, (f"run {runs[0].name} was attached: its wrapper restarts it (gpuwatch train --restart), "
                           "the daemon cannot")
        why = refusal(verb, peer, privileged, targets)
        if why is not None:
            return False, why
        for trainer in trainers:
            trainer.commands.put(command)
        for run in runs:
            self.attached.command(run, command)
        unchanged = [f"{n} {why}" for n, why in [(t.config.name, unchanged_by(command, t.machine)) for t in trainers]
                     + [(r.name, unchanged_by(command, r.state)) for r in runs] if why]
        return True, "; ".join([f"{verb} requested for {', '.join(t.name for t in targets)}", *unchanged])

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
        everyone = self.trainers + self.removed
        limit = max((t.config.grace_s for t in everyone), default=0.0) + 10.0
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            self._shutdown_tick(time.monotonic())
            if all(t.machine.phase not in LIVE for t in everyone):
                break
            time.sleep(poll_s)
        for trainer in everyone:
            if trainer.proc is not None and trainer.proc.poll() is None:
                log.error("trainer %s: still running at the end of shutdown: SIGKILL", trainer.config.name)
                trainer.proc.kill()
                trainer.proc.popen.wait(5.0)
            self._close(trainer)
        for stop in self.leftovers.values():
            stop.kill()  # found at start, not gone yet: nothing this daemon saw is left running
        sweep(self.cgroup, self.runs_prefix)

    @staticmethod
    def _close(trainer: Trainer) -> None:
        """A trainer whose run is over for good (shutdown, or removed by a reload): its files are closed."""
        trainer.close_run()
        trainer.pause_file.unlink(missing_ok=True)


def unchanged_by(command: Command, run: Supervised) -> str | None:
    """Why ``command`` changes nothing for a run in this state (said beside "requested"), None when it acts."""
    if command == "pause" and run.manual_pause:
        return "is already paused by hand: nothing changes"
    if command == "resume" and not run.manual_pause and run.phase not in (TrainerPhase.PAUSING, TrainerPhase.PAUSED):
        return f"is not paused ({run.phase.value}): nothing changes"
    return None
