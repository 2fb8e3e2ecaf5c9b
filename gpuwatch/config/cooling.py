"""``[thermal]``, ``[fan]`` and ``[power]``: the limits, the fan curve and the power-cap governor, with their
per-GPU overrides by PCI slot. Every default of these lives here (the default curve among them)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import Field, field_validator, model_validator

from gpuwatch.config.base import PciSlot, Strict, distinct_slots


class ThermalConfig(Strict):
    """Thermal limits shared by `gpuwatch status` (exit code 1) and the supervisor's pause policy.

    A limit left unset is derived from the card's own crit temperature (junction crit - margin,
    mem crit - margin); edge has a fixed default because its crit is often far above a sane limit.
    """

    edge_limit_c: float | None = Field(default=90.0, gt=0, le=150)
    junction_limit_c: float | None = Field(default=None, gt=0, le=150)
    mem_limit_c: float | None = Field(default=None, gt=0, le=150)
    junction_crit_margin_c: float = Field(default=10.0, ge=0, le=50)
    mem_crit_margin_c: float = Field(default=5.0, ge=0, le=50)
    hysteresis_c: float = Field(default=5.0, ge=0, le=30)


Point = tuple[float, float]  # (temp_c, speed_percent)

SensorChoice = Literal["auto", "junction", "edge", "mem"]  # the sensor a fan curve follows

# The curve the seeds ran by hand: below 65 °C 50 %, then 60-70, 70-85, 85-100, >= 95 °C 100 %.
# The 64 °C point makes "below 65 -> 50 %" a 1 °C ramp, since temperatures must strictly increase.
DEFAULT_CURVE: tuple[Point, ...] = ((64.0, 50.0), (65.0, 60.0), (75.0, 70.0), (85.0, 85.0), (95.0, 100.0))


def validate_points(points: Sequence[Sequence[float]]) -> list[str]:
    """Human-readable problems with a curve; empty when it is usable."""
    problems = []
    if not points:
        return ["needs at least one point"]
    for i, point in enumerate(points):
        if len(point) != 2:
            problems.append(f"point {i} {list(point)!r} must be [temp_c, speed_percent]")
    if problems:
        return problems
    for i, (temp_c, speed) in enumerate(points):
        if not 0 <= speed <= 100:
            problems.append(f"point {i} speed {speed} must be within 0..100 %")
        if not -50 <= temp_c <= 150:
            problems.append(f"point {i} temperature {temp_c} must be within -50..150 °C")
        if i:
            prev_t, prev_s = points[i - 1]
            if temp_c <= prev_t:
                problems.append(f"point {i} temperature {temp_c} must be above the previous point's {prev_t}")
            if speed < prev_s:
                problems.append(f"point {i} speed {speed} must not be below the previous point's {prev_s}")
    return problems


def _check_curve(points: list[list[float]] | None) -> list[list[float]] | None:
    if points is not None:
        problems = validate_points(points)
        if problems:
            raise ValueError("invalid fan curve: " + "; ".join(problems))
    return points


class FanCurveSettings(Strict):
    """The per-GPU tunables; every key may be overridden under ``[fan.gpus."<pci slot>"]``."""

    sensor: SensorChoice | None = None
    curve: list[list[float]] | None = None
    floor_percent: float | None = Field(default=None, ge=0, le=100)
    dead_band_c: float | None = Field(default=None, ge=0, le=30)
    spindown_delay_s: float | None = Field(default=None, ge=0, le=3600)
    slew_down_percent_per_s: float | None = Field(default=None, gt=0, le=100)

    @field_validator("curve")
    @classmethod
    def _curve_ok(cls, points: list[list[float]] | None) -> list[list[float]] | None:
        return _check_curve(points)


class FanConfig(Strict):
    """Fan control: the curve, its hysteresis, failsafe and per-GPU overrides (docs/fan-control.md)."""

    mode: Literal["curve", "dry-run", "monitor-only", "off"] = "curve"
    sensor: SensorChoice = "auto"
    curve: list[list[float]] = Field(default_factory=lambda: [list(p) for p in DEFAULT_CURVE])
    floor_percent: float = Field(default=50.0, ge=0, le=100)
    dead_band_c: float = Field(default=4.0, ge=0, le=30)
    spindown_delay_s: float = Field(default=10.0, ge=0, le=3600)
    slew_down_percent_per_s: float | None = Field(default=None, gt=0, le=100)
    failsafe_after_ticks: int = Field(default=3, ge=1, le=3600)
    frozen_after_ticks: int = Field(default=300, ge=0, le=86400)
    stall_after_ticks: int = Field(default=5, ge=1, le=3600)
    verify_tolerance_percent: float = Field(default=5.0, ge=0, le=100)
    gpus: dict[PciSlot, FanCurveSettings] = Field(default_factory=dict)

    @field_validator("curve")
    @classmethod
    def _curve_ok(cls, points: list[list[float]] | None) -> list[list[float]] | None:
        return _check_curve(points)

    @field_validator("gpus", mode="before")
    @classmethod
    def _one_table_per_gpu(cls, gpus: object) -> object:
        if isinstance(gpus, dict):
            distinct_slots(gpus)
        return gpus

    def for_gpu(self, gpu_id: str) -> FanConfig:
        """This config with the GPU's overrides applied (validated on their own when loaded)."""
        override = self.gpus.get(gpu_id)
        if override is None:
            return self
        return self.model_copy(update=override.model_dump(exclude_none=True))


