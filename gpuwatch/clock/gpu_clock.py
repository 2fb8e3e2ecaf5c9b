"""One GPU's clock controller state across ticks, the rule that says the rungs below have nothing left, and the
probe's order of the interfaces (the overdrive table, else the level mask).

``GpuClock.decide`` asks the pure law once per tick: the controller asks it on the loop to know whether the
step touches the hardware (a write), and the step asks it again on the GPU's worker and gets the same answer.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gpuwatch.clock.backend import ClockBackend, ClockRange, ClockUnavailable
from gpuwatch.clock.dpm_mask import DpmMaskClock
from gpuwatch.clock.law import ClockInputs, ClockLawState, ClockParams, Decision, decide
from gpuwatch.clock.od_table import OdTableClock
from gpuwatch.handback import Locate
from gpuwatch.model import ClockMode, FanState, GpuReading, PowerMode, PowerState
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
    decided: tuple[ClockLawState, ClockInputs, Decision] | None = field(default=None, repr=False)

    @property
    def governable(self) -> bool:
        return self.mode is not ClockMode.UNAVAILABLE and self.backend is not None and len(self.ceilings_mhz) > 1

    def decide(self, params: ClockParams, inputs: ClockInputs) -> Decision:
        """The law for this state and ``inputs``, asked once per tick (the loop and the worker ask alike)."""
        if self.decided is None or self.decided[:2] != (self.law, inputs):
            self.decided = (self.law, inputs, decide(params, self.law, inputs))
        return self.decided[2]


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


def touches_hardware(g: GpuClock, gpu: GpuReading, params: ClockParams, now: float, headroom: float | None,
                     exhausted: bool) -> bool:
    """Whether this tick's step may do I/O: a probe, a readback of a ceiling we hold, a give-back, a write."""
    if g.mode is ClockMode.UNAVAILABLE or not gpu.up or gpu.suspended:
        return False
    if not g.probed:
        return g.backend is not None
    if g.holding:
        return True
    if g.mode is ClockMode.OFF or not g.governable or g.mode is ClockMode.DRY_RUN:
        return False
    return g.decide(params, ClockInputs(now, headroom, exhausted, g.ceilings_mhz)).write
