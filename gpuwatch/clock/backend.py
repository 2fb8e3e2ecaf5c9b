"""What the clock controller needs from a ceiling backend: the ClockBackend and ClockRecord Protocols and the
range a probe finds. Backends, one module per interface: od_table.py (amdgpu's overdrive table
``pp_od_clk_voltage``), dpm_mask.py (``power_dpm_force_performance_level=manual`` and a ``pp_dpm_sclk`` level
mask) and nvml_clock.py (NVML's locked clocks). Every write is read back, and fails as any held setting does
(actuation/setting.py); an unavailable ceiling pauses a hot card at the cap's floor, as before this rung.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from gpuwatch.actuation.actuator import Record
from gpuwatch.actuation.setting import Setting
from gpuwatch.model import ClockBackendName

# A readback this far from what was written is a verify failure (every interface speaks whole MHz).
VERIFY_TOLERANCE_MHZ = 1.0


class CeilingRefused(Exception):
    """The interface refused this ceiling as out of its range (EINVAL on ``s 1 <MHz>``): on a step down, the
    card's floor lies above it (the unprinted GfxclkFmax minimum, issue 49). Nothing was written."""


@dataclass(frozen=True)
class ClockRange:
    """What a probe found, in MHz: the ceiling in force (the card's own maximum, the one given back), the
    lowest one the interface takes, and, for an interface of discrete levels, the ceilings it can set
    (ascending; None: any whole MHz in [min_mhz, original_mhz])."""

    original_mhz: float
    min_mhz: float
    levels_mhz: tuple[float, ...] | None = None


class ClockBackend(Setting, Protocol):
    """One GPU's clock ceiling, as the controller uses it: probe, observe, write (verified), record, give back."""

    @property
    def name(self) -> ClockBackendName: ...  # published as ClockState.backend

    def probe(self) -> ClockRange:
        """What the interface offers now; raises SettingUnavailable when there is nothing to set."""
        ...

    def current_mhz(self) -> float | None:
        """The ceiling in force now, read back (None: unreadable this tick)."""
        ...

    def write(self, ceiling_mhz: float) -> float:
        """Set the ceiling and return what reads back; raises SettingUnavailable or SettingWriteError."""
        ...

    def record(self) -> ClockRecord:
        """The restore record of what the probe found (registered in clock/restore.RECORDS)."""
        ...

    def give_back(self, record: ClockRecord) -> None:
        """Put ``record``'s original back and verify it; raises SettingWriteError when it did not stick."""
        ...


class ClockRecord(Record, Protocol):
    """A ceiling backend's restore record: the original ceiling (None: the stored record has none)."""

    @property
    def original_mhz(self) -> float | None: ...
