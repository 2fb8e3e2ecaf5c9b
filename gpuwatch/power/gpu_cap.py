"""One GPU's power controller state across ticks, the law's inputs from it, and whether its next step touches
the hardware.

``touches_hardware`` lets the controller run a step that only decides on the loop (the common tick: the cap
in force comes with the reading, the law writes nothing) and hand to the GPU's worker, within the deadline,
only the steps that may probe, write, give back or ask NVML. It must never say no to a step that does I/O
(a wrong yes costs one hand-off, a wrong no an unbounded write): every unusual state says yes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gpuwatch.config.cooling import ThermalConfig
from gpuwatch.model import FanState, GpuReading, PowerMode
from gpuwatch.power.backend import VERIFY_TOLERANCE_W, CapBackend
from gpuwatch.power.governor import Decision, GovernorInputs, GovernorParams, GovernorState, decide
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
    # The law's last answer and what it was asked: touches_hardware and the step ask it the same question
    # in one tick, and it answers once.
    decided: tuple[GovernorState, GovernorInputs, Decision] | None = field(default=None, repr=False)

    @property
    def governable(self) -> bool:
        return self.mode is not PowerMode.UNAVAILABLE and self.backend is not None and self.original_w is not None

    def decide(self, inputs: GovernorInputs) -> Decision:
        """``governor.decide`` for this GPU's state and ``inputs`` (pure: the same question, the same answer)."""
        if self.decided is None or self.decided[:2] != (self.state, inputs):
            self.decided = (self.state, inputs, decide(self.params, self.state, inputs))
        return self.decided[2]

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


def touches_hardware(g: GpuCap, gpu: GpuReading, fan: FanState | None, now: float,
                     thermals: list[ThermalConfig]) -> bool:
    """Whether this tick's step for ``g`` may do I/O (controller.py ``_tick_one``): its first probe, giving a
    cap back, NVML's limit, a cap that moved under us (a verify failure may give up and give back; a user's
    new cap), or a write the law decides (the law is pure: asking it here changes nothing, and the step
    reuses its answer: GpuCap.decide)."""
    if g.mode is PowerMode.UNAVAILABLE or not gpu.up or gpu.suspended:
        return False
    if not g.probed:
        return g.backend is not None
    if g.mode is PowerMode.OFF:
        return g.holding
    if not g.governable or g.backend is None:
        return False
    if not g.backend.cap_in_reading:
        return True
    observed = g.backend.current_w(gpu)
    if observed is None:
        return False
    assert g.original_w is not None
    if g.written_w is not None and abs(observed - g.written_w) >= VERIFY_TOLERANCE_W:
        return True
    if not g.holding and g.written_w is None and abs(observed - g.original_w) >= VERIFY_TOLERANCE_W:
        return True
    if g.mode is PowerMode.DRY_RUN:
        return False  # dry-run writes nothing
    return g.decide(g.inputs(gpu, fan, now, thermals, observed)).write
