"""One mechanism for every write that changes the hardware: the fans, the power cap, and what comes next.

Every actuator has the same shape (docs/architecture.md, "An actuator"): per GPU it probes what the
hardware offers, records the original before its first write, takes control, writes and reads back,
gives up after repeated failures, and hands the original back on every exit path. This module is the
part they share, so that no actuator can get it wrong in its own way:

* ``RestoreFile``: ``<runtime_dir>/<actuator>-restore.json``, ``{gpu_id: {"backend": ..., ...}}``, written
  atomically before the first write (a temporary file, then ``os.replace``: a SIGKILL leaves the old file or
  the new one), read and written through ``safefs`` (a regular file only, bounded; an exclusive temporary
  name): `gpuwatch restore` may be pointed at any directory. A daemon that starts again
  adopts a record left by one that was killed: the record holds the true original, where the new
  start would read what the killed daemon left behind.
* ``Actuator``: one actuator's restore file and its per-GPU workers (gpuwatch.deadline). Every
  hardware write runs on the GPU's worker within ``sysfs_deadline_s``: a write stuck in the driver
  costs the loop one deadline and is reported, it never holds the loop nor the shutdown; ``Stuck`` logs
  such an episode once as it starts and once as it ends (the caps' and the clock's controllers).
* ``Actuator.restore_all``: every record of the file given back, each on its GPU's worker, the
  records that went back removed. The daemon's shutdown (SIGTERM, SIGINT, an exception), atexit,
  `gpuwatch restore` and systemd's ExecStopPost all come here (wired in daemon/compose.py).

What a record holds and how it is given back belongs to the actuator (``ActuatorKind``): its typed
records, registered by their ``backend`` key, and the one function that gives a stored record back.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

from gpuwatch.deadline import Late, Workers
from gpuwatch.safefs import read_bounded, write_atomic

log = logging.getLogger("gpuwatch")
T = TypeVar("T")
# This many write or verify failures in a row and the caps' or the clock's controller gives a GPU up: the
# firmware or another tool does not let the setting be kept (the card pauses instead).
FAILURES_BEFORE_GIVING_UP = 3


@dataclass
class Handback:
    """What a restore did (`gpuwatch restore`): one line per thing handed back, one per problem."""

    done: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


class Record(Protocol):
    """One GPU's original for one actuator, read before the first write and kept in its restore file.

    Each actuator's records are frozen dataclasses with a ``from_json`` classmethod, registered under
    their ``backend`` key in the actuator's ``RECORDS``; the restore code is theirs too."""

    @property
    def backend(self) -> str: ...

    def to_json(self) -> dict[str, Any]: ...

    def handed_back(self) -> str:
        """What giving it back sets, for the user (`gpuwatch restore` prints it)."""
        ...


class NotHandedBack(Exception):
    """A record could not be given back; the message says why (the record is kept for the next try)."""


class RestoreFailed(RuntimeError):
    """A controller's restore left records it could not give back (kept for `gpuwatch restore`); the message
    names each. An expected outcome of a hung or refusing device, so the daemon logs it as one line."""


@dataclass(frozen=True)
class Unrecorded(Late):
    """A GPU's call that ``Actuator.run`` did not run: the record of what this actuator holds on it is gone from
    the file and cannot be written again (``problem`` says why). Handled like a call stuck past its deadline
    (nothing written, a hot card paused instead), under its own reason (``blocked_reason``)."""

    problem: str = ""


def blocked_reason(late: Late, what: str) -> str:
    """Why a GPU's ``what`` (``fan``, ``power cap``, ``clock``) was not written this tick."""
    if isinstance(late, Unrecorded):
        return late.problem
    return f"{what} writes blocked for {late.running_s:.1f} s"


class Gone(Exception):
    """The device the record belongs to is not there any more: nothing is left to give back."""


R = TypeVar("R", bound=Record)


@dataclass(frozen=True)
class ActuatorKind(Generic[R]):
    """One actuator as the restore path knows it (daemon/compose.py registers every kind).

    ``name`` makes the file (``<name>-restore.json``), the workers' and the log's names. ``give_back``
    hands one GPU's stored record back and returns what it was handed back as; it raises
    ``NotHandedBack`` or ``Gone``. ``without_records`` is what a restore does for GPUs the file does not
    cover: for all of them when there is no record at all (None), else for the GPUs whose record's device
    was gone (it may be back at a new place). ``records``: the file's ``backend`` key -> its record type."""

    name: str
    give_back: Callable[[str, Mapping[str, Any]], str]
    without_records: Callable[[Handback, set[str] | None], None] | None = None
    records: Mapping[str, Callable[[Mapping[str, Any]], R]] = field(default_factory=dict)


