"""What the power caps' and the clock ceilings' kinds share to give a stored record back (their restore.py keep
what differs: the records, the backends, the verified ``give_back``): the record parsed by its ``backend`` key,
NVML and the card list loaded once for all GPUs (``Actuator.restore_all`` runs them at once), a problem raised.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any, Generic, TypeVar

from gpuwatch.actuation import NotHandedBack, Record
from gpuwatch.gpus.amdgpu import AmdCard, discover
from gpuwatch.sysfs import Sysfs

NvmlLoader = Callable[[], Any]  # an initialised pynvml module (None: the daemon loaded none); raises when there is none
Locate = Callable[[str], AmdCard | None]  # a card by PCI slot, where it is now
R = TypeVar("R", bound=Record)


class StoredHandback(Generic[R]):
    """The parts of a kind's ``give_back`` (``ActuatorKind``) that do not depend on what its records hold."""

    def __init__(self, name: str, records: Mapping[str, Callable[[Mapping[str, Any]], R]], sysfs: Sysfs,
                 load_nvml: NvmlLoader, locate: Locate | None) -> None:
        """``locate``: the daemon's amdgpu source; None (`gpuwatch restore`): the cards discovered once."""
        self.name = name
        self.records = records
        self.sysfs = sysfs
        self.load_nvml = load_nvml
        self.locate = locate
        self._lock = threading.Lock()
        self._nvml: Any = None

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

    def cards(self) -> Locate:
        """Where each card is now (its hwmon index may have changed since the record was written)."""
        with self._lock:
            if self.locate is None:
                cards = {card.gpu_id: card for card in discover(self.sysfs).cards}
                self.locate = cards.get
            return self.locate

    @staticmethod
    def done(record: R, problem: str | None) -> str:
        """What ``record`` was handed back as, or its give-back's problem raised."""
        if problem:
            raise NotHandedBack(problem)
        return record.handed_back()
