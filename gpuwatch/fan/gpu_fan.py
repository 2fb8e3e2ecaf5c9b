"""One GPU's fan controller state across ticks, and the probe's choice of its backend.

The probe (the controller's, on the GPU's worker: it reads sysfs) picks from what exists and is writable
(tests/fixtures/amdgpu/SYSFS_FACTS.md §5-6): gpu_od fan_curve (RDNA3+), else pwm1 + pwm1_enable (RDNA2
and older), else none: ``NoFanControl`` says why and how to enable control, and the GPU is monitor-only.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gpuwatch.config.cooling import FanConfig
from gpuwatch.fan.backend import ENABLE_HINT, FanBackend, NoFanControl
from gpuwatch.fan.curve import CurveParams, CurveState, curve_params, top_percent
from gpuwatch.fan.gpu_od import GpuOdBackend, parse_fan_curve
from gpuwatch.fan.pwm1 import Pwm1Backend
from gpuwatch.gpus.amdgpu import AmdCard
from gpuwatch.model import FanBackendName, FanMode
from gpuwatch.sysfs import Sysfs, SysfsError


def choose_backend(sysfs: Sysfs, card: AmdCard | None, dry_run: bool, tolerance: float,
                   check_access: bool = True) -> FanBackend:
    """gpu_od when fan_curve is present, writable and has a non-zero range; else pwm1; else NoFanControl."""
    why = "no fan control interface (APU or fanless board)"
    if card is None or card.hwmon_dir is None:
        # No hwmon node: no temperature for a curve to follow, nothing to read a fan back from.
        raise NoFanControl(why)
    hwmon_dir, curve_path = card.hwmon_dir, f"{card.device_dir}/gpu_od/fan_ctrl/fan_curve"
    if sysfs.exists(curve_path):
        try:
            curve = parse_fan_curve(sysfs.read(curve_path) or "")
        except SysfsError as exc:
            curve, why = None, f"fan_curve unreadable: {exc.reason}"
        if curve is not None and not curve.usable:
            why = "fan_curve has a zero OD range (firmware rejects every write)"
        elif curve is not None and check_access and not sysfs.writable(curve_path):
            why = "fan_curve is read-only (overdrive disabled)"
        elif curve is not None:
            return GpuOdBackend(sysfs, card.device_dir, hwmon_dir, dry_run=dry_run)
    elif sysfs.exists(f"{hwmon_dir}/pwm1") and sysfs.exists(f"{hwmon_dir}/pwm1_enable"):
        if not check_access or sysfs.writable(f"{hwmon_dir}/pwm1_enable"):
            return Pwm1Backend(sysfs, hwmon_dir, dry_run=dry_run, tolerance_percent=tolerance)
        why = "pwm1_enable is not writable (run as root)"
    elif sysfs.exists(f"{hwmon_dir}/pwm1"):
        why = "pwm1 without pwm1_enable (RDNA4) and no gpu_od fan_curve"
    if "APU" not in why:
        why += "; " + ENABLE_HINT
    raise NoFanControl(why)


@dataclass
class GpuFan:
    """Controller state of one GPU across ticks."""

    gpu_id: str
    settings: FanConfig
    mode: FanMode  # what a good tick publishes: CURVE, DRY_RUN or MONITOR_ONLY
    backend: FanBackend | None = None  # None: monitor-only, ``why_not`` says why
    probed: bool = False  # the backend is chosen on the GPU's first tick, on its worker
    why_not: str | None = None
    sensor: str | None = None
    state: CurveState = field(default_factory=CurveState)
    controlling: bool = False
    uncontrolled: str | None = None  # why the fan cannot be written, while it cannot (logged once)
    mode_resets_total: int = 0
    write_errors_total: int = 0
    stalls_total: int = 0
    stall_ticks: int = 0

    _params: tuple[FanConfig, CurveParams, float] | None = field(default=None, repr=False, compare=False)

    @property
    def params(self) -> CurveParams:
        """The curve's parameters, derived once per ``settings`` (a reload replaces them: derived again)."""
        return self._derived()[1]

    @property
    def top_percent(self) -> float:
        """The curve's highest speed below crit (``curve.top_percent``), derived with ``params``."""
        return self._derived()[2]

    def _derived(self) -> tuple[FanConfig, CurveParams, float]:
        if self._params is None or self._params[0] is not self.settings:
            params = curve_params(self.settings)
            self._params = (self.settings, params, top_percent(params))
        return self._params

    @property
    def backend_name(self) -> FanBackendName:
        return "none" if self.backend is None else self.backend.name
