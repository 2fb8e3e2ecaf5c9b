"""The attached runs (effects): the registry of runs `gpuwatch train` attached, their sessions, their ticks.

The control server (daemon/control.py) validates an ``Attach`` (the peer's credentials, the run's pid:
supervise/peers.py) and hands it here with the session's ``Link``; its later lines (``Beat``, ``Exited``,
``Restarted``) arrive on that connection's thread through ``receive``, its end through ``detach``. The
supervisor ticks every run with the trainers (``tick``): the pure step (attached.py) decides, and the
events it returns are sent on the run's session. What is published is a ``TrainerState`` with
``origin="attached"``. Bounded: ``[attached] max_runs`` live runs in all, ``max_runs_per_user`` per user.
An ended run stays listed ``keep_ended_s``, then it is dropped.

The daemon never opens a user's files: progress comes in the Beats. The run's process tree (for the
process monitor: GPUs, VRAM) is read from its pid (orphans.descendant_pids), as a configured trainer's is.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import psutil

from gpuwatch.attach import Attach, Attached, Beat, Event, Exited, Message, Restarted
from gpuwatch.config.sections import AttachedConfig
from gpuwatch.heartbeat import Heartbeat, heartbeat_from_json
from gpuwatch.model import Snapshot, TrainerPhase, TrainerState
from gpuwatch.procs.index import TREE_EVERY_S
from gpuwatch.supervise import energy
from gpuwatch.supervise.access import Peer, Target
from gpuwatch.supervise.actions import Command, Thermal
from gpuwatch.supervise.attached import (
    ENDED,
    RunInputs,
    RunState,
    declared_gpus,
    reattached,
    sanitize,
    start,
    step,
    unique_name,
)
from gpuwatch.supervise.gpu_use import judged_gpus
from gpuwatch.supervise.orphans import descendant_pids, started_at
from gpuwatch.supervise.progress import RunningRate, running_rate
from gpuwatch.supervise.ranks import RankView, aggregate, reported
from gpuwatch.supervise.run_name import default_name
from gpuwatch.supervise.trainer_state import run_state

log = logging.getLogger("gpuwatch.supervisor")
COMMAND_MAX_CHARS = 1000  # the published command (an argv may fill a whole 64 KiB line)
Verdict = Callable[[tuple[str, ...]], Thermal]  # the thermal verdict for a run's GPUs (empty: all)


class Link(Protocol):
    """A run's session, as the control server keeps it: ``send`` never blocks (False: the session is broken)."""

    def send(self, event: Event) -> bool: ...


@dataclass
class AttachedRun:
    run_id: str
    name: str
    uid: int
    user: str
    pid: int
    argv: list[str]
    gpus: tuple[str, ...]
    job_id: str | None
    link: Link | None
    state: RunState
    created: int | None = None  # its start time (orphans.started_at): a reused pid is another process
    wrapper_pid: int | None = None  # the peer that attached it (its `gpuwatch train`): a pid that names the run
    started_unix: float = field(default_factory=time.time)
    beats: list[Heartbeat] = field(default_factory=list)
    exit_code: int | None = None
    exit_signal: int | None = None  # the signal its wrapper passed on (its user's Ctrl-C): stopped, not failed
    restarts: int = 0
    commands: list[Command] = field(default_factory=list)
    energy: energy.RunEnergy = field(default_factory=energy.RunEnergy)
    used_gpus: set[str] = field(default_factory=set)
    tree: list[int] = field(default_factory=list)
    tree_walked: float | None = None  # when ``tree``'s descendants were last walked (the tick's clock)
    rate: RunningRate = field(default_factory=RunningRate)
    ranks: RankView | None = None
    suspended: int | None = None  # its user stopped it (Ctrl-Z): the signal its wrapper's last Beat named
    log_path: str | None = None  # its wrapper's copy of its output (attach.Attach.log_path): published, never opened

    def target(self) -> Target:
        return Target(self.name, attached=True, uid=self.uid, user=self.user)

    def single_beat(self) -> Heartbeat | None:
        """The newest beat of a process that is no rank of a job (what a run that is not one reports)."""
        return max((b for b in self.beats if b.rank is None), key=lambda b: b.updated_unix, default=None)


