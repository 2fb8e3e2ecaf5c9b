"""What the power controller needs from a cap backend: the CapBackend and CapRecord Protocols and the range
it probes. Backends, one module per interface: hwmon_cap.py (amdgpu ``power1_cap``) and nvml_cap.py (NVML's
power management limit). Every write is read back, and fails as any held setting does
(actuation/setting.py: ``SettingUnavailable`` gives the GPU up, ``SettingWriteError`` is counted).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from gpuwatch.actuation.actuator import Record
from gpuwatch.actuation.setting import Setting
from gpuwatch.model import GpuReading, PowerCapBackendName

# A readback this far from what was written is a verify failure (both interfaces report whole watts
# or finer; the kernel truncates microwatts to whole watts).
VERIFY_TOLERANCE_W = 1.0


@dataclass(frozen=True)
class CapRange:
    """The cap found at start and what the board allows, in watts (None: not reported)."""

    cap_w: float
    min_w: float | None
    max_w: float | None
    default_w: float | None


class CapBackend(Setting, Protocol):
    """One GPU's power cap, as the controller uses it: probe, observe, write (verified), record."""

    @property
    def name(self) -> PowerCapBackendName: ...  # published as PowerState.backend

    @property
    def cap_in_reading(self) -> bool: ...  # current_w comes from the tick's reading (no I/O)

    def probe(self) -> CapRange:
        """The cap and its range now; raises SettingUnavailable when there is nothing to govern."""
        ...

    def current_w(self, gpu: GpuReading) -> float | None:
        """The cap in force (the limit that was set), from this tick's reading where it has it."""
        ...

    def write(self, cap_w: float) -> float:
        """Set the cap and return what reads back, in watts; raises SettingUnavailable or SettingWriteError."""
        ...

    def record(self, original_w: float) -> CapRecord:
        """The restore record that gives ``original_w`` back (registered in power/restore.RECORDS)."""
        ...


class CapRecord(Record, Protocol):
    """A cap backend's restore record: the original cap, in watts (None: the stored record has none)."""

    @property
    def original_w(self) -> float | None: ...
