"""GPU processes not run under gpuwatch (effects): read who they are, SIGSTOP and SIGCONT them, keep the record.

The decisions are supervise/unmanaged.py's. Here: each candidate's identity from /proc (start time, state,
uid, kernel-thread flag), the signals, and ``<runtime_dir>/unmanaged-stopped.json``: every process this
daemon holds stopped (pid and start time), written atomically *before* its SIGSTOP and after its SIGCONT.
A daemon that cannot SIGCONT (SIGKILL, OOM, a crash) leaves the record; `gpuwatch restore` (systemd's
ExecStopPost, through ``compose.restore_all``) and the next daemon's start continue every recorded process
that is still the recorded one, then remove the record.

A signal goes through a pidfd opened *before* the start time is checked: if /proc then shows the recorded
start time, the pidfd is that process (a pid is not reused while its process lives), so a pid reused by
another process is never signalled, even when the two race.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from gpuwatch.config.file import Config
from gpuwatch.model import Acted, Snapshot, UnmanagedState
from gpuwatch.procfs import ProcError, Procfs
from gpuwatch.procs.fdinfo import parse_stat, parse_uid, u64
from gpuwatch.safefs import read_bounded
from gpuwatch.supervise import unmanaged as policy

log = logging.getLogger("gpuwatch.supervisor")
RECORD_NAME = "unmanaged-stopped.json"
PF_KTHREAD = 0x00200000  # include/linux/sched.h: the flags field (9) of /proc/<pid>/stat


def record_path(runtime_dir: Path) -> Path:
    return runtime_dir / RECORD_NAME


def identity(procfs: Procfs, pid: int) -> policy.Identity | None:
    """``pid`` as /proc shows it now; None when gone or unreadable."""
    try:
        stat_text = procfs.read(pid, "stat")
        status = procfs.read(pid, "status") or ""
    except ProcError:
        return None
    stat = parse_stat(stat_text or "")
    if stat is None or stat_text is None:
        return None
    fields = stat_text.rpartition(")")[2].split()
    flags = u64(fields[6]) if len(fields) > 6 else None
    return policy.Identity(pid=pid, start_ticks=stat.start_ticks, state=stat.state, uid=parse_uid(status),
                           kernel_thread=flags is not None and bool(flags & PF_KTHREAD))


def send(procfs: Procfs, pid: int, start_ticks: int, sig: int) -> bool:
    """``sig`` to ``pid`` if it is still the process that started at ``start_ticks``; False otherwise."""
    try:
        pidfd = os.pidfd_open(pid)
    except OSError:  # gone (ESRCH)
        return False
    try:
        now = identity(procfs, pid)
        if now is None or now.start_ticks != start_ticks:
            return False
        signal.pidfd_send_signal(pidfd, sig)
        return True
    except OSError:
        return False
    finally:
        os.close(pidfd)


def write_record(runtime_dir: Path, stopped: Iterable[policy.Stopped]) -> None:
    """Atomically (a reader never sees half a record); no stop: no file."""
    rows = [{"pid": s.pid, "start_ticks": s.start_ticks, "gpu_ids": list(s.gpu_ids), "since_unix": s.since_unix}
            for s in stopped]
    path = record_path(runtime_dir)
    if not rows:
        path.unlink(missing_ok=True)
        return
    fd, tmp = tempfile.mkstemp(prefix=".unmanaged-", dir=runtime_dir)
    try:
        with os.fdopen(fd, "w") as handle:
            json.dump({"daemon_pid": os.getpid(), "stopped": rows}, handle)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def resume_recorded(procfs: Procfs, runtime_dir: Path) -> tuple[list[str], list[str]]:
    """SIGCONT every process a killed daemon's record holds stopped and is still the recorded one; the record
    removed. Returns (lines said, problems)."""
    path = record_path(runtime_dir)
    try:
        text = read_bounded(path).decode(errors="replace")
    except FileNotFoundError:
        return [], []
    except OSError as exc:
        return [], [f"cannot read the record of stopped processes {path}: {exc.strerror or exc}"]
    try:
        entries = [(int(r["pid"]), int(r["start_ticks"])) for r in json.loads(text)["stopped"]]
    except (ValueError, KeyError, TypeError) as exc:
        return [], [f"{path}: unreadable record of stopped processes ({type(exc).__name__}: {exc})",
                    *_remove(path)]
    done = []
    for pid, start_ticks in entries:
        if send(procfs, pid, start_ticks, signal.SIGCONT):
            done.append(f"process {pid} (not run under gpuwatch) continued (SIGCONT): a daemon that did not "
                        "stop cleanly left it stopped")
        else:
            done.append(f"process {pid} a daemon left stopped is gone (or its pid is another process now): "
                        "not signalled")
    return done, _remove(path)


def describe_recorded(runtime_dir: Path) -> list[str]:
    """For `gpuwatch status` without a daemon: the processes a killed daemon's record holds stopped (read only)."""
    path = record_path(runtime_dir)
    try:
        pids = [int(r["pid"]) for r in json.loads(read_bounded(path))["stopped"]]
    except FileNotFoundError:
        return []
    except (OSError, ValueError, KeyError, TypeError):
        pids = []
    held = f" (pid {', '.join(str(p) for p in pids)})" if pids else ""
    return [f"no daemon runs, yet {path} holds processes not run under gpuwatch that it SIGSTOPped{held}: "
            "they were not continued"]


