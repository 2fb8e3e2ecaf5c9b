"""What the clock controller needs from a ceiling backend: the ClockBackend and ClockRecord Protocols, the
range a probe finds, and the two kinds of failure. Backends, one module per interface: od_table.py (amdgpu's
overdrive table ``pp_od_clk_voltage``), dpm_mask.py (``power_dpm_force_performance_level=manual`` and a
``pp_dpm_sclk`` level mask) and nvml_clock.py (NVML's locked clocks).

Every write is read back. A failure that will not go away (no permission, a value the driver refuses, no
interface) is ``ClockUnavailable``: the rung gives up on that GPU, says why once, and the supervisor pauses
at the cap's floor as it did before this rung existed. Anything else (EIO, a GPU mid-reset) is
``ClockWriteError`` and counted; a few in a row make it unavailable too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from gpuwatch.actuation import Record
from gpuwatch.model import ClockBackendName

# A readback this far from what was written is a verify failure (every interface speaks whole MHz).
VERIFY_TOLERANCE_MHZ = 1.0


class ClockUnavailable(Exception):
    """This GPU's ceiling cannot be set; the message says why, for the log, status and metrics."""


class ClockWriteError(Exception):
    """One write or readback failed; it may work on the next tick."""


@dataclass(frozen=True)
class ClockRange:
    """What a probe found, in MHz: the ceiling in force (the card's own maximum, the one given back), the
    lowest one the interface takes, and, for an interface of discrete levels, the ceilings it can set
    (ascending; None: any whole MHz in [min_mhz, original_mhz])."""

    original_mhz: float
    min_mhz: float
    levels_mhz: tuple[float, ...] | None = None


class ClockBackend(Protocol):
    """One GPU's clock ceiling, as the controller uses it: probe, observe, write (verified), record, give back."""

    @property
    def name(self) -> ClockBackendName: ...  # published as ClockState.backend

    def probe(self) -> ClockRange:
        """What the interface offers now; raises ClockUnavailable when there is nothing to set."""
        ...

    def current_mhz(self) -> float | None:
        """The ceiling in force now, read back (None: unreadable this tick)."""
        ...

    def write(self, ceiling_mhz: float) -> float:
        """Set the ceiling and return what reads back; raises ClockUnavailable or ClockWriteError."""
        ...

    def record(self) -> ClockRecord:
        """The restore record of what the probe found (registered in clock/restore.RECORDS)."""
        ...

    def give_back(self, record: ClockRecord) -> None:
        """Put ``record``'s original back and verify it; raises ClockWriteError when it did not stick."""
        ...


class ClockRecord(Record, Protocol):
    """A ceiling backend's restore record: the original ceiling (None: the stored record has none)."""

    @property
    def original_mhz(self) -> float | None: ...
