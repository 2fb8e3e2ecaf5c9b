"""pwm1 fan backend (SI..RDNA2): hwmon ``pwm1_enable`` 1 = manual, then ``pwm1`` in ``pwm1_min..pwm1_max``.

``pwm1_enable`` 2 is automatic (the firmware's curve); 0 means "no control" = full speed on
SMU7/Vega/SMU11 (K-FANNONE), so it is never written (tests/fixtures/amdgpu/SYSFS_FACTS.md §4.4).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, ClassVar

from gpuwatch.fan.backend import NOT_SEEN, Applied, Seen, Writer
from gpuwatch.model import PWM_MAX_DEFAULT, FanBackendName
from gpuwatch.sysfs import Sysfs, SysfsError

log = logging.getLogger("gpuwatch.fan")

AUTO = 2
MANUAL = 1


@dataclass(frozen=True)
class Pwm1Restore:
    """``pwm1_enable`` as found before the first write (None: unreadable); restored as 1 or 2, never 0."""

    backend: ClassVar[str] = "pwm1"
    path: str  # the pwm1_enable file
    pwm1_enable: int | None

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Pwm1Restore:
        mode = data.get("pwm1_enable")
        return cls(path=str(data.get("path") or ""), pwm1_enable=mode if isinstance(mode, int) else None)

    def to_json(self) -> dict[str, Any]:
        return {"backend": self.backend, "path": self.path, "pwm1_enable": self.pwm1_enable}

    def adopt(self, stored: Mapping[str, Any]) -> Pwm1Restore:
        mode = stored.get("pwm1_enable")
        return replace(self, pwm1_enable=mode) if isinstance(mode, int) else self

    @property
    def mode(self) -> int:
        """The mode restored: the original, automatic unless it was manual (never 0, full speed)."""
        return self.pwm1_enable if self.pwm1_enable in (MANUAL, AUTO) else AUTO

    def handed_back(self) -> str:
        return "pwm1_enable 2, automatic" if self.mode == AUTO else "pwm1_enable 1, manual as it was found"

    def restore(self, sysfs: Sysfs) -> str | None:
        """Write the original mode (automatic unless it was manual) and read it back."""
        mode = self.mode
        sysfs.write(self.path, str(mode))
        back = sysfs.read(self.path)
        if back != str(mode):
            log.error("%s reads %r after restoring %d: the firmware may not have its fan back", self.path, back, mode)
            return f"pwm1_enable did not read back {mode}"
        return None


class Pwm1Backend(Writer):
    name: FanBackendName = "pwm1"
    minimum_percent = 0.0

    def __init__(self, sysfs: Sysfs, hwmon_dir: str, dry_run: bool = False, tolerance_percent: float = 5.0) -> None:
        super().__init__(sysfs, dry_run)
        self.hwmon_dir = hwmon_dir
        self.enable_path = f"{hwmon_dir}/pwm1_enable"
        self.tolerance_percent = tolerance_percent
        self.pwm_min = self.number(f"{hwmon_dir}/pwm1_min") or 0
        self.pwm_max = self.number(f"{hwmon_dir}/pwm1_max") or PWM_MAX_DEFAULT
        self.record = Pwm1Restore(self.enable_path, None)
        self.last_pwm: int | None = None

    def original(self) -> Pwm1Restore:
        """The mode to give back, read before the first write (persisted for `gpuwatch restore`)."""
        self.record = Pwm1Restore(self.enable_path, self.number(self.enable_path))
        return self.record

    def adopt(self, stored: Mapping[str, Any]) -> None:
        self.record = self.record.adopt(stored)

    def take_control(self) -> None:
        self.write(self.enable_path, str(MANUAL))

    def to_pwm(self, percent: float) -> int:
        return round(self.pwm_min + (self.pwm_max - self.pwm_min) * percent / 100.0)

    def apply(self, percent: float, seen: Seen = NOT_SEEN) -> Applied:
        result = Applied(applied_pwm=self.to_pwm(percent))
        wrote = False
        if not self.dry_run and self.number(self.enable_path, seen.pwm_enable) != MANUAL:
            # Firmware (or another tool) took the fan back: re-assert manual mode and rewrite.
            result.mode_reset = True
            self.write(self.enable_path, str(MANUAL))
            self.last_pwm = None
        if result.applied_pwm != self.last_pwm:
            wrote = True
            try:
                self.write(f"{self.hwmon_dir}/pwm1", str(result.applied_pwm))
            except SysfsError as exc:
                if exc.reason != "EINVAL":
                    result.error = exc.reason
                    return self._observe(result, NOT_SEEN)
                # The driver answers EINVAL when manual mode is off (§4.4): same as a mode reset.
                result.mode_reset = True
                try:
                    self.write(self.enable_path, str(MANUAL))
                    self.write(f"{self.hwmon_dir}/pwm1", str(result.applied_pwm))
                except SysfsError as again:
                    result.error = again.reason
                    return self._observe(result, NOT_SEEN)
            self.last_pwm = result.applied_pwm
        return self._observe(result, NOT_SEEN if wrote else seen)

    def _observe(self, result: Applied, seen: Seen) -> Applied:
        """What reads back: after a write this tick, the files again; else what the tick's reading read."""
        result.readback_pwm = self.number(f"{self.hwmon_dir}/pwm1", seen.pwm)
        result.rpm = self.number(f"{self.hwmon_dir}/fan1_input", seen.rpm)
        if self.dry_run or result.error:
            result.verified = result.error is None
            return result
        span = self.pwm_max - self.pwm_min or PWM_MAX_DEFAULT
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