def _remove(path: Path) -> list[str]:
    try:
        path.unlink(missing_ok=True)
    except OSError as exc:
        return [f"cannot remove {path}: {exc.strerror or exc}"]
    return []


class UnmanagedProcesses:
    """The daemon's part: per tick decide, signal, record; at exit every stopped process continued."""

    def __init__(self, procfs: Procfs, runtime_dir: Path, clock: Callable[[], float] = time.monotonic) -> None:
        self.procfs = procfs
        self.runtime_dir = runtime_dir
        self.clock = clock
        self.book = policy.Book()
        self._started = False
        self._record_failed = False
        # What tick published for a book at rest, and of what: the GPUs, on_hot and the totals (policy.at_rest).
        self._shown: tuple[UnmanagedState, ...] = ()
        self._shown_of: tuple[tuple[str, ...], str, tuple[tuple[str, int], ...]] | None = None

    def start(self) -> None:
        """An earlier daemon's stops given back (it was killed before it could)."""
        self._started = True
        done, problems = resume_recorded(self.procfs, self.runtime_dir)
        for line in done:
            log.warning("%s", line)
        for line in problems:
            log.error("%s", line)

    def tick(self, snapshot: Snapshot, below: Acted, config: Config) -> tuple[UnmanagedState, ...]:
        if not self._started:
            self.start()
        settings = config.unmanaged
        if policy.at_rest(self.book, settings):
            # Nothing to decide, read or signal (most ticks): the states are made again only when what they show
            # changed, the GPUs (a rediscovery), on_hot (a reload) or the totals; with nothing stopped that is all.
            shown_of = (tuple(g.gpu_id for g in snapshot.gpus), settings.on_hot, self.book.stops_total)
            if shown_of != self._shown_of:
                self._shown, self._shown_of = policy.published(self.book, shown_of[0], settings.on_hot), shown_of
            return self._shown
        # Under "report" the policy stops nothing (and continues what a "stop" left stopped): it reads no GPU's
        # verdict, so none is made (tests/supervise/test_unmanaged.py: the same decision without them).
        gpus = policy.verdicts(snapshot, below, config.thermal) if settings.on_hot == "stop" else ()
        wanted = policy.candidates(snapshot.processes, gpus, settings) | {s.pid for s in self.book.stopped}
        identities = {pid: ident for pid in sorted(wanted) if (ident := identity(self.procfs, pid)) is not None}
        decision = policy.decide(self.book, settings, gpus, snapshot.processes, identities, os.getpid(),
                                 self.clock(), time.time())
        for stop, why in decision.resume:
            self._continue(stop, why)
        for stop in decision.forget:
            log.info("process %d (not run under gpuwatch) that gpuwatch stopped is gone or its pid was reused: "
                     "forgotten, not signalled", stop.pid)
        stopped = [s for s in decision.book.stopped if s not in decision.stop]
        to_stop = decision.stop
        if decision.stop or decision.resume or decision.forget:
            # Before the SIGSTOPs: a daemon killed right after them leaves them recorded. Without a record no
            # SIGSTOP: a killed daemon would leave the process stopped with nothing to continue it.
            if not self._record(decision.book.stopped):
                to_stop = ()
        commands = {p.pid: p.command for p in snapshot.processes}
        totals = dict(decision.book.stops_total)
        for stop in decision.stop:
            if stop in to_stop and send(self.procfs, stop.pid, stop.start_ticks, signal.SIGSTOP):
                stopped.append(stop)
                log.warning("SIGSTOP to process %d (%s), not run under gpuwatch: %s, and neither the fan nor the "
                            "power cap can do more ([unmanaged] on_hot = \"stop\")", stop.pid,
                            commands.get(stop.pid, "?"), stop.reason)
            else:
                for gpu_id in stop.gpu_ids:  # gone since, or not recorded: not a stop
                    totals[gpu_id] -= 1
        if to_stop and len(stopped) != len(decision.book.stopped):
            self._record(stopped)
        self.book = policy.Book(stopped=tuple(stopped), resting=decision.book.resting,
                                stops_total=tuple(sorted(totals.items())))
        return policy.published(self.book, [g.gpu_id for g in snapshot.gpus], settings.on_hot)

    def _record(self, stopped: Iterable[policy.Stopped]) -> bool:
        """The record written; a failure (a full or read-only runtime directory) said once per episode."""
        try:
            write_record(self.runtime_dir, stopped)
        except OSError as exc:
            if not self._record_failed:
                log.error("cannot record stopped processes in %s (%s): processes not run under gpuwatch are not "
                          "stopped while it fails", record_path(self.runtime_dir), exc.strerror or exc)
            self._record_failed = True
            return False
        self._record_failed = False
        return True

    def stop(self) -> None:
        """The daemon's exit: every process it stopped continued, the record removed."""
        for stop in self.book.stopped:
            self._continue(stop, "the daemon stops")
        self.book = policy.without(self.book)
        self._record(())

    def _continue(self, stop: policy.Stopped, why: str) -> None:
        if send(self.procfs, stop.pid, stop.start_ticks, signal.SIGCONT):
            log.warning("SIGCONT to process %d (not run under gpuwatch): %s", stop.pid, why)