class RestoreFile:
    """Thread-safe: the fan controller takes every GPU on its own worker, all at the same moment, and one
    GPU's read-modify-write must neither lose another's record nor share its temporary file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.lock = threading.RLock()  # re-entered: remove() may clear(); the Actuator holds it around its own

    def load(self) -> dict[str, Any]:
        """Every record; empty when there is no file, and (logged) when it cannot be read."""
        try:
            return self.read()
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            log.error("%s unreadable (%s): restoring without it", self.path, exc)
            return {}

    def read(self) -> dict[str, Any]:
        """Every record; raises FileNotFoundError when there is none, OSError or ValueError (one line) when the
        file is there but is not a restore file (truncated, empty, a list, a link, a FIFO): `gpuwatch restore`
        then fails, naming it."""
        raw = read_bounded(self.path)
        try:
            data = json.loads(raw)
        except ValueError as exc:
            raise ValueError(f"not JSON ({exc})" if raw.strip() else "empty") from None
        if not isinstance(data, dict):
            raise ValueError(f"a JSON {type(data).__name__}, not an object of records")
        return data

    def add(self, gpu_id: str, record: dict[str, Any],
            adopt: Callable[[dict[str, Any]], dict[str, Any]] | None = None) -> dict[str, Any]:
        """Store ``record`` unless one of the same backend is there already; returns the one in force.

        ``adopt(existing)`` merges such a record with the new one instead (the fans: the original mode
        stays, the paths are the new ones); it is stored when it differs.
        """
        with self.lock:
            data = self.load()
            existing = data.get(gpu_id)
            if isinstance(existing, dict) and existing.get("backend") == record.get("backend"):
                if adopt is None:
                    return existing
                record = adopt(existing)
                if record == existing:
                    return existing
            data[gpu_id] = record
            self._save(data)
            return record

    def remove(self, gpu_id: str) -> None:
        """Forget one GPU's record (given back); the file goes when the last one does."""
        with self.lock:
            data = self.load()
            if data.pop(gpu_id, None) is None:
                return
            if data:
                self._save(data)
            else:
                self.clear()

    def identity(self) -> tuple[int, int, int] | None:
        """(inode, mtime, size) of the file, None when it is absent: every save replaces it (a new inode)."""
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return st.st_ino, st.st_mtime_ns, st.st_size

    def clear(self) -> None:
        with self.lock:
            self.path.unlink(missing_ok=True)

    def _save(self, data: dict[str, Any]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(self.path, json.dumps(data, indent=2, sort_keys=True).encode())


def restore_file_path(runtime_dir: Path, name: str) -> Path:
    """The one name of an actuator's restore file: ``fan-restore.json``, ``power-restore.json``..."""
    return runtime_dir / f"{name}-restore.json"


class Actuator(Generic[R]):
    """One actuator's restore file and workers (``deadline.Workers``: each round of per-GPU steps on one thread);
    the controller that holds it decides what to write."""

    def __init__(self, kind: ActuatorKind[R], runtime_dir: Path, deadline_s: float,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.kind = kind
        self.file = RestoreFile(restore_file_path(runtime_dir, kind.name))
        self.deadline_s = deadline_s
        self._workers = Workers(f"gpuwatch-{kind.name}", monotonic)
        self._atexit = threading.Event()  # set once restore_all is registered (records are added on workers)
        # What this actuator recorded and has not given back, and the file as it was when it last held all
        # of it (inode, mtime, size): a record removed behind our back (`gpuwatch restore --force` beside
        # the daemon, a person) is written again before the next write (``_keep_recorded``).
        self._held: dict[str, dict[str, Any]] = {}
        self._seen: tuple[int, int, int] | None = None
        self._unremovable: set[str] = set()  # handed back by this process, record left (read-only directory)

    def busy(self, gpu_id: str) -> bool:
        """Whether the GPU's step of an earlier round is still running (one that missed its deadline)."""
        return self._workers.busy(gpu_id)

    def run(self, calls: Mapping[str, Callable[[], T]]) -> dict[str, T | Late]:
        """Each GPU's call, one round on the workers, within the deadline (``deadline.Workers.run_all``).

        Every write runs here, so this is where the records this actuator holds are made sure of first:
        one stat of the file when nothing changed, the missing records written again when it did. A GPU
        whose record is gone and cannot be written again (a full or read-only runtime directory) does not
        run its call: it answers ``Unrecorded`` (a ``Late``: what it holds stays as it is, nothing more
        is written, a hot card is paused instead) until its record is back on disk."""
        unrecorded = self._keep_recorded()
        if not unrecorded:  # every tick but those with a lost record: the round's results are the answer
            return self._workers.run_all(calls, self.deadline_s)
        ran = self._workers.run_all({gpu_id: call for gpu_id, call in calls.items() if gpu_id not in unrecorded},
                                    self.deadline_s)
        return {gpu_id: Unrecorded(0.0, unrecorded[gpu_id]) if gpu_id in unrecorded else ran[gpu_id]
                for gpu_id in calls}

    def record(self, gpu_id: str, record: Record,
               adopt: Callable[[dict[str, Any]], dict[str, Any]] | None = None) -> dict[str, Any]:
        """Persist ``record`` before the first write (an earlier daemon's record of the same backend wins,
        or is merged by ``adopt``); returns the record in force. Registers the restore at exit once."""
        with self.file.lock:
            stored = self.file.add(gpu_id, record.to_json(), adopt)
            self._held[gpu_id] = stored
            self._unremovable.discard(gpu_id)
            self._seen = self.file.identity()
        if not self._atexit.is_set():
            # The daemon restores in its finally (the documented path). This covers an actuator used
            # without it, in tests or as a library, whose process exits without a restore; restore_all
            # is idempotent, so running both (or twice, from two workers at once) is harmless.
            self._atexit.set()
            atexit.register(self._restore_at_exit)
        return stored

    def record_first(self, gpu_id: str, record: Record, what: str,
                     adopt: Callable[[dict[str, Any]], dict[str, Any]] | None = None) -> str | None:
        """``record`` persisted before a first write (``record``; the one in force is then ``held``); else why
        nothing may be written: a full or read-only runtime directory leaves no way back, so the caller writes
        nothing and counts a failure."""
        try:
            self.record(gpu_id, record, adopt)
        except OSError as exc:
            return f"cannot record the original {what} in {self.file.path} ({exc.strerror or exc}): nothing written"
        return None

    def held(self, gpu_id: str) -> dict[str, Any]:
        """The record in force for a GPU this actuator recorded (``record``) and has not given back."""
        return self._held[gpu_id]

    def forget(self, gpu_id: str) -> None:
        """The original is in force again: nothing of ours to give back on this GPU.

        A record that cannot be removed (a read-only or vanished runtime directory) stays, with a warning:
        the hardware is back, and giving an original back twice changes nothing."""
        with self.file.lock:
            self._held.pop(gpu_id, None)
            try:
                self.file.remove(gpu_id)
            except OSError as exc:
                self._unremovable.add(gpu_id)
                log.warning("GPU %s: %s handed back, but its record stays in %s (%s); harmless: giving the "
                            "original back again changes nothing", gpu_id, self.kind.name, self.file.path,
                            exc.strerror or exc)
            self._seen = self.file.identity()

    def _keep_recorded(self) -> dict[str, str]:
        """Write again every record this actuator holds that the file lost (issue 31: `gpuwatch restore`
        beside a running daemon gave the original back and deleted the record, the daemon wrote again, and
        a SIGKILL then left the lowered cap for good). Cheap when nothing changed: one stat. Returns the
        GPUs whose record could not be written again, each with why: no write on them (issue 46: a full
        directory let the write go on without its record)."""
        with self.file.lock:
            if not self._held or self.file.identity() == self._seen:
                return {}
            on_file = self.file.load()
            unrecorded: dict[str, str] = {}
            for gpu_id, stored in sorted(self._held.items()):
                if gpu_id in on_file:
                    continue
                try:
                    self._held[gpu_id] = self.file.add(gpu_id, stored)
                except OSError as exc:  # said once by the controller, as the reason its GPU is not written
                    unrecorded[gpu_id] = (
                        f"the {self.kind.name} restore record is gone and cannot be written again in "
                        f"{self.file.path} ({exc.strerror or exc}): nothing written until it can be")
                    continue
                log.warning("GPU %s: the %s restore record was removed while this daemon drives it (gpuwatch "
                            "restore beside the daemon?): recorded again before the next write", gpu_id,
                            self.kind.name)
            if not unrecorded:  # else the next run tries again (the file's identity is not taken as seen)
                self._seen = self.file.identity()
            return unrecorded

    def recorded(self) -> dict[str, Any]:
        return self.file.load()

    def record_of(self, gpu_id: str) -> R | None:
        """The GPU's record on file, typed (the kind's ``records``); None without one this kind knows."""
        stored = self.recorded().get(gpu_id)
        parse = self.kind.records.get(str(stored.get("backend"))) if isinstance(stored, dict) else None
        return None if parse is None or not isinstance(stored, dict) else parse(stored)

    def restore_all(self, without_records: bool = False, held: bool = True) -> Handback:
        """Every record given back, one round on the workers within the deadline; the ones that went back
        (or whose device is gone) are removed, the others kept for `gpuwatch restore` to try again.

        ``without_records``: also the kind's fallback for what the file does not cover (`gpuwatch restore`
        only: the daemon gives back what it recorded and nothing else, such as a fan another tool drives).
        ``held``: also what this actuator recorded and still holds when the file lost it (removed beside the
        daemon); the restore at exit, a backstop, goes by the file alone."""
        unreadable = None
        with self.file.lock:
            try:
                on_file = self.file.read()
            except FileNotFoundError:
                on_file = {}
            except (OSError, ValueError) as exc:  # truncated, empty, a list, a link: said, never "nothing to do"
                on_file = {}
                why = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
                unreadable = f"{self.file.path}: unreadable ({why}): its {self.kind.name} records not handed back"
                log.error("%s", unreadable)
            records = {**(self._held if held else {}), **on_file}
        result = Handback()
        if unreadable is not None:
            result.problems.append(unreadable)
        records = {gpu_id: stored for gpu_id, stored in records.items() if gpu_id not in self._unremovable}
        calls = {gpu_id: partial(self._give_back, gpu_id, stored) for gpu_id, stored in sorted(records.items())}
        gone: set[str] = set()
        for gpu_id, outcome in self._workers.run_all(calls, self.deadline_s).items():
            if isinstance(outcome, Late):
                outcome = NotHandedBack(f"{self.kind.name} writes blocked for {outcome.running_s:.1f} s")
            if isinstance(outcome, NotHandedBack):
                result.problems.append(f"{gpu_id}: {outcome}")  # the caller reports them (raise, print, log)
                continue
            if isinstance(outcome, Gone):
                log.warning("GPU %s: gone, no %s to hand back (%s)", gpu_id, self.kind.name, outcome)
                gone.add(gpu_id)
            else:
                result.done.append(f"{gpu_id}: {outcome}")
            self.forget(gpu_id)
        if without_records and self.kind.without_records is not None and (gone or not records):
            self.kind.without_records(result, gone or None)
        return result

    def _give_back(self, gpu_id: str, stored: Any) -> str | NotHandedBack | Gone:
        """One record, on the workers: what it was handed back as, or why not."""
        if not isinstance(stored, dict) or not isinstance(stored.get("backend"), str):
            return NotHandedBack(f"unknown {self.kind.name} restore record {stored!r}")
        try:
            done = self.kind.give_back(gpu_id, stored)
        except (NotHandedBack, Gone) as exc:
            return exc
        except Exception as exc:  # one GPU's surprise must not cost the others their restore
            log.exception("GPU %s: giving the %s back failed", gpu_id, self.kind.name)
            return NotHandedBack(f"{type(exc).__name__}: {exc}")
        log.info("GPU %s: %s", gpu_id, done)
        return done

    def _restore_at_exit(self) -> None:
        for problem in self.restore_all(held=False).problems:
            log.error("at exit: %s", problem)


class Stuck:
    """The GPUs whose step still runs on its worker past the deadline (a write stuck in the driver), one episode
    at a time: logged once as it starts and once as the writes answer again; ``what`` names the writes."""

    def __init__(self, log: logging.Logger, what: str) -> None:
        self.log = log
        self.what = what
        self._gpus: set[str] = set()

    def results(self, ran: Mapping[str, T | Late], blocked: Callable[[str, str], T]) -> dict[str, T]:
        """Each GPU's result of ``Actuator.run``; ``blocked(gpu_id, reason)`` stands for a stuck one's."""
        results: dict[str, T] = {}
        for gpu_id, result in ran.items():
            if isinstance(result, Late):
                reason = blocked_reason(result, self.what)
                if gpu_id not in self._gpus:
                    self._gpus.add(gpu_id)
                    self.log.error("GPU %s: %s; a hot card is paused instead", gpu_id, reason)
                result = blocked(gpu_id, reason)
            elif gpu_id in self._gpus:
                self._gpus.discard(gpu_id)
                self.log.warning("GPU %s: %s writes answer again", gpu_id, self.what)
            results[gpu_id] = result
        return results
