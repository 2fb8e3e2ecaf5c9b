"""The clock ceilings as an actuator kind: their restore records and how a stored one is given back.

Before the clock rung first lowers a GPU's ceiling it records what it found in
``<runtime_dir>/clock-restore.json`` (gpuwatch.actuation; ``{pci slot: {"backend": "od_table",
"sclk_max_mhz": ...}}``, ``{"backend": "dpm_mask", "level": "auto", ...}`` or ``{"backend": "nvml", ...}``) and
removes the record once the original is back. Giving a record back writes the original through the same
backends the daemon uses, verified by a readback: the daemon's shutdown and `gpuwatch restore` (systemd's
ExecStopPost, so after a SIGKILL, a watchdog kill or a crash too) alike. Without a record it writes nothing:
a ceiling gpuwatch never set is the user's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from gpuwatch.actuation.actuator import ActuatorKind, NotHandedBack
from gpuwatch.actuation.setting import NvmlLoader, SettingUnavailable, SettingWriteError, StoredHandback
from gpuwatch.clock.backend import ClockBackend, ClockRecord
from gpuwatch.clock.dpm_mask import DpmMaskClock, DpmMaskRestore
from gpuwatch.clock.nvml_clock import NvmlClock, NvmlClockRestore
from gpuwatch.clock.od_table import OdTableClock, OdTableRestore
from gpuwatch.gpus.amdgpu import Locate, discovered_once
from gpuwatch.sysfs import Sysfs

NAME = "clock"

# The file's "backend" key -> its record type.
RECORDS: dict[str, Callable[[Mapping[str, Any]], ClockRecord]] = {
    OdTableRestore.backend: OdTableRestore.from_json,
    DpmMaskRestore.backend: DpmMaskRestore.from_json,
    NvmlClockRestore.backend: NvmlClockRestore.from_json,
}


def kind(sysfs: Sysfs, load_nvml: NvmlLoader, locate: Locate | None = None) -> ActuatorKind[ClockRecord]:
    """The clocks' kind; ``locate`` as for the caps (power/restore.kind)."""
    return ClockHandback(NAME, RECORDS, sysfs, load_nvml, locate or discovered_once(sysfs)).kind()


class ClockHandback(StoredHandback[ClockRecord, Locate]):
    """Gives one stored ceiling record back (on the GPU's worker)."""

    def __call__(self, gpu_id: str, stored: Mapping[str, Any]) -> str:
        record = self.parse(stored)
        if record.original_mhz is None:
            raise NotHandedBack(f"clock restore record without an original: {dict(stored)!r}")
        return self.done(record, give_back(self._backend(gpu_id, record), record))

    def _backend(self, gpu_id: str, record: ClockRecord) -> ClockBackend:
        if isinstance(record, NvmlClockRestore):
            return NvmlClock(self.nvml("clocks not unlocked"), gpu_id)
        backend = DpmMaskClock if isinstance(record, DpmMaskRestore) else OdTableClock
        return backend(self.sysfs, gpu_id, self.locate, check_access=False)


def give_back(backend: ClockBackend, record: ClockRecord) -> str | None:
    """Put the recorded original back, verified; the problem when it did not stick."""
    try:
        backend.give_back(record)
    except (SettingUnavailable, SettingWriteError) as exc:
        return f"clock ceiling not restored ({record.backend}, original {record.original_mhz:g} MHz): {exc}"
    return None
