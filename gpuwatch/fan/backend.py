"""What the controller needs from a fan backend: the FanBackend and RestoreRecord Protocols, and the
pieces every backend shares (Applied, Writer with its dry-run rule, NoFanControl).

Backends, one module per hardware interface (tests/fixtures/amdgpu/SYSFS_FACTS.md §5-6):
* pwm1.py (SI..RDNA2): hwmon ``pwm1_enable`` 1 = manual, then ``pwm1``;
* gpu_od.py (RDNA3+): ``gpu_od/fan_ctrl/fan_curve``.
A GPU with neither is monitor-only: gpu_fan.py's ``choose_backend`` raises NoFanControl saying why
and how to enable control. Each backend has a frozen RestoreRecord type: what it found before its
first write, persisted in the restore file (gpuwatch.actuation), and the one code that gives the fan
back, run by the daemon's shutdown and by `gpuwatch restore` after a crash alike (fan/restore.py).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from gpuwatch.actuation.actuator import Record
from gpuwatch.model import FanBackendName, GpuReading
from gpuwatch.sysfs import Sysfs, SysfsError

log = logging.getLogger("gpuwatch.fan")

ENABLE_HINT = (
    "fan control needs overdrive: add amdgpu.ppfeaturemask=0xfff7ffff (any mask with bit 0x4000) "
    "to the kernel command line and reboot"
)


class NoFanControl(Exception):
    """Nothing on this GPU may be driven; the message says why (the GPU is then monitor-only)."""


@dataclass
class Applied:
    """What one write did and what the hardware reports back."""

    applied_pwm: int | None = None
    readback_pwm: int | None = None
    rpm: int | None = None
    verified: bool = True
    mode_reset: bool = False
    error: str | None = None


@dataclass(frozen=True)
class Seen:
    """What this tick's reading of the GPU (gpus/amdgpu.py, a few ms before the fan's step) already read from the
    fan's own hwmon files: a backend reads one again only after it wrote this tick, or where this is None (not
    read, unreadable, or the value came from elsewhere: gpu_metrics' RPM where hwmon has no tach). Reading it
    twice a tick told nothing the first read did not; a firmware that takes the fan back after the reading is
    seen by the next tick's reading, as it was by the next read-back before."""

    pwm: int | None = None
    rpm: int | None = None
    pwm_enable: int | None = None

    @classmethod
    def of(cls, gpu: GpuReading) -> Seen:
        from_hwmon = "fan_rpm" not in dict(gpu.sources)  # sources names only what gpu_metrics filled in
        return cls(pwm=gpu.pwm, rpm=gpu.fan_rpm if from_hwmon else None, pwm_enable=gpu.pwm_enable)


NOT_SEEN = Seen()


class RestoreRecord(Record, Protocol):
    """A backend's original fan mode, read before its first write and kept in the restore file."""

    def adopt(self, stored: Mapping[str, Any]) -> RestoreRecord:
        """This record with the original mode a stored record (an earlier, killed daemon's) knows."""
        ...

    def restore(self, sysfs: Sysfs) -> str | None:
        """Give the fan back to the firmware; the problem when it did not stick. Raises SysfsError."""
        ...


class FanBackend(Protocol):
    """One GPU's fan driver, as the controller uses it: probe, take control, apply (its RestoreRecord restores)."""

    @property
    def name(self) -> FanBackendName: ...  # published as FanState.backend

    @property
    def minimum_percent(self) -> float: ...  # the firmware's lowest settable speed

    def original(self) -> RestoreRecord:
        """Read (and remember) what is there before the first write."""
        ...

    def adopt(self, stored: Mapping[str, Any]) -> None:
        """Restore what ``stored`` (the restore file's record for this GPU) says was there."""
        ...

    def take_control(self) -> None: ...

    def apply(self, percent: float, seen: Seen = NOT_SEEN) -> Applied:
        """Drive the fan at ``percent``; ``seen``: what this tick's reading read from the same files since
        the backend last wrote them (``NOT_SEEN`` on the tick it took control: every file read here)."""
        ...


def write(sysfs: Sysfs, path: str, value: str, dry_run: bool) -> None:
    """Write ``value`` to ``path``; in dry-run only log what would be written."""
    if dry_run:
        log.info("dry-run: would write %r to %s", value, path)
        return
    sysfs.write(path, value)


class Writer:
    """Writes through sysfs, or only logs them in dry-run."""

    def __init__(self, sysfs: Sysfs, dry_run: bool) -> None:
        self.sysfs = sysfs
        self.dry_run = dry_run

    def write(self, path: str, value: str) -> None:
        write(self.sysfs, path, value, self.dry_run)

    def number(self, path: str, seen: int | None = None) -> int | None:
        """``path``'s number (None: absent or unreadable); ``seen``, when given, stands for it (read this tick)."""
        if seen is not None:
            return seen
        try:
            text = self.sysfs.read(path)
            return int(text) if text else None
        except (SysfsError, ValueError):
            return None
