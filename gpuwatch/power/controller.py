"""The power controller the daemon runs: per GPU and tick, probe -> decide -> write (verified) -> publish.

Implements the daemon's PowerConsumer (``tick(snapshot, fans, config)``, ``restore()``). Per GPU it finds a
cap backend (amdgpu hwmon ``power1_cap`` through the amdgpu source's ``locate``, so a card back under
another hwmon index is written where it now is; NVML's limit for NVIDIA GPUs), the cap in force at start
(after a crash: the original in the restore file), the floor and the thermal limits of the live
configuration, then runs the pure law (governor.py) with this tick's readings and the fan's state. The
writes go through the caps' Actuator (gpuwatch.actuation; the kind in restore.py): the original is
recorded before the first write, and a GPU's step that touches the hardware runs on its own worker within
the sysfs deadline: a write stuck in the driver costs one deadline (published as blocked), never the loop
or the shutdown.

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

from gpuwatch.actuation import FAILURES_BEFORE_GIVING_UP, Actuator, RestoreFailed, Stuck
from gpuwatch.config.base import DEFAULT_SYSFS_DEADLINE_S
from gpuwatch.config.cooling import ThermalConfig
from gpuwatch.config.file import Config
from gpuwatch.handback import Locate
from gpuwatch.model import Acted, FanState, GpuReading, PowerMode, PowerState, Snapshot
from gpuwatch.power.backend import VERIFY_TOLERANCE_W, CapUnavailable, CapWriteError
from gpuwatch.power.governor import GovernorState, floor_cap_w, governor_params
from gpuwatch.power.gpu_cap import GpuCap, touches_hardware
from gpuwatch.power.hwmon_cap import HwmonCap
from gpuwatch.power.nvml_cap import NvmlCap
from gpuwatch.power.restore import RECORDS, give_back, kind
from gpuwatch.power.rules import cap_range_problem, thermals_on, throughput_kept_ratio
from gpuwatch.sysfs import Sysfs

log = logging.getLogger("gpuwatch.power")


class PowerController:
    def __init__(self, sysfs: Sysfs, runtime_dir: Path, *, locate: Locate, nvml: Any = None,
                 clock: Callable[[], float] = time.monotonic, check_access: bool = True,
                 deadline_s: float = DEFAULT_SYSFS_DEADLINE_S) -> None:
        self.sysfs = sysfs
        self.locate = locate
        self.nvml = nvml
        self.clock = clock
        self.check_access = check_access
        self.actuator = Actuator(kind(sysfs, lambda: nvml, locate), runtime_dir, deadline_s)
        self.gpus: dict[str, GpuCap] = {}
        self.stuck = Stuck(log, "power cap")

    def tick(self, snapshot: Snapshot, below: Acted, config: Config) -> tuple[PowerState, ...]:
        """Each GPU's step; ``config`` is the live configuration (its limits in force now). A step that touches
        the hardware this tick (``touches_hardware``) runs on the GPU's worker within the deadline, all such
        steps at once; one that only decides runs here and costs no hand-off (the common tick)."""
        now = self.clock()
        by_gpu = {fan.gpu_id: fan for fan in below.fans}
        steps: dict[str, Callable[[], PowerState]] = {}
        touches: dict[str, Callable[[], bool]] = {}
        for gpu in snapshot.gpus:
            g = self.gpus.get(gpu.gpu_id) or self._new(gpu, config)
            fan, thermals = by_gpu.get(gpu.gpu_id), thermals_on(config, gpu.gpu_id)
            steps[gpu.gpu_id] = partial(self._tick_one, g, gpu, fan, now, thermals)
            touches[gpu.gpu_id] = partial(touches_hardware, g, gpu, fan, now, thermals)
        readings = {gpu.gpu_id: gpu for gpu in snapshot.gpus}
        ran = self.stuck.results(self.actuator.step_all(steps, touches),
                                 lambda gpu_id, reason: self._blocked(self.gpus[gpu_id], readings[gpu_id], reason))
        return tuple(ran[gpu.gpu_id] for gpu in snapshot.gpus)

    def _new(self, gpu: GpuReading, config: Config) -> GpuCap:
        settings = config.power.for_gpu(gpu.gpu_id)
        mode = {"govern": PowerMode.IDLE, "dry-run": PowerMode.DRY_RUN, "off": PowerMode.OFF}[settings.mode]
        if mode is PowerMode.IDLE and config.fan.mode in ("dry-run", "monitor-only"):
            # Those modes promise a daemon that writes nothing to the hardware.
            log.info("GPU %s: power cap in dry-run because fan.mode = %r", gpu.gpu_id, config.fan.mode)
            mode = PowerMode.DRY_RUN
        g = self.gpus[gpu.gpu_id] = GpuCap(gpu.gpu_id, governor_params(settings), mode)
        # Off leaves the cap alone, except one a killed daemon left lowered (its record): that goes back.
        if mode is not PowerMode.OFF or gpu.gpu_id in self.actuator.recorded():
            if gpu.backend == "nvml":
                g.backend = NvmlCap(self.nvml, gpu.gpu_id) if self.nvml is not None else None
            else:
                g.backend = HwmonCap(self.sysfs, gpu.gpu_id, self.locate, self.check_access)
        return g

    def _probe(self, g: GpuCap) -> None:
        try:
            if g.backend is None:
                raise CapUnavailable("NVML is not loaded")
            found = g.backend.probe()
        except CapUnavailable as exc:
            g.probed = True
            self._give_up(g, str(exc))
            return
        except CapWriteError as exc:
            # A read that may work next tick (an empty power1_cap: the limit query failed): probed again
            # then, never given up for good on one bad read.
            reason = f"power cap not known yet: {exc}; probed again every tick"
            if g.reason != reason:
                log.warning("GPU %s: %s", g.gpu_id, reason)
            g.reason = reason
            return
        g.probed = True
        if g.reason is not None:
            log.info("GPU %s: power cap readable again", g.gpu_id)
            g.reason = None
        stored = self.actuator.recorded().get(g.gpu_id)
        kept = (RECORDS[g.backend.name](stored).original_w
                if isinstance(stored, dict) and stored.get("backend") == g.backend.name else None)
        g.original_w, g.holding = (kept, True) if kept is not None else (found.cap_w, False)
        if kept is not None:
            log.warning("GPU %s: original power cap %g W from %s (the %g W in force was left by a daemon that "
                        "did not exit cleanly)", g.gpu_id, kept, self.actuator.file.path, found.cap_w)
        g.default_w, g.min_w = found.default_w or g.original_w, found.min_w
        self._set_floor(g)
        problem = cap_range_problem(g.original_w, g.floor_w or g.original_w, found.max_w)
        if problem:
            self._give_up(g, problem)
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
        """One GPU's step (on its worker when it touches the hardware)."""
        dt, g.last_now = (0.0 if g.last_now is None else max(0.0, now - g.last_now)), now
        if g.mode is PowerMode.UNAVAILABLE or not gpu.up or gpu.suspended:
            return self._published(g, gpu, None)
        if not g.probed and g.backend is not None:
            self._probe(g)
        if g.mode is PowerMode.OFF:
            if g.holding:
                self._give_back(g)
            return self._published(g, gpu, None)
        observed = g.backend.current_w(gpu) if g.governable and g.backend is not None else None
        if observed is None:
            return self._published(g, gpu, None)  # not governable, or unreadable this tick: decide nothing
        self._check_in_force(g, observed)
        if not g.governable:
            return self._published(g, gpu, observed)
        assert g.original_w is not None
        decision = g.decide(g.inputs(gpu, fan, now, thermals, observed))
        g.state, g.target_w = decision.state, decision.cap_w
        g.pause_allowed = decision.pause_allowed or g.mode is PowerMode.DRY_RUN
        if decision.write:
            observed = self._write(g, decision.cap_w, observed)
        if observed < g.original_w - VERIFY_TOLERANCE_W:
            g.capped_s += dt
        return self._published(g, gpu, observed, at_floor=decision.at_floor)

    def _check_in_force(self, g: GpuCap, observed: float) -> None:
        """What we wrote must still be in force; while we hold nothing, a new cap is the user's."""
        assert g.original_w is not None
        if g.written_w is not None and abs(observed - g.written_w) >= VERIFY_TOLERANCE_W:
            g.failures += 1
            log.warning("GPU %s: power cap reads %g W, %g W was written (a GPU reset, the firmware or another "
                        "tool; %d/%d)", g.gpu_id, observed, g.written_w, g.failures, FAILURES_BEFORE_GIVING_UP)
            if g.failures >= FAILURES_BEFORE_GIVING_UP:
                self._give_up(g, f"power cap does not keep what is written ({observed:g} W after {g.written_w:g} W): "
                                 "the firmware or another tool manages it")
            return
        if not g.write_failed:
            g.failures = 0  # what we wrote is in force (after a failed write, the old cap in force proves nothing)
        if not g.holding and g.written_w is None and abs(observed - g.original_w) >= VERIFY_TOLERANCE_W:
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
        first = not g.holding
        if first:
            # Persisted before the first write, so a SIGKILL right after still leaves the way back; never a write
            # without it (a full or read-only runtime directory: nothing is written, the card pauses instead).
            problem = self.actuator.record_first(g.gpu_id, g.backend.record(g.original_w), "power cap")
            if problem:
                self._failed(g, problem)
                return observed
            g.holding = True
        try:
            back = g.backend.write(cap_w)
        except CapUnavailable as exc:
            if first:  # refused outright: nothing of ours is in force
                g.holding = False
                self.actuator.forget(g.gpu_id)
            self._give_up(g, str(exc))
            return observed
        except CapWriteError as exc:
            self._failed(g, str(exc))
            return observed
        g.writes_total += 1
        g.written_w, g.write_failed = cap_w, False
        if abs(back - cap_w) >= VERIFY_TOLERANCE_W:
            g.failures += 1
            log.warning("GPU %s: power cap reads %g W after writing %g W", g.gpu_id, back, cap_w)
        elif abs(back - g.original_w) < VERIFY_TOLERANCE_W:
            self._released(g)
        else:
            log.info("GPU %s: power cap %g W -> %g W", g.gpu_id, observed, back)
        return back

    def _failed(self, g: GpuCap, problem: str) -> None:
        """A write that failed or could not be made: counted and said; a few in a row give up."""
        g.write_errors_total += 1
        g.failures += 1
        g.write_failed = True
        log.error("GPU %s: %s", g.gpu_id, problem)
        if g.failures >= FAILURES_BEFORE_GIVING_UP:
            self._give_up(g, f"{FAILURES_BEFORE_GIVING_UP} power cap writes failed in a row, last: {problem}")

    def _released(self, g: GpuCap) -> None:
        """The original is in force again: nothing of ours to give back."""
        log.info("GPU %s: power cap back to its original %g W", g.gpu_id, g.original_w)
        g.holding, g.written_w = False, None
        self.actuator.forget(g.gpu_id)

    def _give_up(self, g: GpuCap, reason: str) -> None:
        """Unavailable from now on: logged once, published, the supervisor pauses as without a governor."""
        log.warning("GPU %s: power cap not governed: %s; a hot card is paused instead", g.gpu_id, reason)
        g.mode, g.reason, g.pause_allowed, g.target_w = PowerMode.UNAVAILABLE, reason, True, None
        self._give_back(g)

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
            target_cap_w=g.target_w, original_cap_w=g.original_w, floor_cap_w=g.floor_w,
            pause_allowed=g.pause_allowed or mode is not PowerMode.GOVERNING, capped_seconds_total=g.capped_s,
            throughput_kept_ratio=throughput_kept_ratio(cap_w, g.original_w, gpu.power_w, default),
            writes_total=g.writes_total, write_errors_total=g.write_errors_total, reason=g.reason,
        )

    def restore(self) -> None:
        """Every cap we lowered back to what it was at start, verified (the actuator's restore-all, each GPU
        on its worker within the deadline); safe to call more than once."""
        result = self.actuator.restore_all()
        recorded = self.actuator.recorded()
        for g in self.gpus.values():
            if g.holding and g.gpu_id not in recorded:
                g.holding, g.written_w, g.state = False, None, GovernorState()
        if result.problems:
            raise RestoreFailed("power cap restore failed for " + ", ".join(result.problems))

    def _give_back(self, g: GpuCap) -> str | None:
        """The original back if we hold a lowered cap; the problem when it did not stick (record kept)."""
        if not g.holding or g.backend is None or g.original_w is None:
            return None
        problem = give_back(g.backend, g.original_w)
        if problem:
            log.error("GPU %s: %s (run gpuwatch restore)", g.gpu_id, problem)
            return problem
        self._released(g)
        g.state = GovernorState()
        return None
