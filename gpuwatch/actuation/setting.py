"""One held, verified setting per GPU (the power cap, the clock ceiling): what their controllers share.

A ``Setting`` backend probes what the card offers, writes and reads back; a failure that will not go away (no
permission, a value the driver refuses, no interface) is ``SettingUnavailable``: the controller gives the GPU up,
says why once, and the supervisor pauses instead. Anything else (EIO, a GPU mid-reset) is ``SettingWriteError`` and
counted; ``FAILURES_BEFORE_GIVING_UP`` in a row give up too. A first write whose record cannot be persisted (a full
runtime directory) writes nothing and is tried again every tick, the card free to pause meanwhile. ``Held`` is one
GPU's bookkeeping of what it holds (recorded, written, failures, counters, reason), and ``Holder`` the verified
write, the failure, the give-up, the give-back and the restore-all every such controller (a ``HeldControl``) runs
through its ``Actuator``: the original recorded before the first write and never a write without it
(``Actuator.record_first``). ``StoredHandback`` is what their kinds share to give a stored record back (the record
parsed by its ``backend`` key, NVML loaded once for all GPUs); how a kind finds a card is given to it (the daemon's
amdgpu source, or ``gpus.amdgpu.discovered_once``): this package imports no ``gpus``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

from gpuwatch.actuation.actuator import (
    FAILURES_BEFORE_GIVING_UP,
    Actuator,
    ActuatorKind,
    NotHandedBack,
    Record,
    RestoreFailed,
    Stuck,
)
from gpuwatch.sysfs import Sysfs

NvmlLoader = Callable[[], Any]  # an initialised pynvml module (None: the daemon loaded none); raises when there is none
R = TypeVar("R", bound=Record)
L = TypeVar("L")  # how a kind finds a card by PCI slot now (gpus.amdgpu.Locate)
T = TypeVar("T")


class SettingUnavailable(Exception):
    """This GPU's setting cannot be governed; the message says why, for the log, status and metrics."""


class SettingWriteError(Exception):
    """One write or readback failed; it may work on the next tick."""


class Setting(Protocol):
    """One GPU's held setting as a backend offers it; each kind adds how it is observed, recorded and given
    back (power/backend.CapBackend, clock/backend.ClockBackend)."""

    @property
    def name(self) -> str: ...  # published as the state's ``backend``

    def probe(self) -> object:
        """What the interface offers now; raises SettingUnavailable when there is nothing to govern."""
        ...

    def write(self, value: float) -> float:
        """Set ``value`` and return what reads back; raises SettingUnavailable or SettingWriteError."""
        ...


@dataclass(kw_only=True)
class Held:
    """One GPU's held setting across ticks (its controller's per-GPU state extends it)."""

    gpu_id: str
    probed: bool = False
    reason: str | None = None
    holding: bool = False  # a record is in the restore file: the original must go back
    written: float | None = None  # what we last wrote and expect in force
    target: float | None = None
    pause_allowed: bool = True
    failures: int = 0  # consecutive write or verify failures
    write_failed: bool = False  # the last write failed: the old value read back does not end the run of failures
    unrecorded: bool = False  # the last try could not record the original: nothing written, tried again next tick
    writes_total: int = 0
    write_errors_total: int = 0
    last_now: float | None = None

    def step_s(self, now: float) -> float:
        """The seconds since the last step (0 at the first), ``now`` kept for the next."""
        dt = 0.0 if self.last_now is None else max(0.0, now - self.last_now)
        self.last_now = now
        return dt

    def unavailable(self) -> None:
        """Given up: the controller's mode says so from now on."""
        raise NotImplementedError

    def released(self, by_restore: bool) -> None:
        """What the controller forgets once the original is back (its law's state; ``by_restore``: all of it)."""


H = TypeVar("H", bound=Held)


