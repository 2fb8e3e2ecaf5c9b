"""One GPU's clock controller state across ticks, the rule that says the rungs below have nothing left, and the
probe's order of the interfaces (the overdrive table, else the level mask)."""

from __future__ import annotations

from dataclasses import dataclass, field

from gpuwatch.clock.backend import ClockBackend, ClockRange, ClockUnavailable
from gpuwatch.clock.dpm_mask import DpmMaskClock
from gpuwatch.clock.law import ClockLawState
from gpuwatch.clock.od_table import OdTableClock
from gpuwatch.handback import Locate
from gpuwatch.model import ClockMode, FanState, PowerMode, PowerState
from gpuwatch.sysfs import Sysfs

_EXHAUSTED = {PowerMode.FLOOR, PowerMode.UNAVAILABLE, PowerMode.OFF}


@dataclass
class GpuClock:
    """Controller state of one GPU across ticks."""

    gpu_id: str
    mode: ClockMode  # OFF, DRY_RUN or IDLE as configured; UNAVAILABLE once given up
    backend: ClockBackend | None = None
    probed: bool = False
    reason: str | None = None
    found: ClockRange | None = None
    ceilings_mhz: tuple[float, ...] = ()
    law: ClockLawState = field(default_factory=ClockLawState)
    holding: bool = False  # a record is in the restore file: the original must go back
    written_mhz: float | None = None  # the ceiling we last wrote and expect in force
    target_mhz: float | None = None
    pause_allowed: bool = True
    failures: int = 0
    writes_total: int = 0
    write_errors_total: int = 0
    resets_total: int = 0
    limited_s: float = 0.0
    last_now: float | None = None

    @property
    def governable(self) -> bool:
        return self.mode is not ClockMode.UNAVAILABLE and self.backend is not None and len(self.ceilings_mhz) > 1


def cap_exhausted(power: PowerState | None, fan: FanState | None) -> bool:
    """The rungs below have nothing left: the fan cannot rise and the cap is at its floor (or not governed)."""
    fan_done = fan is None or not fan.can_rise
    return fan_done and (power is None or power.mode in _EXHAUSTED)


def probe_backend(backend: ClockBackend, sysfs: Sysfs, locate: Locate,
                  check_access: bool) -> tuple[ClockBackend, ClockRange]:
    """What the card offers, probed in order, never guessed: the overdrive table, else the level mask. Raises
    ClockUnavailable with both reasons, or ClockWriteError (a read that may work next tick)."""
    try:
        return backend, backend.probe()
    except ClockUnavailable as od_problem:
        if not isinstance(backend, OdTableClock):
            raise
        mask = DpmMaskClock(sysfs, backend.gpu_id, locate, check_access)
        try:
            return mask, mask.probe()
        except ClockUnavailable as mask_problem:
            raise ClockUnavailable(f"{od_problem}; {mask_problem}") from None

