"""The fan controller the daemon runs: one per-GPU loop of sensor -> curve -> backend -> FanState.

Implements the daemon's FanConsumer protocol (``tick(snapshot)`` and ``restore()``). The backend is
chosen per GPU from what exists and is writable (SYSFS_FACTS §5-6): gpu_od fan_curve (RDNA3+), else
pwm1 + pwm1_enable (RDNA2 and older), else monitor-only. The original fan mode of every GPU taken
over is persisted first (fanrestore) so `gpuwatch fans-auto` can hand it back even after a SIGKILL.
"""

from __future__ import annotations

import atexit
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from gpuwatch.config import FanConfig
from gpuwatch.curve import CurveParams, CurveState, curve_params, decide
from gpuwatch.fan import ENABLE_HINT, Applied, MonitorOnly, Pwm1Backend
from gpuwatch.fanod import GpuOdBackend, parse_fan_curve
from gpuwatch.fanrestore import RestoreFile
from gpuwatch.model import FanMode, FanState, GpuReading, Snapshot
from gpuwatch.sysfs import Sysfs, SysfsError

log = logging.getLogger("gpuwatch.fan")

Backend = Pwm1Backend | GpuOdBackend | MonitorOnly


def choose_backend(sysfs: Sysfs, gpu: GpuReading, device_dir: str, dry_run: bool, tolerance: float,
                   check_access: bool = True) -> Backend:
    """gpu_od when fan_curve is present, writable and has a non-zero range; else pwm1; else monitor-only."""
    curve_path = f"{device_dir}/gpu_od/fan_ctrl/fan_curve"
    why = "no fan control interface (APU or fanless board)"
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
            return GpuOdBackend(sysfs, device_dir, gpu.hwmon_dir, dry_run=dry_run)
    elif gpu.hwmon_dir and sysfs.exists(f"{gpu.hwmon_dir}/pwm1") and sysfs.exists(f"{gpu.hwmon_dir}/pwm1_enable"):
        if not check_access or sysfs.writable(f"{gpu.hwmon_dir}/pwm1_enable"):
            return Pwm1Backend(sysfs, gpu.hwmon_dir, dry_run=dry_run, tolerance_percent=tolerance)
        why = "pwm1_enable is not writable (run as root)"
    elif gpu.hwmon_dir and sysfs.exists(f"{gpu.hwmon_dir}/pwm1"):
        why = "pwm1 without pwm1_enable (RDNA4) and no gpu_od fan_curve"
    if "APU" not in why:
        why += "; " + ENABLE_HINT
    return MonitorOnly(f"monitor-only: {why}")


def pick_sensor(gpu: GpuReading, wanted: str) -> str | None:
    if wanted != "auto":
        return wanted
    if gpu.temp("junction") is not None:
        return "junction"
    return "edge" if gpu.temp("edge") is not None else None


@dataclass
class GpuFan:
    """Controller state of one GPU across ticks."""

    gpu_id: str
    settings: FanConfig
    backend: Backend
    mode: str
    sensor: str | None = None
    state: CurveState = field(default_factory=CurveState)
    controlling: bool = False
    mode_resets_total: int = 0
    write_errors_total: int = 0
    stalls_total: int = 0
    stall_ticks: int = 0

    @property
    def params(self) -> CurveParams:
        return curve_params(self.settings)