PowerConfigMode = Literal["govern", "dry-run", "off"]  # what the power-cap governor may do
ClockConfigMode = Literal["govern", "dry-run", "off"]  # what the clock rung may do (docs/power.md)


class PowerCapSettings(Strict):
    """The per-GPU tunables; every key may be overridden under ``[power.gpus."<pci slot>"]``."""

    mode: PowerConfigMode | None = None
    engage_margin_c: float | None = Field(default=None, gt=0, le=30)
    hold_margin_c: float | None = Field(default=None, ge=0.5, le=20)
    floor_percent: float | None = Field(default=None, ge=20, le=100)
    min_step_percent: float | None = Field(default=None, gt=0, le=20)
    reverse_step_percent: float | None = Field(default=None, gt=0, le=40)
    raise_percent_per_s: float | None = Field(default=None, gt=0, le=100)
    release_after_s: float | None = Field(default=None, ge=0, le=86400)
    idle_restore_after_s: float | None = Field(default=None, ge=0, le=86400)
    clock: ClockConfigMode | None = None
    clock_floor_percent: float | None = Field(default=None, ge=20, le=100)


class PowerConfig(Strict):
    """The power-cap governor between the fan curve and the pause (docs/power.md).

    Margins are below the pause limit of the hottest sensor (the same limits as [thermal] and the
    trainers'); power settings are percent of the board's default cap (``power1_cap_default``), so one
    set fits a 95 W laptop part and a 330 W board.
    """

    # govern: lower the cap when the fan cannot rise and the card nears its pause limit (default: it acts
    # only where the alternative is a pause, stays inside the vendor's range and is restored on every
    # exit path); dry-run: log what would be written; off: never touch the cap, pause as before.
    mode: PowerConfigMode = "govern"
    # Take over when the filtered headroom to the pause limit is at most this (and the fan is at its top).
    engage_margin_c: float = Field(default=8.0, gt=0, le=30)
    # Hold the hottest sensor this far below its pause limit (readings flicker by 1 °C).
    hold_margin_c: float = Field(default=2.0, ge=0.5, le=20)
    # Never below this share of the default cap (nor under power1_cap_min): below ~60 % the clock
    # falls linearly with power and a pause becomes the better trade.
    floor_percent: float = Field(default=60.0, ge=20, le=100)
    # Write only when the cap moves this much (percent of the default cap)...
    min_step_percent: float = Field(default=2.0, gt=0, le=20)
    # ...and this much against the direction of the previous write (no hunting on sensor noise).
    reverse_step_percent: float = Field(default=4.0, gt=0, le=40)
    # Raising is never urgent: at most this many percent of the default cap per second.
    raise_percent_per_s: float = Field(default=0.7, gt=0, le=100)
    # Back to idle once the cap has been at its original value this long with the card cool.
    release_after_s: float = Field(default=300.0, ge=0, le=86400)
    # The cap has not limited the card this long (the job ended): write the original back, idle.
    idle_restore_after_s: float = Field(default=600.0, ge=0, le=86400)
    # The supervisor's safety net: while the governor holds a hot GPU above its floor cap, a trainer is
    # paused only after the limit has been exceeded this long (a firmware that ignores the cap).
    pause_backstop_s: float = Field(default=60.0, ge=0, le=3600)
    # The clock rung above the cap (fan -> cap -> clock -> pause): govern lowers the shader clock's ceiling
    # once the cap is at its floor and the card is still over its set point (default: like the cap, it acts
    # only where the alternative is a pause and is restored on every exit path); dry-run logs; off: never.
    clock: ClockConfigMode = "govern"
    # Never below this share of the card's maximum shader clock: there the ceiling costs as much speed as
    # the pause cycles it replaces (docs/power.md).
    clock_floor_percent: float = Field(default=60.0, ge=20, le=100)
    gpus: dict[PciSlot, PowerCapSettings] = Field(default_factory=dict)

    @field_validator("gpus", mode="before")
    @classmethod
    def _one_table_per_gpu(cls, gpus: object) -> object:
        if isinstance(gpus, dict):
            distinct_slots(gpus)
        return gpus

    @model_validator(mode="after")
    def _margins_and_steps_agree(self) -> PowerConfig:
        for where, settings in [("power", self)] + [(f"power.gpus.{gpu}", self.for_gpu(gpu)) for gpu in self.gpus]:
            if settings.hold_margin_c >= settings.engage_margin_c:
                raise ValueError(f"{where}: hold_margin_c {settings.hold_margin_c:g} must be below "
                                 f"engage_margin_c {settings.engage_margin_c:g}")
            if settings.reverse_step_percent < settings.min_step_percent:
                raise ValueError(f"{where}: reverse_step_percent {settings.reverse_step_percent:g} must not be "
                                 f"below min_step_percent {settings.min_step_percent:g}")
        return self

    def for_gpu(self, gpu_id: str) -> PowerConfig:
        """This config with the GPU's overrides applied."""
        override = self.gpus.get(gpu_id)
        if override is None:
            return self
        return self.model_copy(update=override.model_dump(exclude_none=True))
