"""Fan effects: take control of one GPU's fan, write a speed, verify it, and give it back.

Backends (../shared/fixtures/amdgpu/SYSFS_FACTS.md §5-6):
* ``Pwm1Backend`` (SI..RDNA2): ``pwm1_enable`` 1 = manual, then ``pwm1`` 0..255; 2 = automatic.
  0 means "no control" = full speed on SMU7/Vega/SMU11 (K-FANNONE), so it is never written.
* ``GpuOdBackend`` (RDNA3+): ``gpu_od/fan_ctrl/fan_curve`` with 5 points, ``c`` commits, ``r`` resets.
* ``MonitorOnly``: nothing writable; says how to enable control.
In dry-run every write is logged instead of made.
"""

from __future__ import annotations

import logging
import re
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


class _Writer:
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


class Pwm1Backend(_Writer):
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
        result.verified = result.readback_pwm is not None and off <= self.tolerance_percent
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


class GpuOdBackend(_Writer):
    name = "gpu_od"

    def __init__(self, sysfs: Sysfs, device_dir: str, hwmon_dir: str | None, dry_run: bool = False) -> None:
        super().__init__(sysfs, dry_run)
        self.dir = f"{device_dir}/gpu_od/fan_ctrl"
        self.curve_path = f"{self.dir}/fan_curve"
        self.zero_path = f"{self.dir}/fan_zero_rpm_enable"
        self.hwmon_dir = hwmon_dir
        self.curve = parse_fan_curve(sysfs.read(self.curve_path) or "")
        self.original_zero: int | None = None
        self.last_percent: int | None = None

    @property
    def minimum_percent(self) -> float:
        return float(self.curve.speed_range_percent[0]) if self.curve.speed_range_percent else 0.0

    def original(self) -> dict[str, object]:
        self.original_zero = self._zero_rpm()
        was_auto = all(p == (0, 0) for p in self.curve.points)
        return {"backend": self.name, "path": self.curve_path, "was": "auto" if was_auto else "custom",
                "zero_rpm_path": self.zero_path, "zero_rpm_enable": self.original_zero}

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
        if self.original_zero is None:
            return False
        current = self.original_zero if self.dry_run else self._zero_rpm()
        if current == 0:
            return False
        self.write(self.zero_path, "0\n")
        self.write(self.zero_path, "c\n")
        return True

    def apply(self, percent: float) -> Applied:
        lo, hi = self.curve.speed_range_percent or (0, 100)
        t_lo, t_hi = self.curve.temp_range_c or (25, 100)
        speed = int(min(hi, max(lo, round(percent))))
        result = Applied(applied_pwm=round(speed * 255 / 100))
        if not self.dry_run and self.original_zero is not None and self._zero_rpm() == 1:
            result.mode_reset = True
            self._zero_rpm_off()
        if not self.dry_run and self.last_percent is not None:
            current = parse_fan_curve(self.sysfs.read(self.curve_path) or "")
            if any(p[1] != self.last_percent for p in current.points):
                result.mode_reset = True  # the curve was reset under us (GPU reset, resume, another tool)
                self.last_percent = None
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
                return self._observe(result)
            self.last_percent = speed
        return self._observe(result)

    def _observe(self, result: Applied) -> Applied:
        if self.hwmon_dir:
            result.readback_pwm = self.number(f"{self.hwmon_dir}/pwm1")
            result.rpm = self.number(f"{self.hwmon_dir}/fan1_input")
        result.verified = result.error is None
        return result

    def restore(self) -> None:
        restore_gpu_od(self.sysfs, self.curve_path, self.dry_run)
        if self.original_zero == 1:
            self.write(self.zero_path, "1\n")
            self.write(self.zero_path, "c\n")
        self.last_percent = None


def restore_gpu_od(sysfs: Sysfs, curve_path: str, dry_run: bool = False) -> None:
    """``r`` resets the curve to the boot default (firmware auto), ``c`` commits it (K-RESET)."""
    for value in ("r\n", "c\n"):
        if dry_run:
            log.info("dry-run: would write %r to %s", value, curve_path)
        else:
            sysfs.write(curve_path, value)


class MonitorOnly:
    name = "none"

    def __init__(self, message: str) -> None:
        self.message = message
