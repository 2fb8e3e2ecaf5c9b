"""What the power controller needs from a cap backend: the CapBackend Protocol, the range it probes,
and its two kinds of failure. Backends, one module per interface: hwmon_cap.py (amdgpu ``power1_cap``)
and nvml_cap.py (NVML's power management limit).

Every write is read back (a firmware may accept a value and keep the old one). A failure that will not
go away (no permission, a value the driver refuses, no cap at all) is ``CapUnavailable``: the governor
gives up on that GPU, says why once, and the supervisor pauses as it would without a governor. Anything
else (EIO, a GPU mid-reset) is ``CapWriteError`` and counted; a few in a row make it unavailable too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from gpuwatch.actuation import Record
from gpuwatch.model import GpuReading, PowerCapBackendName

# A readback this far from what was written is a verify failure (both interfaces report whole watts
# or finer; the kernel truncates microwatts to whole watts).
VERIFY_TOLERANCE_W = 1.0


class CapUnavailable(Exception):
    """This GPU's cap cannot be governed; the message says why, for the log, status and metrics."""


class CapWriteError(Exception):
    """One write or readback failed; it may work on the next tick."""


@dataclass(frozen=True)
class CapRange:
    """The cap found at start and what the board allows, in watts (None: not reported)."""

    cap_w: float
    min_w: float | None
    max_w: float | None
    default_w: float | None


class CapBackend(Protocol):
    """One GPU's power cap, as the controller uses it: probe, observe, write (verified), record."""

    @property
    def name(self) -> PowerCapBackendName: ...  # published as PowerState.backend

    @property
    def cap_in_reading(self) -> bool: ...  # current_w comes from the tick's reading (no I/O)

    def probe(self) -> CapRange:
        """The cap and its range now; raises CapUnavailable when there is nothing to govern."""
        ...

    def current_w(self, gpu: GpuReading) -> float | None:
        """The cap in force (the limit that was set), from this tick's reading where it has it."""
        ...

    def write(self, cap_w: float) -> float:
        """Set the cap and return what reads back, in watts; raises CapUnavailable or CapWriteError."""
        ...

    def record(self, original_w: float) -> CapRecord:
        """The restore record that gives ``original_w`` back (registered in power/restore.RECORDS)."""
        ...


class CapRecord(Record, Protocol):
    """A cap backend's restore record: the original cap, in watts (None: the stored record has none)."""

    @property
    def original_w(self) -> float | None: ...