class FanController:
    def __init__(self, config: FanConfig, sysfs: Sysfs, runtime_dir: Path,
                 clock: Callable[[], float] = time.monotonic, check_access: bool = True) -> None:
        self.config = config
        self.sysfs = sysfs
        self.clock = clock
        self.check_access = check_access
        self.restore_file = RestoreFile(runtime_dir / "fan-restore.json")
        self.fans: dict[str, GpuFan] = {}
        self._atexit = False

    def tick(self, snapshot: Snapshot) -> tuple[FanState, ...]:
        now = self.clock()
        states = []
        for gpu in snapshot.gpus:
            if gpu.backend != "amdgpu":
                continue  # NVIDIA GPUs are monitored only (docs/nvidia.md)
            fan = self.fans.get(gpu.gpu_id) or self._new(gpu)
            try:
                states.append(self._tick_one(fan, gpu, now))
            except SysfsError as exc:  # never let one GPU stop the others
                fan.write_errors_total += 1
                states.append(self._state(fan, gpu, None, None, Applied(error=exc.reason), FanMode.FAILSAFE,
                                          f"fan error: {exc.reason}"))
        return tuple(states)

    def _new(self, gpu: GpuReading) -> GpuFan:
        settings = self.config.for_gpu(gpu.gpu_id)
        mode = settings.mode
        device_dir = gpu.hwmon_dir.rsplit("/hwmon/", 1)[0] if gpu.hwmon_dir else ""
        if mode == "monitor-only":
            backend: Backend = MonitorOnly("monitor-only by configuration (fan.mode)")
        else:
            backend = choose_backend(self.sysfs, gpu, device_dir, mode == "dry-run",
                                     settings.verify_tolerance_percent, self.check_access)
        if isinstance(backend, MonitorOnly):
            log.warning("GPU %s: %s", gpu.gpu_id, backend.message)
            mode = "monitor-only"
        fan = GpuFan(gpu.gpu_id, settings, backend, mode)
        self.fans[gpu.gpu_id] = fan
        return fan

    def _tick_one(self, fan: GpuFan, gpu: GpuReading, now: float) -> FanState:
        if fan.sensor is None and gpu.temps:
            # Chosen once; a sensor that disappears later means failsafe, never a silent switch.
            fan.sensor = pick_sensor(gpu, fan.settings.sensor)
            log.info("GPU %s: fan %s %s (backend %s)", gpu.gpu_id,
                     "watching" if isinstance(fan.backend, MonitorOnly) else "curve driven by",
                     fan.sensor, fan.backend.name)
        reading = gpu.temp(fan.sensor) if fan.sensor else None
        temp_c = reading.temp_c if reading else None
        crit_c = reading.crit_c if reading else None
        if not gpu.up or gpu.suspended:
            # Nothing to write to (gone) or nothing to cool (runtime-suspended; a write would wake it).
            why = "GPU not present" if not gpu.up else "GPU runtime-suspended: fan left as is"
            mode = FanMode.FAILSAFE if not gpu.up else FanMode.CURVE
            return self._state(fan, gpu, None, None, Applied(), mode, why,
                               failsafe_reason="GPU not present" if not gpu.up else None)
        if isinstance(fan.backend, MonitorOnly):
            return self._state(fan, gpu, temp_c, None, Applied(rpm=gpu.fan_rpm, readback_pwm=gpu.pwm),
                               FanMode.MONITOR_ONLY, fan.backend.message)
        minimum = fan.backend.minimum_percent if isinstance(fan.backend, GpuOdBackend) else 0.0
        telemetry = tuple(t.temp_c for t in gpu.temps) + (gpu.power_w,)
        decision = decide(fan.params, fan.state, temp_c, crit_c, now, minimum, telemetry)
        fan.state = decision.state
        if not fan.controlling:
            self._take_control(fan)
        applied = fan.backend.apply(decision.percent)
        fan.mode_resets_total += applied.mode_reset
        if applied.mode_reset:
            log.warning("GPU %s: fan mode was reset by the firmware or another tool; re-asserted", gpu.gpu_id)
        if applied.error:
            fan.write_errors_total += 1
            log.error("GPU %s: fan write failed: %s", gpu.gpu_id, applied.error)
        stalled = self._stalled(fan, applied)
        message = None
        mode = FanMode.DRY_RUN if fan.mode == "dry-run" else FanMode.CURVE
        if decision.failsafe_reason:
            mode, message = FanMode.FAILSAFE, f"failsafe: {decision.failsafe_reason} on {fan.sensor or 'no sensor'}"
        elif decision.crit:
            message = f"{fan.sensor} at or above crit {crit_c:g} °C: 100 %"
        elif not applied.verified:
            message = "fan readback differs from the written value"
        if stalled:
            message = f"fan stalled: 0 RPM while commanded {decision.percent:.0f} %"
        return self._state(fan, gpu, temp_c, decision.percent, applied, mode, message,
                           failsafe_reason=decision.failsafe_reason, stalled=stalled)

    def _take_control(self, fan: GpuFan) -> None:
        assert not isinstance(fan.backend, MonitorOnly)
        original = fan.backend.original()
        if fan.mode != "dry-run":
            # Persisted before the first write, so a SIGKILL right after still leaves the way back.
            original = self.restore_file.add(fan.gpu_id, original)
            fan.backend.adopt(original)
        fan.backend.take_control()
        fan.controlling = True
        log.info("GPU %s: took fan control via %s (was %s)", fan.gpu_id, fan.backend.name, original)
        if not self._atexit:
            atexit.register(self.restore)
            self._atexit = True

    def _stalled(self, fan: GpuFan, applied: Applied) -> bool:
        if fan.mode == "dry-run" or applied.rpm is None:
            fan.stall_ticks = 0
            return False
        if applied.rpm == 0 and (applied.applied_pwm or 0) > 0:
            fan.stall_ticks += 1
            if fan.stall_ticks == fan.settings.stall_after_ticks:
                fan.stalls_total += 1
                log.error("GPU %s: fan reports 0 RPM while commanded pwm %s", fan.gpu_id, applied.applied_pwm)
        else:
            fan.stall_ticks = 0
        return fan.stall_ticks >= fan.settings.stall_after_ticks

    def _state(self, fan: GpuFan, gpu: GpuReading, temp_c: float | None, percent: float | None, applied: Applied,
               mode: FanMode, message: str | None, failsafe_reason: str | None = None,
               stalled: bool = False) -> FanState:
        return FanState(
            gpu_id=gpu.gpu_id, backend=fan.backend.name, mode=mode, sensor=fan.sensor, sensor_temp_c=temp_c,
            target_ratio=None if percent is None else percent / 100.0,
            applied_pwm=applied.applied_pwm, readback_pwm=applied.readback_pwm, rpm=applied.rpm,
            stalled=stalled, mode_resets_total=fan.mode_resets_total, write_errors_total=fan.write_errors_total,
            stalls_total=fan.stalls_total, message=message, failsafe_reason=failsafe_reason,
        )

    def restore(self) -> None:
        """Every fan taken back to what it was at start; safe to call more than once."""
        failed = []
        for fan in self.fans.values():
            if not fan.controlling or isinstance(fan.backend, MonitorOnly):
                continue
            try:
                fan.backend.restore()
                fan.controlling = False
                fan.state = CurveState()
                log.info("GPU %s: fan handed back to the firmware", fan.gpu_id)
            except SysfsError as exc:
                if exc.reason == "ENOENT":
                    # The card fell off the bus: there is no fan left to hand back; when it
                    # returns, the driver re-initialises it in automatic mode.
                    fan.controlling = False
                    log.warning("GPU %s: gone, no fan to restore", fan.gpu_id)
                    continue
                failed.append(f"{fan.gpu_id}: {exc.reason}")
                log.error("GPU %s: could not restore the fan: %s (run gpuwatch fans-auto)", fan.gpu_id, exc)
        if not failed and not any(f.controlling for f in self.fans.values()):
            self.restore_file.clear()
        if failed:
            raise RuntimeError("fan restore failed for " + ", ".join(failed))
