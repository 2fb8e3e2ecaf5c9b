"""One GPU's power controller state across ticks and the law's inputs from it."""

from __future__ import annotations

from dataclasses import dataclass, field

from gpuwatch.actuation.setting import Held
from gpuwatch.config.cooling import ThermalConfig
from gpuwatch.limits import headroom_c
from gpuwatch.model import FanState, GpuReading, PowerMode
from gpuwatch.power.backend import CapBackend
from gpuwatch.power.governor import GovernorInputs, GovernorParams, GovernorState
from gpuwatch.power.rules import fan_can_rise


@dataclass(kw_only=True)
class GpuCap(Held):
    """Controller state of one GPU across ticks (watts: ``written``, ``target``)."""

    params: GovernorParams
    mode: PowerMode  # OFF, DRY_RUN or IDLE as configured; UNAVAILABLE once given up
    backend: CapBackend | None = None
    original_w: float | None = None
    default_w: float | None = None
    min_w: float | None = None
    floor_w: float | None = None
    state: GovernorState = field(default_factory=GovernorState)
    dry_run_cap_w: float | None = None  # what dry-run would have in force
    capped_s: float = 0.0

    def unavailable(self) -> None:
        self.mode = PowerMode.UNAVAILABLE

    def released(self, by_restore: bool) -> None:
        self.state = GovernorState()

    @property
    def governable(self) -> bool:
        return self.mode is not PowerMode.UNAVAILABLE and self.backend is not None and self.original_w is not None

    def inputs(self, gpu: GpuReading, fan: FanState | None, now: float, thermals: list[ThermalConfig],
               observed_w: float) -> GovernorInputs:
        """The law's inputs this tick (dry-run: the cap it would have in force)."""
        assert self.original_w is not None and self.default_w is not None and self.floor_w is not None
        in_force = observed_w
        if self.mode is PowerMode.DRY_RUN and self.dry_run_cap_w is not None:
            in_force = self.dry_run_cap_w
        return GovernorInputs(
            now=now, headroom_c=headroom_c(gpu, thermals), fan_can_rise=fan_can_rise(fan), power_w=gpu.power_w,
            cap_w=in_force, original_cap_w=self.original_w, default_cap_w=self.default_w, floor_cap_w=self.floor_w)

