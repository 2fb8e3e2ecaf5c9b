"""Fan effects: take control of one GPU's fan, write a speed, verify it, and give it back.

Backends (tests/fixtures/amdgpu/SYSFS_FACTS.md §5-6):
* ``Pwm1Backend`` (SI..RDNA2): ``pwm1_enable`` 1 = manual, then ``pwm1`` 0..255; 2 = automatic.
  0 means "no control" = full speed on SMU7/Vega/SMU11 (K-FANNONE), so it is never written.
* ``GpuOdBackend`` (RDNA3+, in fanod.py): ``gpu_od/fan_ctrl/fan_curve``.
* ``MonitorOnly``: nothing writable; says how to enable control.
In dry-run every write is logged instead of made.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from gpuwatch.sysfs import Sysfs, SysfsError

log = logging.getLogger("gpuwatch.fan")

AUTO = 2
MANUAL = 1
ENABLE_HINT = (
    "fan control needs overdrive: add amdgpu.ppfeaturemask=0xfff7ffff (any mask with bit 0x4000) "
    "to the kernel command line and reboot"
)


@dataclass
class Applied:
    """What one write did and what the hardware reports back."""

    applied_pwm: int | None = None
    readback_pwm: int | None = None
    rpm: int | None = None
    verified: bool = True
    mode_reset: bool = False
    error: str | None = None


class Writer:
    """Writes through sysfs, or only logs them in dry-run."""

    def __init__(self, sysfs: Sysfs, dry_run: bool) -> None:
        self.sysfs = sysfs
        self.dry_run = dry_run

    def write(self, path: str, value: str) -> None:
        if self.dry_run:
            log.info("dry-run: would write %r to %s", value, path)
            return
        self.sysfs.write(path, value)

    def number(self, path: str) -> int | None:
        try:
            text = self.sysfs.read(path)
            return int(text) if text else None
        except (SysfsError, ValueError):
            return None


class Pwm1Backend(Writer):
    name = "pwm1"

    def __init__(self, sysfs: Sysfs, hwmon_dir: str, dry_run: bool = False, tolerance_percent: float = 5.0) -> None:
        super().__init__(sysfs, dry_run)
        self.hwmon_dir = hwmon_dir
        self.tolerance_percent = tolerance_percent
        self.pwm_min = self.number(f"{hwmon_dir}/pwm1_min") or 0
        self.pwm_max = self.number(f"{hwmon_dir}/pwm1_max") or 255
        self.original_mode: int | None = None
        self.last_pwm: int | None = None

    def original(self) -> dict[str, object]:
        """The mode to give back, read before the first write (persisted for fans-auto)."""
        self.original_mode = self.number(f"{self.hwmon_dir}/pwm1_enable")
        return {"backend": self.name, "path": f"{self.hwmon_dir}/pwm1_enable", "pwm1_enable": self.original_mode}

    def adopt(self, record: dict[str, object]) -> None:
        """Give back what ``record`` (possibly left by an earlier, killed daemon) says was there."""
        mode = record.get("pwm1_enable")
        self.original_mode = mode if isinstance(mode, int) else self.original_mode

    def take_control(self) -> None:
        self.write(f"{self.hwmon_dir}/pwm1_enable", str(MANUAL))

    def to_pwm(self, percent: float) -> int:
        return round(self.pwm_min + (self.pwm_max - self.pwm_min) * percent / 100.0)

    def apply(self, percent: float) -> Applied:
        result = Applied(applied_pwm=self.to_pwm(percent))
        enable_path = f"{self.hwmon_dir}/pwm1_enable"
        if not self.dry_run and self.number(enable_path) != MANUAL:
            # Firmware (or another tool) took the fan back: re-assert manual mode and rewrite.
            result.mode_reset = True
            self.write(enable_path, str(MANUAL))
            self.last_pwm = None
        if result.applied_pwm != self.last_pwm:
            try:
                self.write(f"{self.hwmon_dir}/pwm1", str(result.applied_pwm))
            except SysfsError as exc:
                if exc.reason != "EINVAL":
                    result.error = exc.reason
                    return self._observe(result)
                # The driver answers EINVAL when manual mode is off (§4.4): same as a mode reset.
                result.mode_reset = True
                try:
                    self.write(enable_path, str(MANUAL))
                    self.write(f"{self.hwmon_dir}/pwm1", str(result.applied_pwm))
                except SysfsError as again:
                    result.error = again.reason
                    return self._observe(result)
            self.last_pwm = result.applied_pwm
        return self._observe(result)

    def _observe(self, result: Applied) -> Applied:
        result.readback_pwm = self.number(f"{self.hwmon_dir}/pwm1")
        result.rpm = self.number(f"{self.hwmon_dir}/fan1_input")
        if self.dry_run or result.error:
            result.verified = result.error is None
            return result
        span = self.pwm_max - self.pwm_min or 255
        # pwm1 reads back quantised by the SMU (e.g. 255 * 60 % = 153 may read 150): allow a tolerance.
        off = abs((result.readback_pwm or 0) - (result.applied_pwm or 0)) * 100.0 / span
        if result.readback_pwm is not None:
            result.verified = off <= self.tolerance_percent
        else:
            # No usable pwm readback: the tach is the remaining witness that the fan follows.
            result.verified = result.rpm is not None and (result.rpm > 0) == ((result.applied_pwm or 0) > 0)
        if not result.verified:
            self.last_pwm = None  # write it again next tick
        return result

    def restore(self) -> None:
        mode = self.original_mode if self.original_mode in (MANUAL, AUTO) else AUTO
        restore_pwm1(self.sysfs, self.hwmon_dir, mode, self.dry_run)
        self.last_pwm = None


def restore_pwm1(sysfs: Sysfs, hwmon_dir: str, mode: int, dry_run: bool = False) -> bool:
    """Write ``mode`` (never 0) to pwm1_enable and read it back; True when it stuck."""
    mode = mode if mode in (MANUAL, AUTO) else AUTO
    path = f"{hwmon_dir}/pwm1_enable"
    if dry_run:
        log.info("dry-run: would write %r to %s", str(mode), path)
        return True
    sysfs.write(path, str(mode))
    back = sysfs.read(path)
    if back != str(mode):
        log.error("%s reads %r after restoring %d: the firmware may not have its fan back", path, back, mode)
        return False
    return True


class MonitorOnly:
    name = "none"

    def __init__(self, message: str) -> None:
        self.message = message
