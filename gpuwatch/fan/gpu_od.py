"""RDNA3+ fan backend: drive the PMFW ``gpu_od/fan_ctrl/fan_curve`` as a flat 5-point curve.

SYSFS_FACTS §6: read = current points + ``OD_RANGE``; write ``"<idx> <temp_C> <speed_pct>"`` per point,
then ``c`` commits; ``r`` resets to the boot default (firmware auto). Zero-RPM (``fan_zero_rpm_enable``)
would stop the fan below a firmware threshold whatever the curve says, so it is switched off.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, ClassVar

from gpuwatch.fan.backend import NOT_SEEN, Applied, Seen, Writer
from gpuwatch.model import PWM_MAX_DEFAULT, FanBackendName
from gpuwatch.sysfs import Sysfs, SysfsError

_RANGE_T = re.compile(r"FAN_CURVE\(hotspot temp\):\s*(\d+)C\s+(\d+)C")
_RANGE_S = re.compile(r"FAN_CURVE\(fan speed\):\s*(\d+)%\s+(\d+)%")
_POINT = re.compile(r"^(\d+):\s*(\d+)C\s+(\d+)%", re.M)


@dataclass(frozen=True)
class FanCurveFile:
    points: tuple[tuple[int, int], ...]
    temp_range_c: tuple[int, int] | None
    speed_range_percent: tuple[int, int] | None

    @property
    def usable(self) -> bool:
        # [0,0] ranges (SMU 14.0.2/3 on older kernels) reject every write (LX-SMU14).
        return bool(
            self.temp_range_c and self.speed_range_percent
            and self.temp_range_c[1] > self.temp_range_c[0] and self.speed_range_percent[1] > 0
        )


def parse_fan_curve(text: str) -> FanCurveFile:
    t, s = _RANGE_T.search(text), _RANGE_S.search(text)
    return FanCurveFile(
        points=tuple((int(m.group(2)), int(m.group(3))) for m in _POINT.finditer(text.split("OD_RANGE")[0])),
        temp_range_c=(int(t.group(1)), int(t.group(2))) if t else None,
        speed_range_percent=(int(s.group(1)), int(s.group(2))) if s else None,
    )


@dataclass(frozen=True)
class GpuOdRestore:
    """What the fan curve and zero-RPM were before the first write.

    Restoring resets the curve to the boot default (firmware auto: ``r`` then ``c``, K-RESET) and
    switches zero-RPM back on if it was on. A custom curve set by another tool is not re-created.
    """

    backend: ClassVar[str] = "gpu_od"
    path: str  # the fan_curve file
    was: str | None = None  # "auto" (boot default) or "custom"; informational
    zero_rpm_path: str = ""
    zero_rpm_enable: int | None = None  # None: the vBIOS has no zero-RPM setting

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> GpuOdRestore:
        zero = data.get("zero_rpm_enable")
        was = data.get("was")
        return cls(path=str(data.get("path") or ""), was=None if was is None else str(was),
                   zero_rpm_path=str(data.get("zero_rpm_path") or ""),
                   zero_rpm_enable=zero if isinstance(zero, int) else None)

    def to_json(self) -> dict[str, Any]:
        return {"backend": self.backend, "path": self.path, "was": self.was, "zero_rpm_path": self.zero_rpm_path,
                "zero_rpm_enable": self.zero_rpm_enable}

    def adopt(self, stored: Mapping[str, Any]) -> GpuOdRestore:
        zero = stored.get("zero_rpm_enable")
        return replace(self, zero_rpm_enable=zero) if isinstance(zero, int) else self

    def handed_back(self) -> str:
        zero_rpm = "; zero-RPM on again" if self.zero_rpm_enable == 1 and self.zero_rpm_path else ""
        return f"fan_curve reset to the firmware's{zero_rpm}"

    def restore(self, sysfs: Sysfs) -> str | None:
        for value in ("r\n", "c\n"):
            sysfs.write(self.path, value)
        if self.zero_rpm_enable == 1 and self.zero_rpm_path:
            sysfs.write(self.zero_rpm_path, "1\n")
            sysfs.write(self.zero_rpm_path, "c\n")
        return None


class GpuOdBackend(Writer):
    name: FanBackendName = "gpu_od"

    def __init__(self, sysfs: Sysfs, device_dir: str, hwmon_dir: str | None, dry_run: bool = False) -> None:
        super().__init__(sysfs, dry_run)
        self.dir = f"{device_dir}/gpu_od/fan_ctrl"
        self.curve_path = f"{self.dir}/fan_curve"
        self.zero_path = f"{self.dir}/fan_zero_rpm_enable"
        self.hwmon_dir = hwmon_dir
        self.curve = parse_fan_curve(sysfs.read(self.curve_path) or "")
        self.record = GpuOdRestore(self.curve_path, zero_rpm_path=self.zero_path)
        self.last_percent: int | None = None
        self._curve_held: tuple[int, str] | None = None  # a speed and a fan_curve text found holding it everywhere

    @property
    def minimum_percent(self) -> float:
        return float(self.curve.speed_range_percent[0]) if self.curve.speed_range_percent else 0.0

    def original(self) -> GpuOdRestore:
        was_auto = all(p == (0, 0) for p in self.curve.points)
        self.record = GpuOdRestore(self.curve_path, "auto" if was_auto else "custom", self.zero_path, self._zero_rpm())
        return self.record

    def adopt(self, stored: Mapping[str, Any]) -> None:
        self.record = self.record.adopt(stored)

    def take_control(self) -> None:
        self._zero_rpm_off()

    def _zero_rpm(self) -> int | None:
        try:
            text = self.sysfs.read(self.zero_path)
        except SysfsError:
            return None
        # "FAN_ZERO_RPM_ENABLE:\n1\nOD_RANGE:..."; an empty file means the vBIOS lacks it (§6).
        lines = (text or "").splitlines()
        return int(lines[1]) if len(lines) > 1 and lines[1].strip().isdigit() else None

    def _zero_rpm_off(self) -> bool:
        """Zero-RPM would stop the fan under the firmware's threshold whatever the curve says."""
        if self.record.zero_rpm_enable is None:
            return False
        current = self.record.zero_rpm_enable if self.dry_run else self._zero_rpm()
        if current == 0:
            return False
        self.write(self.zero_path, "0\n")
        self.write(self.zero_path, "c\n")
        return True

    def apply(self, percent: float, seen: Seen = NOT_SEEN) -> Applied:
        lo, hi = self.curve.speed_range_percent or (0, 100)
        t_lo, t_hi = self.curve.temp_range_c or (25, 100)
        speed = int(min(hi, max(lo, round(percent))))
        result = Applied(applied_pwm=round(speed * PWM_MAX_DEFAULT / 100))
        if not self.dry_run and self.record.zero_rpm_enable is not None and self._zero_rpm() == 1:
            result.mode_reset = True
            self._zero_rpm_off()
        if not self.dry_run and self.last_percent is not None and not self._curve_holds(self.last_percent):
            result.mode_reset = True  # the curve was reset under us (GPU reset, resume, another tool)
            self.last_percent = None
        if result.mode_reset or speed != self.last_percent:
            seen = NOT_SEEN  # written this tick: what this tick's reading read is from before
        if speed != self.last_percent:
            temps = [round(t_lo + (t_hi - t_lo) * i / 4) for i in range(5)]
            try:
                for index, temp_c in enumerate(temps):
                    self.write(self.curve_path, f"{index} {temp_c} {speed}\n")
                self.write(self.curve_path, "c\n")
            except SysfsError as exc:
                result.error = exc.reason
                try:
                    self.write(self.curve_path, "r\n")
                except SysfsError:
                    pass
                self.last_percent = None
                return self._observe(result, seen)
            self.last_percent = speed
        return self._observe(result, seen)

    def _curve_holds(self, speed: int) -> bool:
        """The fan_curve reads back ``speed`` at every point. The file reads the same text while nothing
        changes it, so a text already found to hold it is not parsed again."""
        text = self.sysfs.read(self.curve_path) or ""
        if self._curve_held == (speed, text):
            return True
        holds = all(p[1] == speed for p in parse_fan_curve(text).points)
        self._curve_held = (speed, text) if holds else None
        return holds

    def _observe(self, result: Applied, seen: Seen) -> Applied:
        """What reads back: after a write this tick, the files again; else what the tick's reading read."""
        if self.hwmon_dir:
            result.readback_pwm = self.number(f"{self.hwmon_dir}/pwm1", seen.pwm)
            result.rpm = self.number(f"{self.hwmon_dir}/fan1_input", seen.rpm)
        result.verified = result.error is None
        return result