class AttachedRuns:
    """Every attached run, by run id; thread-safe (control threads attach and report, the loop ticks)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.runs: dict[str, AttachedRun] = {}

    def attach(self, request: Attach, peer: Peer, user: str, link: Link, config: AttachedConfig,
               taken: set[str], now: float, interval_s: float | None = None,
               gpus_here: frozenset[str] | None = None) -> Attached:
        """Register (or re-register) a validated run; the reply for its wrapper. ``gpus_here``: this machine's
        GPUs (None: not read yet): a declared GPU not among them is dropped, and the reply says so."""
        with self._lock:
            known = self.runs.get(request.run_id or "")
            if known is not None and (known.uid != peer.uid or known.state.phase in ENDED):
                known = None
            live = [r for r in self.runs.values() if r.state.phase not in ENDED and r is not known]
            if len(live) >= config.max_runs:
                return Attached(ok=False, message=f"too many attached runs ({config.max_runs})")
            if sum(1 for r in live if r.uid == peer.uid) >= config.max_runs_per_user:
                return Attached(ok=False, message=f"too many attached runs of {user} ({config.max_runs_per_user})")
            if known is not None:
                known.link, known.pid, known.created = link, request.pid, started_at(request.pid)
                known.wrapper_pid = peer.pid
                known.log_path = request.log_path or known.log_path
                known.state = reattached(known.state, now, request.paused, request.reason)
                self._log(known, f"re-attached (pid {request.pid})")
                return Attached(ok=True, run_id=known.run_id, name=known.name, interval_s=interval_s)
            names = taken | {r.name for r in self.runs.values()}
            name = unique_name(sanitize(request.name) if request.name else default_name(request.argv), names)
            # A run id kept across a daemon's restart is kept; one in use (another user's run) is never taken.
            wanted = request.run_id or ""
            usable = 0 < len(wanted) <= 64 and wanted.isascii() and wanted.isalnum() and wanted not in self.runs
            run_id = wanted if usable else secrets.token_hex(8)
            gpus, note = declared_gpus(request.gpus or [], gpus_here)
            run = AttachedRun(run_id=run_id, name=name, uid=peer.uid, user=user,
                              pid=request.pid, argv=list(request.argv), gpus=gpus,
                              job_id=request.job_id, link=link, created=started_at(request.pid), wrapper_pid=peer.pid,
                              log_path=request.log_path,
                              state=start(now, request.paused, request.reason))
            self.runs[run.run_id] = run
        log.info("attached run %s: pid %d of %s (uid %d): %s", name, run.pid, user, peer.uid, " ".join(run.argv))
        if note:
            log.warning("attached run %s: %s", name, note)
        return Attached(ok=True, message=note, run_id=run.run_id, name=name, interval_s=interval_s)

    def receive(self, run_id: str, message: Message) -> None:
        """A line of the run's session (its connection's thread)."""
        with self._lock:
            run = self.runs.get(run_id)
            if run is None:
                return
            if isinstance(message, Beat):
                beats = []
                for raw in message.heartbeats:
                    try:
                        beats.append(heartbeat_from_json(raw))
                    except ValueError:
                        continue  # one garbled rank's beat: the others still count
                run.beats, run.suspended = beats, message.suspended
            elif isinstance(message, Exited):
                if message.restarting:
                    run.restarts += 1
                    run.beats = []
                else:
                    run.exit_code, run.exit_signal = message.code, message.signalled
            elif isinstance(message, Restarted):
                run.pid, run.created, run.started_unix, run.exit_code = message.pid, started_at(message.pid), \
                    time.time(), None

    def detach(self, run_id: str, link: Link) -> None:
        """The session ended (end of stream, silence, a protocol error); a newer session is left alone."""
        with self._lock:
            run = self.runs.get(run_id)
            if run is not None and run.link is link:
                run.link = None

    def command(self, run: AttachedRun, command: Command) -> None:
        with self._lock:
            run.commands.append(command)

    def find(self, name_or_pid: str) -> list[AttachedRun]:
        """The live runs a NAME or a PID means: any pid of a run's tree, its wrapper's included (the parent the
        user started, what `pgrep -f train.py` finds first; the peer that attached it, SO_PEERCRED)."""
        with self._lock:
            live = [r for r in self.runs.values() if r.state.phase not in ENDED]
        by_name = [r for r in live if r.name == name_or_pid]
        if by_name or not (name_or_pid.isascii() and name_or_pid.isdigit()):  # "²" is a digit, no pid
            return by_name
        pid = int(name_or_pid)
        # The wrapper's pid only while its session is open (a wrapper gone may have its pid reused).
        found = [r for r in live if pid == r.pid or pid in r.tree or (r.link is not None and pid == r.wrapper_pid)]
        if not found:  # a process started since the trees' last walk
            for run in live:
                self._tree(run, None)
            found = [r for r in live if pid in r.tree]
        return found

    def of_user(self, uid: int | None) -> list[AttachedRun]:
        """The live runs of ``uid`` (None: every user's)."""
        with self._lock:
            return [r for r in self.runs.values() if uid in (None, r.uid) and r.state.phase not in ENDED]

    def names(self, live: bool = False) -> set[str]:
        """Every listed run's name (ended ones too: status lists them until ``keep_ended_s``); ``live``: not ended."""
        with self._lock:
            return {r.name for r in self.runs.values() if not live or r.state.phase not in ENDED}

    def ended(self, name_or_pid: str) -> list[AttachedRun]:
        """The ended runs still listed that a NAME or their PID means (``find`` skips them: nothing to act on)."""
        with self._lock:
            return [r for r in self.runs.values() if r.state.phase in ENDED and name_or_pid in (r.name, str(r.pid))]

    def tick(self, snapshot: Snapshot | None, verdict: Verdict, config: AttachedConfig, now: float) -> None:
        """Step every run against this tick; send what it decides; drop the runs ended long enough ago."""
        with self._lock:
            runs = list(self.runs.values())
        for run in runs:
            if run.state.phase not in ENDED:
                self._tree(run, now)
        with self._lock:
            for run in runs:
                self._step(run, snapshot, verdict, config, now)
            for run_id, run in list(self.runs.items()):
                if run.state.ended is not None and now - run.state.ended >= config.keep_ended_s:
                    del self.runs[run_id]

    def _tree(self, run: AttachedRun, now: float | None) -> None:
        """Its process tree and whether its pid still lives (outside the lock: it reads /proc).

        The leader is checked every tick (one read of its stat, orphans.started_at); its descendants are walked
        again only every TREE_EVERY_S, the cadence at which the process monitor re-lists the trees' fds, or at once when
        ``now`` is None. A walk reads the tree's own lists of children (orphans.descendant_pids); psutil's
        ``children()``, which reads every process's stat, only on a kernel without them: a scan of the whole of
        /proc per run per tick made two attached runs cost 10x the 8-GPU daemon's own tick
        (benchmarks/daemon_cost.py --attached 2)."""
        started = started_at(run.pid)
        if started is None or (run.created is not None and started != run.created):
            run.tree = []  # gone, or its pid is another process's now
            return
        if (now is not None and run.tree[:1] == [run.pid] and run.tree_walked is not None
                and 0 <= now - run.tree_walked < TREE_EVERY_S):
            return
        try:
            # By pid, not a psutil handle: a handle reads the stat ``started_at`` just read (a third of a walk).
            run.tree = [run.pid, *descendant_pids(run.pid)]
            run.tree_walked = now
        except (psutil.Error, OSError):
            run.tree = []

    def _step(self, run: AttachedRun, snapshot: Snapshot | None, verdict: Verdict, config: AttachedConfig,
              now: float) -> None:
        if snapshot is not None:
            run.used_gpus |= {p.gpu_id for p in snapshot.processes if p.trainer == run.name}
        run.ranks = aggregate(run.beats, None)
        progress = reported(run.ranks, run.single_beat())
        # A detached run keeps its commands until its wrapper is back to carry them out.
        command = run.commands.pop(0) if run.commands and run.link is not None else None
        inputs = RunInputs(now=now, thermal=verdict(self.gpus(run)), steps_total=progress.steps_total,
                           acknowledged=progress.acknowledged, heartbeat_seen=bool(run.beats),
                           connected=run.link is not None, alive=bool(run.tree), exit_code=run.exit_code,
                           exit_signal=run.exit_signal, command=command,
                           held_by=run.ranks.held_by if run.ranks else None, suspended=run.suspended)
        before = run.state.phase
        run.state, events = step(run.state, config, inputs)
        stepping = run.state.phase is TrainerPhase.RUNNING and not progress.acknowledged
        run.rate = running_rate(run.rate, stepping, now, progress.steps_total)
        for event in events:
            if run.link is not None and not run.link.send(event):
                log.warning("attached run %s: its session is broken: %s not delivered", run.name, event.event)
                run.link = None
        if snapshot is not None and run.state.phase not in ENDED:
            run.energy = energy.update(run.energy, run.started_unix, energy.energies(snapshot, self.gpus(run)),
                                       progress.steps_total)
        for text in run.state.events:
            self._log(run, f"{before.value} -> {run.state.phase.value}: {text}")

    @staticmethod
    def gpus(run: AttachedRun) -> tuple[str, ...]:
        """What its limits apply to: declared (`--gpu`), else seen in use, else every GPU (empty)."""
        return judged_gpus(run.gpus, run.used_gpus)

    @staticmethod
    def _log(run: AttachedRun, text: str) -> None:
        log.info("attached run %s: %s", run.name, text)

    def trees(self) -> dict[str, list[int]]:
        with self._lock:
            return {r.name: list(r.tree) for r in self.runs.values() if r.state.phase not in ENDED}

    def states(self, now_mono: float, now_unix: float, snapshot: Snapshot | None) -> list[TrainerState]:
        with self._lock:
            return [self._published(r, now_mono, now_unix, snapshot) for r in self.runs.values()]

    @staticmethod
    def _published(run: AttachedRun, now_mono: float, now_unix: float, snapshot: Snapshot | None) -> TrainerState:
        state = run.state
        live = state.phase not in ENDED
        return run_state(
            run.name, state.phase, live=live, ranks=run.ranks, beat=run.single_beat(), rate=run.rate,
            run_energy=run.energy, used_gpus=run.used_gpus, paused_since=state.paused_since, snapshot=snapshot,
            now_mono=now_mono, now_unix=now_unix, gpus=run.gpus, pid=run.pid if live else None,
            started_unix=run.started_unix if live else None, restarts_total=run.restarts,
            restarts_by_reason=(("wrapper", run.restarts),) if run.restarts else (),
            pauses_total=state.pauses_total, resumes_total=state.resumes_total, last_exit_code=state.last_exit_code,
            reason=state.reason, origin="attached", user=run.user, command=_command(run.argv), job_id=run.job_id,
            log_path=run.log_path,
        )


def _command(argv: list[str]) -> str:
    text = " ".join(argv)
    return text if len(text) <= COMMAND_MAX_CHARS else text[: COMMAND_MAX_CHARS - 3] + "..."
