"""Runs an earlier daemon left behind (effects): each run's record, found again, said, and stopped.

A daemon that dies (SIGKILL, OOM, a crash) outside systemd stops nobody: its trainers run on, or stay
stopped (SIGSTOP) or held (the pause file) forever. The next daemon would start a second copy of each
beside them, its spawn would delete the shared pause file (the old held copy resumes training next to
the new one, on the same checkpoints), and at its own stop it would leave the old tree behind.

So every run is recorded in its trainer's state directory (``run.json``: the leader's pid, its start
time as /proc/<pid>/stat counts it, the run's ``GPUWATCH_RUN_ID``, the daemon's pid), and removed when
the run is over. A starting daemon reads every record it did not write: a leader whose pid is alive
*with the recorded start time* (a reused pid has another) is a leftover, and so is any process that
still carries the run's mark (a worker whose leader died). The supervisor says so and stops it (SIGCONT +
SIGTERM to every member, SIGKILL after the trainer's grace) before the trainer starts again.
``gpuwatch status`` without a daemon names them too (``describe``).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import psutil

from gpuwatch.heartbeat import PAUSE_STALE_S, pause_age_s
from gpuwatch.safefs import read_bounded
from gpuwatch.supervise.orphans import RUN_ENV

log = logging.getLogger("gpuwatch.supervisor")
TRAINERS_DIR = "trainers"  # under the runtime directory: one directory per trainer (compose.build_supervisor)
RECORD = "run.json"
PAUSE_FILE = "pause"
# /proc/<pid>/stat's start time is in clock ticks (usually 100 Hz): psutil's create_time of one process
# reads the same every time; another process on a reused pid started at least a tick apart.
_SAME_START_S = 0.005


@dataclass(frozen=True)
class RunRecord:
    trainer: str
    pid: int  # the leader (its own session and process group: pgid == pid)
    create_time: float  # psutil's, from /proc/<pid>/stat starttime
    run_id: str  # GPUWATCH_RUN_ID, inherited by every process of the run
    daemon_pid: int
    started_unix: float


def write_record(directory: Path, record: RunRecord) -> None:
    """Atomically, so a reader never sees half a record."""
    fd, tmp = tempfile.mkstemp(prefix=".run-", dir=directory)
    try:
        with os.fdopen(fd, "w") as handle:
            json.dump(asdict(record), handle)
        os.replace(tmp, directory / RECORD)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def record_run(directory: Path, trainer: str, pid: int, run_id: str, started_unix: float) -> None:
    """The run just spawned, recorded so that a later daemon finds it again if this one dies."""
    try:
        write_record(directory, RunRecord(trainer=trainer, pid=pid, create_time=psutil.Process(pid).create_time(),
                                          run_id=run_id, daemon_pid=os.getpid(), started_unix=started_unix))
    except (psutil.Error, OSError) as exc:  # gone already, or a full disk: the run goes on unrecorded
        log.warning("trainer %s: cannot record run pid %d: %s", trainer, pid, exc)


def read_record(directory: Path) -> RunRecord | None:
    try:
        # In the trainer's directory: only a record this daemon's user wrote counts (safefs: no link, no FIFO).
        raw = json.loads(read_bounded(directory / RECORD, owners=(os.geteuid(),)))
        return RunRecord(trainer=str(raw["trainer"]), pid=int(raw["pid"]), create_time=float(raw["create_time"]),
                         run_id=str(raw["run_id"]), daemon_pid=int(raw["daemon_pid"]),
                         started_unix=float(raw["started_unix"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def clear_record(directory: Path) -> None:
    (directory / RECORD).unlink(missing_ok=True)


@dataclass
class Leftover:
    """A run an earlier daemon left: its record, the members still alive, its trainer's directory."""

    record: RunRecord
    members: list[psutil.Process]
    directory: Path

    def alive(self) -> list[psutil.Process]:
        return [p for p in self.members if _running(p)]

    def describe(self, now_unix: float, advice: bool = True) -> str:
        """One line: who, in what state, left by whom, and (``advice``, for `status`) what to do."""
        rec = self.record
        alive = self.alive()
        more = f" and {len(alive) - 1} more" if len(alive) > 1 else ""
        what = f"pid {rec.pid}{more}" if any(p.pid == rec.pid for p in alive) else \
            f"pid {' '.join(str(p.pid) for p in alive[:4])} (its leader {rec.pid} is gone)"
        age_s = pause_age_s(self.directory / PAUSE_FILE, now_unix)
        if any(_status(p) == psutil.STATUS_STOPPED for p in alive):
            state = "left stopped (SIGSTOP)"
        elif age_s is not None:
            stale = f", not refreshed for {age_s:.0f}s: whoever asked is gone" if age_s >= PAUSE_STALE_S else ""
            state = f"held by its pause file {self.directory / PAUSE_FILE}{stale}"
        else:
            state = "running unsupervised"
        text = f"trainer {rec.trainer}: {what} {state}, left by gpuwatch daemon pid {rec.daemon_pid} (gone)"
        if advice:
            text += f"; starting the daemon stops it (or: kill -CONT -- -{rec.pid}; kill -TERM -- -{rec.pid})"
        return text


