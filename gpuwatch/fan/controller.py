"""The fan controller the daemon runs: per GPU and tick, probe -> take control -> apply -> publish FanState.

Implements the daemon's FanConsumer (``tick(snapshot, config)`` and ``restore()``). The backend is chosen per
GPU from what exists and is writable (SYSFS_FACTS §5-6; gpu_fan.py, with the GPU's state across ticks):
gpu_od fan_curve (RDNA3+), else pwm1 + pwm1_enable (RDNA2 and older), else none (monitor-only). Where a
GPU's files are comes from the amdgpu source (``locate``); the shared readings carry no paths. The
decisions are pure: the curve in curve.py, sensor choice, stall rule, mode and message in rules.py.

The writes go through the fans' Actuator (gpuwatch.actuation; the kind in restore.py): the original fan
mode of every GPU taken over is recorded before the first write, so the shutdown and `gpuwatch restore`
hand it back even after a SIGKILL, and each GPU's fan I/O runs on its own worker with the sysfs deadline,
apart from the readers' workers: a write that blocks costs the tick one deadline and the fan reads
"uncontrolled" while it stays blocked; a GPU whose reads hang gets its fan at 100 % through this
path all the same, and the shutdown's restore never waits behind a stuck read. A GPU found at a new
place (``rebind``, from gpus/binding.py) gets a new backend on its next tick. A reload's new ``[fan]``
(daemon/reload.py: live but for its mode) reaches every GPU's cached settings before its next step.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from pathlib import Path

from gpuwatch.actuation.actuator import Actuator, RestoreFailed, blocked_reason
from gpuwatch.config.base import DEFAULT_SYSFS_DEADLINE_S
from gpuwatch.config.cooling import FanConfig
from gpuwatch.config.file import Config
from gpuwatch.deadline import Late
from gpuwatch.fan.backend import NOT_SEEN, Applied, FanBackend, NoFanControl, Seen
from gpuwatch.fan.curve import curve_params, decide, failsafe
from gpuwatch.fan.gpu_fan import GpuFan, choose_backend
from gpuwatch.fan.pwm1 import Pwm1Backend
from gpuwatch.fan.restore import kind
from gpuwatch.fan.rules import Verdict, can_rise, driven_verdict, idle_verdict, pick_sensor, stall, unwritable_verdict
from gpuwatch.gpus.amdgpu import AmdCard, Locate
from gpuwatch.model import FanMode, FanState, GpuReading, Snapshot
from gpuwatch.sysfs import Sysfs, SysfsError

log = logging.getLogger("gpuwatch.fan")


class FanController:
    def __init__(self, sysfs: Sysfs, runtime_dir: Path, *, locate: Locate,
                 clock: Callable[[], float] = time.monotonic, check_access: bool = True,
                 deadline_s: float = DEFAULT_SYSFS_DEADLINE_S) -> None:
        self.sysfs = sysfs
        self.locate = locate
        self.clock = clock
        self.check_access = check_access
        self.actuator = Actuator(kind(sysfs), runtime_dir, deadline_s)
        self.fans: dict[str, GpuFan] = {}
        self._renew: set[str] = set()  # moved or handed back: a fresh GpuFan on their next idle tick
        self._fan_config: FanConfig | None = None  # the [fan] the GPUs' settings come from
        self._resettle: set[str] = set()  # their settings to re-derive from a reloaded [fan] (when idle)

    def rebind(self, card: AmdCard) -> None:
        """The GPU came back at a new place (gpus/binding.py): a new backend on its next tick."""
        log.info("GPU %s: fan rebound to its new location (%s)", card.gpu_id, card.hwmon_dir)
        self._renew.add(card.gpu_id)

    def tick(self, snapshot: Snapshot, config: Config) -> tuple[FanState, ...]:
        """Each amdgpu GPU's step on its fan worker; ``config`` is the live configuration."""
        now = self.clock()
        gpus = [gpu for gpu in snapshot.gpus if gpu.backend == "amdgpu"]  # NVIDIA: monitored only (docs/nvidia.md)
        if config.fan is not self._fan_config and config.fan != self._fan_config:
            self._fan_config = config.fan
            self._resettle.update(self.fans)
        for gpu in gpus:
            if gpu.gpu_id in self._renew and not self.actuator.busy(gpu.gpu_id):
                self._renew.discard(gpu.gpu_id)
                self._fresh(gpu.gpu_id, config.fan)
            if gpu.gpu_id in self._resettle and not self.actuator.busy(gpu.gpu_id):  # not under its worker's feet
                self._resettle.discard(gpu.gpu_id)
                self._settle(self.fans[gpu.gpu_id], config.fan)
        fans = {gpu.gpu_id: self.fans.get(gpu.gpu_id) or self._new(gpu.gpu_id, config.fan) for gpu in gpus}
        results = self.actuator.run({gpu.gpu_id: partial(self._tick_guarded, fans[gpu.gpu_id], gpu, now)
                                     for gpu in gpus})
        return tuple(self._blocked(fans[gpu.gpu_id], gpu, result) if isinstance(result, Late) else result
                     for gpu, result in zip(gpus, results.values(), strict=False))

    def _new(self, gpu_id: str, config: FanConfig) -> GpuFan:
        settings = config.for_gpu(gpu_id)
        mode = FanMode.DRY_RUN if settings.mode == "dry-run" else FanMode.CURVE
        fan = self.fans[gpu_id] = GpuFan(gpu_id, settings, mode)
        return fan

    def _fresh(self, gpu_id: str, config: FanConfig) -> None:
        """A fresh GpuFan (probed again) for a GPU that moved or was handed back: its old paths may be gone;
        counters and sensor carry on."""
        old = self.fans.get(gpu_id)
        if old is None:
            return
        fan = self._new(gpu_id, config)
        fan.sensor, fan.mode_resets_total = old.sensor, old.mode_resets_total
        fan.write_errors_total, fan.stalls_total = old.write_errors_total, old.stalls_total

    def _settle(self, fan: GpuFan, config: FanConfig) -> None:
        """A reloaded ``[fan]``: everything a GpuFan keeps from its settings re-derived. The curve's parameters
        are derived from ``settings`` every tick; the sensor is picked again when its rule changed; a changed
        curve forgets the hysteresis (it held the old curve's speed), so the new curve applies at this tick;
        pwm1's read-back tolerance is the backend's copy. The mode stays (RESTART_SUBKEYS)."""
        settings = config.for_gpu(fan.gpu_id).model_copy(update={"mode": fan.settings.mode})
        old, fan.settings = fan.settings, settings
        if settings == old:
            return
        if settings.sensor != old.sensor:
            fan.sensor = None  # picked again by this tick, by the new rule (and logged)
        if fan.sensor is None or curve_params(settings) != curve_params(old):
            fan.state = replace(fan.state, applied_percent=None, ref_temp_c=None, below_since=None, slewing=False)
        if isinstance(fan.backend, Pwm1Backend):
            fan.backend.tolerance_percent = settings.verify_tolerance_percent
        log.info("GPU %s: fan settings reloaded", fan.gpu_id)

    def _probe(self, fan: GpuFan) -> None:
        """Choose the backend (reads sysfs: runs on the GPU's worker)."""
        fan.probed = True
        why = "monitor-only by configuration (fan.mode)"
        if fan.settings.mode != "monitor-only":
            try:
                fan.backend = choose_backend(self.sysfs, self.locate(fan.gpu_id), fan.mode is FanMode.DRY_RUN,
                                             fan.settings.verify_tolerance_percent, self.check_access)
            except NoFanControl as exc:
                why = f"monitor-only: {exc}"
        if fan.backend is None:
            log.warning("GPU %s: %s", fan.gpu_id, why)
            fan.mode, fan.why_not = FanMode.MONITOR_ONLY, why

    def _tick_guarded(self, fan: GpuFan, gpu: GpuReading, now: float) -> FanState:
        """One GPU's tick, on its worker."""
        try:
            return self._tick_one(fan, gpu, now)
        except SysfsError as exc:  # never let one GPU stop the others
            fan.write_errors_total += 1
            problem = f"cannot write {exc.path.rsplit('/', 1)[-1]}: {exc.reason}"
            return self._unwritable(fan, gpu, problem, Applied(error=exc.reason))

    def _blocked(self, fan: GpuFan, gpu: GpuReading, late: Late) -> FanState:
        """The GPU's fan I/O has not returned within the deadline (a write stuck in the driver)."""
        return self._unwritable(fan, gpu, blocked_reason(late, "fan"), Applied(error="blocked"))

    def _unwritable(self, fan: GpuFan, gpu: GpuReading, problem: str, applied: Applied,
                    temp_c: float | None = None, percent: float | None = None) -> FanState:
        """A tick whose write did not happen: "uncontrolled" (rules.unwritable_verdict), logged once."""
        if fan.uncontrolled is None:
            log.error("GPU %s: fan not controlled: %s (retried every tick)", fan.gpu_id, problem)
        fan.uncontrolled = problem
        return self._state(fan, gpu, temp_c, percent, applied, unwritable_verdict(gpu.unresponsive, problem))

    def _tick_one(self, fan: GpuFan, gpu: GpuReading, now: float) -> FanState:
        if not fan.probed and (gpu.up or gpu.unresponsive):
            self._probe(fan)
        if fan.sensor is None and gpu.temps:
            # Chosen once; a sensor that disappears later means failsafe, never a silent switch.
            fan.sensor = pick_sensor(gpu, fan.settings.sensor)
            log.info("GPU %s: fan %s %s (backend %s)", gpu.gpu_id,
                     "watching" if fan.backend is None else "curve driven by", fan.sensor, fan.backend_name)
        reading = gpu.temp(fan.sensor) if fan.sensor else None
        temp_c = reading.temp_c if reading else None
        crit_c = reading.crit_c if reading else None
        idle = None if gpu.unresponsive else idle_verdict(gpu.up, gpu.suspended)
        if idle is not None:
            return self._state(fan, gpu, None, None, Applied(), idle)
        if fan.backend is None:
            return self._state(fan, gpu, temp_c, None, Applied(rpm=gpu.fan_rpm, readback_pwm=gpu.pwm),
                               Verdict(FanMode.MONITOR_ONLY, fan.why_not))
        if gpu.unresponsive:  # its reads hang: the temperature is unknown, fail hot at once
            decision = failsafe(fan.state, gpu.errors[0].error if gpu.errors else "GPU unresponsive", now)
        else:
            telemetry = tuple(t.temp_c for t in gpu.temps) + (gpu.power_w,)
            decision = decide(fan.params, fan.state, temp_c, crit_c, now, fan.backend.minimum_percent, telemetry)
        fan.state = decision.state
        # The tick's reading read the fan's files before this step: what it saw stands for a read-back, but not
        # on the tick that takes control (the take-over writes them after it).
        seen = Seen.of(gpu) if fan.controlling else NOT_SEEN
        if not fan.controlling and (problem := self._take_control(fan, fan.backend, gpu)):
            return self._unwritable(fan, gpu, problem, Applied(error="not recorded"), temp_c, decision.percent)
        applied = fan.backend.apply(decision.percent, seen)
        if applied.rpm is None:
            # No hwmon tach (RDNA4 before Linux 6.15): the RPM sampled this tick, from gpu_metrics.
            applied.rpm = gpu.fan_rpm
        fan.mode_resets_total += applied.mode_reset
        if applied.mode_reset:
            log.warning("GPU %s: fan mode was reset by the firmware or another tool; re-asserted", gpu.gpu_id)
        if applied.error:
            fan.write_errors_total += 1
            return self._unwritable(fan, gpu, f"fan write failed: {applied.error}", applied, temp_c, decision.percent)
        if fan.uncontrolled is not None:
            log.warning("GPU %s: fan control regained", fan.gpu_id)
            fan.uncontrolled = None
        stalled = stall(fan.stall_ticks, applied.rpm, applied.applied_pwm, fan.settings.stall_after_ticks,
                        written=fan.mode is not FanMode.DRY_RUN)
        fan.stall_ticks = stalled.ticks
        if stalled.started:
            fan.stalls_total += 1
            log.error("GPU %s: fan reports 0 RPM while commanded pwm %s", fan.gpu_id, applied.applied_pwm)
        verdict = driven_verdict(fan.mode, decision, fan.sensor, crit_c, applied.verified, stalled.stalled)
        return self._state(fan, gpu, temp_c, decision.percent, applied, verdict, stalled=stalled.stalled)

    def _take_control(self, fan: GpuFan, backend: FanBackend, gpu: GpuReading) -> str | None:
        """The fan taken from the firmware; else why not (its original could not be recorded: nothing written)."""
        record = backend.original()
        if fan.mode is not FanMode.DRY_RUN:
            # Persisted before the first write, so a SIGKILL right after still leaves the way back; never a write
            # without it (a full or read-only runtime directory: the firmware keeps this fan, retried every tick).
            # The original mode of a record already there (a killed daemon's) stays; the paths are the
            # new ones, so a GPU that came back under a new hwmon index is restored where it is now.
            problem = self.actuator.record_first(fan.gpu_id, record, "fan mode",
                                                 adopt=lambda old: record.adopt(old).to_json())
            if problem:
                return problem
            stored = self.actuator.held(fan.gpu_id)
            backend.adopt(stored)
            record = record.adopt(stored)
        backend.take_control()
        fan.controlling = True
        duty = "" if gpu.pwm_ratio is None else f" at {gpu.pwm_ratio * 100:.0f} %"
        if fan.mode is FanMode.DRY_RUN:  # nothing was written: the fan stays with the firmware
            log.info("GPU %s: dry run: would take the fan%s from the firmware via %s; nothing written, the "
                     "firmware keeps it", fan.gpu_id, duty, backend.name)
            return None
        log.info("GPU %s: took the fan%s from the firmware via %s (handed back as %s)", fan.gpu_id, duty,
                 backend.name, record.handed_back())
        return None

    def _state(self, fan: GpuFan, gpu: GpuReading, temp_c: float | None, percent: float | None, applied: Applied,
               verdict: Verdict, stalled: bool = False) -> FanState:
        return FanState(
            gpu_id=gpu.gpu_id, backend=fan.backend_name, mode=verdict.mode, sensor=fan.sensor, sensor_temp_c=temp_c,
            target_ratio=None if percent is None else percent / 100.0,
            applied_pwm=applied.applied_pwm, readback_pwm=applied.readback_pwm, rpm=applied.rpm,
            stalled=stalled, mode_resets_total=fan.mode_resets_total, write_errors_total=fan.write_errors_total,
            stalls_total=fan.stalls_total, message=verdict.message, failsafe_reason=verdict.failsafe_reason,
            can_rise=can_rise(verdict.mode, percent, fan.top_percent, stalled),
        )

    def restore(self) -> None:
        """Every fan taken back to what it was at start (the actuator's restore-all: each GPU on its fan
        worker within the deadline, never behind a stuck read); safe to call more than once."""
        result = self.actuator.restore_all()
        recorded = self.actuator.recorded()
        for fan in list(self.fans.values()):
            if fan.controlling and fan.gpu_id not in recorded:
                # Handed back: taken again (and recorded again) only by a later tick, with a fresh backend.
                fan.controlling = False
                self._renew.add(fan.gpu_id)
        if result.problems:
            raise RestoreFailed("fan restore failed for " + ", ".join(result.problems))
