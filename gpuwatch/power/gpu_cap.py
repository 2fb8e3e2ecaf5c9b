"""One GPU's power controller state across ticks and the law's inputs from it."""

from __future__ import annotations

from dataclasses import dataclass, field

from gpuwatch.config.cooling import ThermalConfig
from gpuwatch.model import FanState, GpuReading, PowerMode
from gpuwatch.power.backend import CapBackend
from gpuwatch.power.governor import GovernorInputs, GovernorParams, GovernorState
from gpuwatch.power.rules import fan_can_rise, headroom_c


@dataclass
class GpuCap:
    """Controller state of one GPU across ticks."""

    gpu_id: str
    params: GovernorParams
    mode: PowerMode  # OFF, DRY_RUN or IDLE as configured; UNAVAILABLE once given up
    backend: CapBackend | None = None
    probed: bool = False
    reason: str | None = None
    original_w: float | None = None
    default_w: float | None = None
    min_w: float | None = None
    floor_w: float | None = None
    state: GovernorState = field(default_factory=GovernorState)
    holding: bool = False  # a record is in the restore file: the original must go back
    written_w: float | None = None  # what we last wrote and expect in force
    dry_run_cap_w: float | None = None  # what dry-run would have in force
    target_w: float | None = None
    pause_allowed: bool = True
    failures: int = 0  # consecutive write or verify failures
    write_failed: bool = False  # the last write failed: the old cap read back does not end the run of failures
    writes_total: int = 0
    write_errors_total: int = 0
    capped_s: float = 0.0
    last_now: float | None = None

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