class Holder(Generic[H]):
    """The verified write, the failure, the give-up, the give-back and the restore-all of one setting.

    ``what`` names it in every line (``power cap``, ``clock ceiling``); ``instead`` says what a hot card gets
    when it is not governed; ``give_back`` writes a GPU's original back, verified (the problem, or None)."""

    def __init__(self, actuator: Actuator[Any], log: logging.Logger, what: str, instead: str,
                 give_back: Callable[[H], str | None]) -> None:
        self.actuator = actuator
        self.log = log
        self.what = what
        self.instead = instead
        self._give_back = give_back

    def probe(self, g: H, probe: Callable[[], T]) -> T | None:
        """``probe()``'s answer; None when there is none: given up (unavailable), or not known yet (a read that
        may work next tick: probed again then, never given up for good on one bad read)."""
        try:
            found = probe()
        except SettingUnavailable as exc:
            g.probed = True
            self.give_up(g, str(exc))
            return None
        except SettingWriteError as exc:
            reason = f"{self.what} not known yet: {exc}; probed again every tick"
            if g.reason != reason:
                self.log.warning("GPU %s: %s", g.gpu_id, reason)
            g.reason = reason
            return None
        g.probed = True
        if g.reason is not None:
            self.log.info("GPU %s: %s readable again", g.gpu_id, self.what)
            g.reason = None
        return found

    def write(self, g: H, value: float, record: Callable[[], Record], write: Callable[[float], float]) -> float | None:
        """Write ``value``, the original persisted first (``record()``); what reads back, None when nothing
        was written (said, counted; refused outright: given up)."""
        first = not g.holding
        if first:
            # Persisted before the first write, so a SIGKILL right after still leaves the way back; never a write
            # without it (a full or read-only runtime directory: nothing is written, the card pauses instead).
            problem = self.actuator.record_first(g.gpu_id, record(), self.what)
            if problem:
                self.unrecordable(g, problem)
                return None
            g.holding = True
            if g.unrecorded:
                g.unrecorded, g.reason = False, None
                self.log.info("GPU %s: the original %s recorded: governed again", g.gpu_id, self.what)
        try:
            back = write(value)
        except SettingUnavailable as exc:
            if first:  # refused outright: nothing of ours is in force
                g.holding = False
                self.actuator.forget(g.gpu_id)
            self.give_up(g, str(exc))
            return None
        except SettingWriteError as exc:
            self.failed(g, str(exc))
            return None
        g.writes_total += 1
        g.written, g.write_failed = value, False
        return back

    def unrecordable(self, g: H, problem: str) -> None:
        """No way back could be persisted (a full or read-only runtime directory): nothing written, a hot card may
        pause this tick, said once and tried again every tick. Never given up for it, as the fan waits on the
        firmware: the directory gets space again, and then the rung governs again without a restart."""
        g.write_errors_total += 1
        g.pause_allowed, g.unrecorded = True, True
        reason = f"{problem}; tried again every tick, {self.instead}"
        if g.reason != reason:
            self.log.error("GPU %s: %s", g.gpu_id, reason)
        g.reason = reason

    def failed(self, g: H, problem: str) -> None:
        """A write that failed or could not be made: counted and said; a few in a row give up."""
        g.write_errors_total += 1
        g.failures += 1
        g.write_failed = True
        self.log.error("GPU %s: %s", g.gpu_id, problem)
        if g.failures >= FAILURES_BEFORE_GIVING_UP:
            self.give_up(g, f"{FAILURES_BEFORE_GIVING_UP} {self.what} writes failed in a row, last: {problem}")

    def give_up(self, g: H, reason: str) -> None:
        """Unavailable from now on: logged once, published, the supervisor pauses instead; the original back."""
        self.log.warning("GPU %s: %s not governed: %s; %s", g.gpu_id, self.what, reason, self.instead)
        g.unavailable()
        g.reason, g.pause_allowed, g.target = reason, True, None
        self.give_back(g)

    def give_back(self, g: H) -> str | None:
        """The original back if we hold one; the problem when it did not stick (record kept)."""
        if not g.holding:
            return None
        problem = self._give_back(g)
        if problem:
            self.log.error("GPU %s: %s (run gpuwatch restore)", g.gpu_id, problem)
            return problem
        self.release(g)
        return None

    def release(self, g: H, law: bool = True) -> None:
        """The original is in force again: nothing of ours to give back (``law``: the law's state goes too)."""
        g.holding, g.written = False, None
        self.actuator.forget(g.gpu_id)
        if law:
            g.released(by_restore=False)

    def restore_all(self, gpus: list[H]) -> None:
        """Every original back (the actuator's restore-all, each GPU on its worker within the deadline); safe to
        call more than once. Raises RestoreFailed naming the records it could not give back (kept)."""
        result = self.actuator.restore_all()
        recorded = self.actuator.recorded()
        for g in gpus:
            if g.holding and g.gpu_id not in recorded:
                g.holding, g.written = False, None
                g.released(by_restore=True)
        if result.problems:
            raise RestoreFailed(f"{self.what} restore failed for " + ", ".join(result.problems))


