"""One GPU's clock controller state across ticks, the rule that says the rungs below have nothing left, and the
probe's order of the interfaces (the overdrive table, else the level mask)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from gpuwatch.actuation.setting import Held, SettingUnavailable
from gpuwatch.clock.backend import ClockBackend, ClockRange
from gpuwatch.clock.dpm_mask import DpmMaskClock
from gpuwatch.clock.law import ClockLawState
from gpuwatch.clock.od_table import OdTableClock
from gpuwatch.gpus.amdgpu import Locate
from gpuwatch.model import ClockMode, FanState, PowerMode, PowerState
from gpuwatch.sysfs import Sysfs

_EXHAUSTED = {PowerMode.FLOOR, PowerMode.UNAVAILABLE, PowerMode.OFF}


@dataclass(kw_only=True)
class GpuClock(Held):
    """Controller state of one GPU across ticks (MHz: ``written``, ``target``)."""

    mode: ClockMode  # OFF, DRY_RUN or IDLE as configured; UNAVAILABLE once given up
    backend: ClockBackend | None = None
    found: ClockRange | None = None
    ceilings_mhz: tuple[float, ...] = ()
    law: ClockLawState = field(default_factory=ClockLawState)
    resets_total: int = 0
    limited_s: float = 0.0
    # The lowest ceiling the card took; it refused the step under it (EINVAL): its floor for this run.
    card_floor_mhz: float | None = None
    # The ceiling's check by the clock the card runs at (in_force.py): when it was last committed, whether
    # it was committed again for running above it, and whether it is reported as not taking effect.
    committed_at: float | None = None
    recommitted: bool = False
    not_in_force: bool = False

    @property
    def governable(self) -> bool:
        return self.mode is not ClockMode.UNAVAILABLE and self.backend is not None and len(self.ceilings_mhz) > 1

    def unavailable(self) -> None:
        self.mode = ClockMode.UNAVAILABLE

    def released(self, by_restore: bool) -> None:
        self.law = ClockLawState() if by_restore else replace(self.law, index=None)
        self.committed_at, self.recommitted, self.not_in_force = None, False, False


def cap_exhausted(power: PowerState | None, fan: FanState | None) -> bool:
    """The rungs below have nothing left: the fan cannot rise and the cap is at its floor (or not governed)."""
    fan_done = fan is None or not fan.can_rise
    return fan_done and (power is None or power.mode in _EXHAUSTED)


def probe_backend(backend: ClockBackend, sysfs: Sysfs, locate: Locate,
                  check_access: bool) -> tuple[ClockBackend, ClockRange]:
    """What the card offers, probed in order, never guessed: the overdrive table, else the level mask. Raises
    SettingUnavailable with both reasons, or SettingWriteError (a read that may work next tick)."""
    try:
        return backend, backend.probe()
    except SettingUnavailable as od_problem:
        if not isinstance(backend, OdTableClock):
            raise
        mask = DpmMaskClock(sysfs, backend.gpu_id, locate, check_access)
        try:
            return mask, mask.probe()
        except SettingUnavailable as mask_problem:
            raise SettingUnavailable(f"{od_problem}; {mask_problem}") from None