def find(state_dir: Path, own_daemon_pid: int | None = None) -> list[Leftover]:
    """Every recorded run under ``state_dir`` (one directory per trainer) that another daemon left alive.

    A record of a run that is gone is removed (its daemon died before it could); one of
    ``own_daemon_pid`` (this daemon's) is not a leftover.
    """
    found = []
    try:
        directories = sorted(d for d in state_dir.iterdir() if d.is_dir())
    except OSError:
        return []
    for directory in directories:
        record = read_record(directory)
        if record is None or record.daemon_pid == own_daemon_pid or _daemon_alive(record):
            continue
        # The daemon stops only processes that prove they are the run (its mark in their environment, which
        # the trainer's user cannot forge for another's process; the record lies in a directory that user
        # owns); status, read only and maybe not root, takes pid and start time when it cannot read that.
        members = _members(record, proven=own_daemon_pid is not None)
        if members:
            found.append(Leftover(record, members, directory))
        elif own_daemon_pid is not None:
            clear_record(directory)
    return found


def _daemon_alive(record: RunRecord) -> bool:
    """The daemon that started the run still runs (another daemon on this runtime directory: not ours to
    stop): its pid belongs to a process older than the run (a pid reused since the daemon died is younger)."""
    try:
        return bool(psutil.Process(record.daemon_pid).create_time() <= record.started_unix)
    except psutil.Error:
        return False


def describe_all(runtime_dir: Path, now_unix: float) -> list[str]:
    """For `gpuwatch status` without a daemon: one line per run a daemon left (read only: nothing is cleared)."""
    return [leftover.describe(now_unix) for leftover in find(runtime_dir / TRAINERS_DIR)]


def _members(record: RunRecord, proven: bool) -> list[psutil.Process]:
    """The run's processes still alive: its leader (same pid *and* start time, and with ``proven`` its mark)
    and its descendants, and every process carrying its mark (readable ones: our user's, or any as root)."""
    members: dict[int, psutil.Process] = {}
    try:
        leader = psutil.Process(record.pid)
        if abs(leader.create_time() - record.create_time) < _SAME_START_S and _running(leader) and (
                _marked(leader, record.run_id, unreadable=not proven)):
            members[leader.pid] = leader
            members.update((p.pid, p) for p in leader.children(recursive=True))
    except psutil.Error:
        pass
    for proc in psutil.process_iter():
        try:
            # A process of the run started after its leader: a cheap filter before reading the environment.
            if proc.pid in members or proc.create_time() + _SAME_START_S < record.create_time:
                continue
            if _marked(proc, record.run_id, unreadable=False):
                members[proc.pid] = proc
        except psutil.Error:
            continue
    return [p for p in members.values() if _running(p)]


def _marked(proc: psutil.Process, run_id: str, unreadable: bool) -> bool:
    """``proc`` carries the run's mark; ``unreadable``: what an environment we may not read counts as."""
    try:
        return bool(proc.environ().get(RUN_ENV) == run_id)
    except psutil.AccessDenied:
        return unreadable
    except psutil.Error:
        return False


class LeftoverStop:
    """Stops one leftover over the ticks, never blocking: CONT + TERM, KILL after ``grace_s``, done when gone."""

    def __init__(self, leftover: Leftover, grace_s: float) -> None:
        self.leftover = leftover
        self.grace_s = grace_s
        self.term_sent: float | None = None
        self.killed = False

    @property
    def reason(self) -> str:
        return (f"waiting to start: stopping pid {self.leftover.record.pid}, the run of trainer "
                f"{self.leftover.record.trainer} an earlier daemon (pid {self.leftover.record.daemon_pid}) left")

    def step(self, now: float) -> bool:
        """One tick; True once every member is gone (its record is removed then)."""
        alive = self.leftover.alive()
        rec = self.leftover.record
        if not alive:
            clear_record(self.leftover.directory)
            (self.leftover.directory / PAUSE_FILE).unlink(missing_ok=True)
            log.info("trainer %s: the run pid %d an earlier daemon left is gone", rec.trainer, rec.pid)
            return True
        if self.term_sent is None:
            log.warning("%s: stopping it before the trainer starts (SIGCONT, SIGTERM, SIGKILL after %gs)",
                        self.leftover.describe(time.time(), advice=False), self.grace_s)
            self.term_sent = now
            _signal(alive, signal.SIGCONT)
            _signal(alive, signal.SIGTERM)
        elif not self.killed and now - self.term_sent >= self.grace_s:
            log.warning("trainer %s: SIGKILL to %d process(es) of the run an earlier daemon left, still there %gs "
                        "after SIGTERM", rec.trainer, len(alive), self.grace_s)
            self.killed = True
            _signal(alive, signal.SIGKILL)
        return False

    def kill(self) -> None:
        """The daemon stops before this leftover is gone: nothing it found is left running."""
        alive = self.leftover.alive()
        _signal(alive, signal.SIGCONT)
        _signal(alive, signal.SIGKILL)
        psutil.wait_procs(alive, timeout=2.0)
        if not self.leftover.alive():
            clear_record(self.leftover.directory)


def _signal(processes: list[psutil.Process], sig: int) -> None:
    for proc in processes:
        try:
            proc.send_signal(sig)  # psutil checks the start time: a pid reused since is not signalled
        except psutil.Error:
            pass


def _running(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _status(proc: psutil.Process) -> str | None:
    try:
        return str(proc.status())
    except psutil.Error:
        return None
