"""The power controller the daemon runs: per GPU and tick, probe -> decide -> write (verified) -> publish.

Implements the daemon's PowerConsumer (``tick(snapshot, fans, config)``, ``restore()``). Per GPU it finds a
cap backend (amdgpu hwmon ``power1_cap`` through the amdgpu source's ``locate``, so a card back under
another hwmon index is written where it now is; NVML's limit for NVIDIA GPUs), the cap in force at start
(after a crash: the original in the restore file), the floor and the thermal limits of the live
configuration, then runs the pure law (governor.py) with this tick's readings and the fan's state. The
writes go through the caps' Actuator (gpuwatch.actuation; the kind in restore.py): the original is
recorded before the first write, and every GPU's step runs on its own worker within the sysfs deadline: a
write stuck in the driver costs one deadline (published as blocked), never the loop or the shutdown.

A GPU whose cap cannot be governed (no file, not writable, no range, refused writes, a cap that does not
keep what is written) is published as unavailable with the reason, logged once, and paused as without a
governor. ``restore()`` is the actuator's restore-all (`gpuwatch restore` runs it after a crash).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

from gpuwatch.actuation.actuator import FAILURES_BEFORE_GIVING_UP
from gpuwatch.actuation.setting import HeldControl
from gpuwatch.config.base import DEFAULT_SYSFS_DEADLINE_S
from gpuwatch.config.cooling import ThermalConfig
from gpuwatch.config.file import Config
from gpuwatch.gpus.amdgpu import Locate
from gpuwatch.limits import ThermalsOn
from gpuwatch.model import Acted, FanState, GpuReading, PowerMode, PowerState, Snapshot
from gpuwatch.power.backend import VERIFY_TOLERANCE_W
from gpuwatch.power.governor import decide, floor_cap_w, governor_params
from gpuwatch.power.gpu_cap import GpuCap
from gpuwatch.power.hwmon_cap import HwmonCap
from gpuwatch.power.nvml_cap import NvmlCap
from gpuwatch.power.restore import give_back, kind
from gpuwatch.power.rules import cap_range_problem, throughput_kept_ratio
from gpuwatch.sysfs import Sysfs

log = logging.getLogger("gpuwatch.power")


class PowerController(HeldControl[GpuCap, Locate]):
    what, instead = "power cap", "a hot card is paused instead"

    def __init__(self, sysfs: Sysfs, runtime_dir: Path, *, locate: Locate, nvml: Any = None,
                 clock: Callable[[], float] = time.monotonic, check_access: bool = True,
                 deadline_s: float = DEFAULT_SYSFS_DEADLINE_S) -> None:
        super().__init__(kind, log, sysfs, runtime_dir, locate, nvml, clock, check_access, deadline_s)
        self.thermals_on = ThermalsOn()  # each GPU's limit sets, made once per configuration

    def tick(self, snapshot: Snapshot, below: Acted, config: Config) -> tuple[PowerState, ...]:
        """Each GPU's step on its worker within the deadline, all at once (``Actuator.run``); ``config`` is the
        live configuration (its limits in force now)."""
        now = self.clock()
        by_gpu = {fan.gpu_id: fan for fan in below.fans}
        steps: dict[str, Callable[[], PowerState]] = {}
        for gpu in snapshot.gpus:
            g = self.gpus.get(gpu.gpu_id) or self._new(gpu, config)
            fan, thermals = by_gpu.get(gpu.gpu_id), self.thermals_on(config, gpu.gpu_id)
            steps[gpu.gpu_id] = partial(self._tick_one, g, gpu, fan, now, thermals)
        readings = {gpu.gpu_id: gpu for gpu in snapshot.gpus}
        ran = self.stuck.results(self.actuator.run(steps),
                                 lambda gpu_id, reason: self._blocked(self.gpus[gpu_id], readings[gpu_id], reason))
        return tuple(ran[gpu.gpu_id] for gpu in snapshot.gpus)

    def _new(self, gpu: GpuReading, config: Config) -> GpuCap:
        settings = config.power.for_gpu(gpu.gpu_id)
        mode = {"govern": PowerMode.IDLE, "dry-run": PowerMode.DRY_RUN, "off": PowerMode.OFF}[settings.mode]
        if mode is PowerMode.IDLE and config.fan.mode in ("dry-run", "monitor-only"):
            # Those modes promise a daemon that writes nothing to the hardware.
            log.info("GPU %s: power cap in dry-run because fan.mode = %r", gpu.gpu_id, config.fan.mode)
            mode = PowerMode.DRY_RUN
        g = self.gpus[gpu.gpu_id] = GpuCap(gpu_id=gpu.gpu_id, params=governor_params(settings), mode=mode)
        # Off leaves the cap alone, except one a killed daemon left lowered (its record): that goes back.
        if mode is not PowerMode.OFF or gpu.gpu_id in self.actuator.recorded():
            if gpu.backend == "nvml":
                g.backend = NvmlCap(self.nvml, gpu.gpu_id) if self.nvml is not None else None
            else:
                g.backend = HwmonCap(self.sysfs, gpu.gpu_id, self.locate, self.check_access)
        return g

    def _probe(self, g: GpuCap) -> None:
        assert g.backend is not None
        found = self.holder.probe(g, g.backend.probe)
        if found is None:
            return
        record = self.actuator.record_of(g.gpu_id)
        kept = record.original_w if record is not None and record.backend == g.backend.name else None
        g.original_w, g.holding = (kept, True) if kept is not None else (found.cap_w, False)
        if kept is not None:
            log.warning("GPU %s: original power cap %g W from %s (the %g W in force was left by a daemon that "
                        "did not exit cleanly)", g.gpu_id, kept, self.actuator.file.path, found.cap_w)
        g.default_w, g.min_w = found.default_w or g.original_w, found.min_w
        self._set_floor(g)
        problem = cap_range_problem(g.original_w, g.floor_w or g.original_w, found.max_w)
        if problem:
            self.holder.give_up(g, problem)
            return
        if g.mode is not PowerMode.OFF:
            log.info("GPU %s: power cap %g W (default %g W), governed down to %g W when the fan cannot cool it%s",
                     g.gpu_id, g.original_w, g.default_w, g.floor_w,
                     " (dry-run)" if g.mode is PowerMode.DRY_RUN else "")

    def _set_floor(self, g: GpuCap) -> None:
        assert g.original_w is not None and g.default_w is not None
        g.floor_w = floor_cap_w(g.params.floor_ratio, g.default_w, g.min_w, g.original_w)

    def _tick_one(self, g: GpuCap, gpu: GpuReading, fan: FanState | None, now: float,
                  thermals: list[ThermalConfig]) -> PowerState:
        """One GPU's step, on its worker."""
        dt = g.step_s(now)
        if g.mode is PowerMode.UNAVAILABLE or not gpu.up or gpu.suspended:
            return self._published(g, gpu, None)
        if not g.probed and g.backend is not None:
            self._probe(g)
        if g.mode is PowerMode.OFF:
            self.holder.give_back(g)
            return self._published(g, gpu, None)
        observed = g.backend.current_w(gpu) if g.governable and g.backend is not None else None
        if observed is None:
            return self._published(g, gpu, None)  # not governable, or unreadable this tick: decide nothing
        self._check_in_force(g, observed)
        if not g.governable:
            return self._published(g, gpu, observed)
        assert g.original_w is not None
        decision = decide(g.params, g.state, g.inputs(gpu, fan, now, thermals, observed))
        g.state, g.target = decision.state, decision.cap_w
        g.pause_allowed = decision.pause_allowed or g.mode is PowerMode.DRY_RUN or g.unrecorded
        if decision.write:
            observed = self._write(g, decision.cap_w, observed)
        if observed < g.original_w - VERIFY_TOLERANCE_W:
            g.capped_s += dt
        return self._published(g, gpu, observed, at_floor=decision.at_floor)

    def _check_in_force(self, g: GpuCap, observed: float) -> None:
        """What we wrote must still be in force; while we hold nothing, a new cap is the user's."""
        assert g.original_w is not None
        if g.written is not None and abs(observed - g.written) >= VERIFY_TOLERANCE_W:
            g.failures += 1
            log.warning("GPU %s: power cap reads %g W, %g W was written (a GPU reset, the firmware or another "
                        "tool; %d/%d)", g.gpu_id, observed, g.written, g.failures, FAILURES_BEFORE_GIVING_UP)
            if g.failures >= FAILURES_BEFORE_GIVING_UP:
                self.holder.give_up(g, f"power cap does not keep what is written ({observed:g} W after "
                                       f"{g.written:g} W): the firmware or another tool manages it")
            return
        if not g.write_failed:
            g.failures = 0  # what we wrote is in force (after a failed write, the old cap in force proves nothing)
        if not g.holding and g.written is None and abs(observed - g.original_w) >= VERIFY_TOLERANCE_W:
            log.info("GPU %s: power cap changed to %g W outside gpuwatch: that is the cap to give back now",
                     g.gpu_id, observed)
            g.original_w = observed
            self._set_floor(g)

    def _write(self, g: GpuCap, cap_w: float, observed: float) -> float:
        """Write ``cap_w`` (persisting the original first); returns the cap in force afterwards."""
        assert g.backend is not None and g.original_w is not None
        if g.mode is PowerMode.DRY_RUN:
            log.info("GPU %s: dry-run: would set the power cap to %g W (in force %g W, original %g W)",
                     g.gpu_id, cap_w, observed, g.original_w)
            g.dry_run_cap_w = cap_w
            return observed
        back = self.holder.write(g, cap_w, partial(g.backend.record, g.original_w), g.backend.write)
        if back is None:
            return observed
        if abs(back - cap_w) >= VERIFY_TOLERANCE_W:
            g.failures += 1
            log.warning("GPU %s: power cap reads %g W after writing %g W", g.gpu_id, back, cap_w)
        elif abs(back - g.original_w) < VERIFY_TOLERANCE_W:
            log.info("GPU %s: power cap back to its original %g W", g.gpu_id, g.original_w)
            self.holder.release(g, law=False)
        else:
            log.info("GPU %s: power cap %g W -> %g W", g.gpu_id, observed, back)
        return back

    def _blocked(self, g: GpuCap, gpu: GpuReading, reason: str) -> PowerState:
        """The GPU's cap I/O has not returned within the deadline (a write stuck in the driver): published
        as such, and a hot card is paused as without a governor until the call returns."""
        return replace(self._published(g, gpu, None), pause_allowed=True, reason=reason)

    def _published(self, g: GpuCap, gpu: GpuReading, cap_w: float | None, at_floor: bool = False) -> PowerState:
        mode = g.mode
        if mode is PowerMode.IDLE and g.state.phase == "governing":
            mode = PowerMode.FLOOR if at_floor else PowerMode.GOVERNING
        default = g.default_w or g.original_w or 0.0
        return PowerState(
            gpu_id=g.gpu_id, mode=mode, backend=None if g.backend is None else g.backend.name, cap_w=cap_w,
            target_cap_w=g.target, original_cap_w=g.original_w, floor_cap_w=g.floor_w,
            pause_allowed=g.pause_allowed or mode is not PowerMode.GOVERNING, capped_seconds_total=g.capped_s,
            throughput_kept_ratio=throughput_kept_ratio(cap_w, g.original_w, gpu.power_w, default),
            writes_total=g.writes_total, write_errors_total=g.write_errors_total, reason=g.reason,
        )

    def _give_back(self, g: GpuCap) -> str | None:
        assert g.backend is not None and g.original_w is not None
        problem = give_back(g.backend, g.original_w)
        if problem is None:
            log.info("GPU %s: power cap back to its original %g W", g.gpu_id, g.original_w)
        return problem
