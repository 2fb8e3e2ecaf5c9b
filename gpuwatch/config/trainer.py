"""``[[trainer]]``: one supervised training command, its pause, restart and log settings."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator

from gpuwatch.config.base import PciSlot, Strict, distinct_slots
from gpuwatch.config.cooling import ThermalConfig
from gpuwatch.config.quick import (
    BACKOFF_INITIAL_S,
    TRAINER_GRACE_S,
    TRAINER_LOG_BACKUPS,
    TRAINER_LOG_MAX_BYTES,
    TRAINER_LOG_MIN_BYTES,
)

# Shared with [attached] (config/sections.py): a run attached from a shell is paused, held and judged hung
# as a configured trainer is.
DEBOUNCE_S = 5.0
MIN_PAUSE_S = 30.0
HANG_TIMEOUT_S = 1800.0

class BackoffConfig(Strict):
    """Crash restart delay: initial_s * 2**(crashes-1), capped at max_s, +/- jitter_ratio."""

    initial_s: float = Field(default=BACKOFF_INITIAL_S, ge=0, le=86400)
    max_s: float = Field(default=600.0, ge=0, le=86400)
    jitter_ratio: float = Field(default=0.2, ge=0, le=1)


class TrainerConfig(Strict):
    """One supervised training command (`[[trainer]]`); see docs/supervisor.md."""

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
    command: list[str] = Field(min_length=1)
    cwd: Path | None = None
    env: dict[str, str] = {}
    # This machine's name in a job that spans several (GPUWATCH_NODE; "paused by node-b: ..."); None: hostname.
    node: str | None = Field(default=None, min_length=1, max_length=64)
    user: str | None = None
    group: str | None = None
    # The GPUs its thermal limits and reset watch apply to (empty: every GPU it uses), by PCI slot in any
    # unambiguous spelling (28:00.0, 0000:28:00.0, upper case), kept as sysfs names them.
    gpus: list[PciSlot] = []
    restart_command: list[str] | None = None
    checkpoint_glob: str | None = None
    # None: use [thermal]. Limits are the pause line; resume below limit - hysteresis.
    edge_limit_c: float | None = Field(default=None, gt=0, le=150)
    junction_limit_c: float | None = Field(default=None, gt=0, le=150)
    mem_limit_c: float | None = Field(default=None, gt=0, le=150)
    hysteresis_c: float | None = Field(default=None, ge=0, le=30)
    debounce_s: float = Field(default=DEBOUNCE_S, ge=0)
    # None: a cooperative hold is unbounded (nothing is in flight); a SIGSTOP pause is bounded by the
    # job's own process-group timeout where that matters (supervise/actions.pause_limit_s).
    max_pause_s: float | None = Field(default=None, gt=0)
    # A hot card cools ~15 °C within seconds of a pause (simulator, H200 run in docs/nvidia.md), so
    # without a minimum a card that cannot hold its limit flaps between pause and resume.
    min_pause_s: float = Field(default=MIN_PAUSE_S, ge=0)
    cooperative_pause: Literal["auto", "always", "never"] = "auto"
    pause_ack_timeout_s: float = Field(default=60.0, gt=0)
    grace_s: float = Field(default=TRAINER_GRACE_S, ge=0)
    backoff: BackoffConfig = BackoffConfig()
    give_up_after_crashes: int = Field(default=5, ge=1)
    # A GPU reset of one of its GPUs ends the run (its GPU context is lost): TERM, then KILL after this.
    gpu_reset_grace_s: float = Field(default=5.0, ge=0)
    # Still there this long after SIGKILL (uninterruptible sleep in the driver): reported and left behind.
    stuck_after_s: float = Field(default=30.0, gt=0)
    stable_after_s: float = Field(default=1800.0, gt=0)
    hang_timeout_s: float | None = Field(default=HANG_TIMEOUT_S, gt=0)
    progress_file: Path | None = None
    log_is_progress: bool = True
    restart_after_emergency: bool = True
    log_dir: Path | None = None
    log_max_bytes: int = Field(default=TRAINER_LOG_MAX_BYTES, ge=TRAINER_LOG_MIN_BYTES)
    log_backups: int = Field(default=TRAINER_LOG_BACKUPS, ge=0, le=100)

    @field_validator("gpus", mode="before")
    @classmethod
    def _each_gpu_once(cls, gpus: object) -> object:
        if isinstance(gpus, list):
            distinct_slots(gpus)
        return gpus

    def thermal(self, base: ThermalConfig) -> ThermalConfig:
        """The global thermal limits with this trainer's overrides applied."""
        keys = ("edge_limit_c", "junction_limit_c", "mem_limit_c", "hysteresis_c")
        update = {key: getattr(self, key) for key in keys if getattr(self, key) is not None}
        return base.model_copy(update=update)
