"""The power caps as an actuator kind: their restore records and how a stored one is given back.

Before the governor first lowers a GPU's cap it records the cap it found in
``<runtime_dir>/power-restore.json`` (gpuwatch.actuation; ``{pci slot: {"backend": "hwmon", "cap_uw": ...}}``
or ``{"backend": "nvml", "limit_mw": ...}``), and removes the record once that cap is back. Giving a
record back writes the recorded cap through the same backends the daemon uses, verified by a readback:
the daemon's shutdown and `gpuwatch restore` (systemd's ExecStopPost, so after a SIGKILL, a watchdog kill or a
crash too) alike. Without a record it writes nothing: a cap gpuwatch never lowered is the user's, and the
board's default is not necessarily the original (tests/fixtures/amdgpu: 120 W set on a 304 W board).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from gpuwatch.actuation.actuator import ActuatorKind, NotHandedBack
from gpuwatch.actuation.setting import NvmlLoader, SettingUnavailable, SettingWriteError, StoredHandback
from gpuwatch.gpus.amdgpu import AmdCard, Locate, discovered_once
from gpuwatch.power.backend import VERIFY_TOLERANCE_W, CapBackend, CapRecord
from gpuwatch.power.hwmon_cap import HwmonCap, HwmonCapRestore
from gpuwatch.power.nvml_cap import NvmlCap, NvmlCapRestore
from gpuwatch.sysfs import Sysfs

NAME = "power"

# The file's "backend" key -> its record type.
RECORDS: dict[str, Callable[[Mapping[str, Any]], CapRecord]] = {
    HwmonCapRestore.backend: HwmonCapRestore.from_json,
    NvmlCapRestore.backend: NvmlCapRestore.from_json,
}


def kind(sysfs: Sysfs, load_nvml: NvmlLoader, locate: Locate | None = None) -> ActuatorKind[CapRecord]:
    """``locate`` finds a card by slot now (the daemon's amdgpu source; `gpuwatch restore`: discovered once)."""
    return CapHandback(NAME, RECORDS, sysfs, load_nvml, locate or discovered_once(sysfs)).kind()


class CapHandback(StoredHandback[CapRecord, Locate]):
    """Gives one stored cap record back (on the GPU's worker: the card list and NVML are loaded once)."""

    def __call__(self, gpu_id: str, stored: Mapping[str, Any]) -> str:
        record = self.parse(stored)
        if record.original_w is None:
            raise NotHandedBack(f"power restore record without a cap: {dict(stored)!r}")
        return self.done(record, give_back(self._backend(gpu_id, record), record.original_w))

    def _backend(self, gpu_id: str, record: CapRecord) -> CapBackend:
        if isinstance(record, HwmonCapRestore):
            return HwmonCap(self.sysfs, gpu_id, self._finder(record), check_access=False)
        return NvmlCap(self.nvml("power limit not restored"), gpu_id)

    def _finder(self, record: HwmonCapRestore) -> Locate:
        """The card by PCI slot as found now (``locate``); the recorded path when the slot is not found."""
        def locate(gpu_id: str) -> AmdCard | None:
            card = self.locate(gpu_id)
            if card is not None or record.path is None or "/" not in record.path:
                return card
            hwmon_dir = record.path.rsplit("/", 1)[0]
            return AmdCard(gpu_id=gpu_id, card="?", device_dir=hwmon_dir, hwmon_dir=hwmon_dir, device_id=None,
                           subsystem_id=None)

        return locate


def give_back(cap: CapBackend, original_w: float) -> str | None:
    """Write ``original_w`` and read it back; the problem when it did not stick."""
    try:
        back = cap.write(original_w)
    except (SettingUnavailable, SettingWriteError) as exc:
        return f"power cap not restored to {original_w:g} W: {exc}"
    if abs(back - original_w) >= VERIFY_TOLERANCE_W:
        return f"power cap reads {back:g} W after restoring {original_w:g} W"
    return None