class HeldControl(Generic[H, L]):
    """What a held setting's controller is built of besides its law: the tree and the cards it writes through,
    NVML, its clock, its ``Actuator`` of ``kind``, the ``Holder`` over it, its GPUs and its stuck writes.
    Subclasses give ``what``, ``instead`` and how a GPU's original goes back (``_give_back``)."""

    what = ""
    instead = ""

    def __init__(self, kind: Callable[[Sysfs, NvmlLoader, L], ActuatorKind[Any]], log: logging.Logger,
                 sysfs: Sysfs, runtime_dir: Path, locate: L, nvml: Any, clock: Callable[[], float],
                 check_access: bool, deadline_s: float) -> None:
        self.sysfs = sysfs
        self.locate = locate
        self.nvml = nvml
        self.clock = clock
        self.check_access = check_access
        self.actuator: Actuator[Any] = Actuator(kind(sysfs, lambda: nvml, locate), runtime_dir, deadline_s)
        self.holder = Holder(self.actuator, log, self.what, self.instead, self._give_back)
        self.gpus: dict[str, H] = {}
        self.stuck = Stuck(log, self.what)

    def _give_back(self, g: H) -> str | None:
        """The GPU's original written back, verified (``Holder.give_back``); the problem when it did not stick."""
        raise NotImplementedError

    def restore(self) -> None:
        """Every original we changed back to what it was (``Holder.restore_all``); safe to call more than once."""
        self.holder.restore_all(list(self.gpus.values()))


class StoredHandback(Generic[R, L]):
    """The parts of a kind's ``give_back`` (``ActuatorKind``) that do not depend on what its records hold."""

    def __init__(self, name: str, records: Mapping[str, Callable[[Mapping[str, Any]], R]], sysfs: Sysfs,
                 load_nvml: NvmlLoader, locate: L) -> None:
        """``locate``: the daemon's amdgpu source; `gpuwatch restore`: the cards discovered at the first use."""
        self.name = name
        self.records = records
        self.sysfs = sysfs
        self.load_nvml = load_nvml
        self.locate = locate
        self._lock = threading.Lock()
        self._nvml: Any = None

    def kind(self) -> ActuatorKind[R]:
        """The actuator kind that gives its records back through this (``self`` is called per record)."""
        return ActuatorKind(self.name, self, records=self.records)

    def __call__(self, gpu_id: str, stored: Mapping[str, Any]) -> str:
        raise NotImplementedError

    def parse(self, stored: Mapping[str, Any]) -> R:
        """The record ``stored`` holds, by its ``backend`` key."""
        parse = self.records.get(str(stored.get("backend")))
        if parse is None:
            raise NotHandedBack(f"unknown {self.name} restore record {dict(stored)!r}")
        return parse(stored)

    def nvml(self, not_done: str) -> Any:
        """NVML, loaded at the first record that needs it; without it, ``not_done`` is the problem."""
        with self._lock:
            try:
                self._nvml = self._nvml or self.load_nvml()
            except Exception as exc:
                raise NotHandedBack(f"NVML unavailable, {not_done}: {exc}") from None
            if self._nvml is None:
                raise NotHandedBack(f"NVML unavailable, {not_done}: NVML is not loaded")
        return self._nvml

    @staticmethod
    def done(record: R, problem: str | None) -> str:
        """What ``record`` was handed back as, or its give-back's problem raised."""
        if problem:
            raise NotHandedBack(problem)
        return record.handed_back()
