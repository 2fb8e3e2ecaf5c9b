"""The clock controller the daemon runs: per GPU and tick, probe -> law -> write (verified) -> publish.

Implements the daemon's ClockConsumer (``tick(snapshot, fans, powers, config)``, ``restore()``), the third rung
of fan -> power cap -> clock -> pause. Per GPU: a backend probed, never guessed (the OD table, else the level
mask: gpu_clock.probe_backend; NVML's locked clocks for NVIDIA GPUs), the law (law.py) with this tick's
headroom and whether the rungs below are exhausted, the writes through the clocks' Actuator (the original
recorded before the first write of every episode; every step on the GPU's worker within the sysfs
deadline: a stuck write costs one deadline, published as blocked, never the loop).
A ceiling we hold is read back every tick: one that reads otherwise (a GPU reset, another tool) is logged,
counted (``resets_total``) and written again, as the fan controller takes a pwm1_enable reset back. A GPU
whose ceiling cannot be set is published as unavailable with the reason, and paused at the cap's floor.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

from gpuwatch.actuation.setting import HeldControl, SettingUnavailable, SettingWriteError
from gpuwatch.clock.backend import VERIFY_TOLERANCE_MHZ, ClockBackend
from gpuwatch.clock.dpm_mask import DpmMaskClock, DpmMaskRestore
from gpuwatch.clock.gpu_clock import GpuClock, cap_exhausted, probe_backend
from gpuwatch.clock.law import ClockInputs, ClockParams, ceilings, decide
from gpuwatch.clock.nvml_clock import NvmlClock
from gpuwatch.clock.od_table import OdTableClock
from gpuwatch.clock.restore import give_back, kind
from gpuwatch.config.base import DEFAULT_SYSFS_DEADLINE_S
from gpuwatch.config.file import Config
from gpuwatch.gpus.amdgpu import Locate
from gpuwatch.limits import headroom_c, thermals_on
from gpuwatch.model import Acted, ClockMode, ClockState, GpuReading, Snapshot
from gpuwatch.sysfs import Sysfs

log = logging.getLogger("gpuwatch.clock")
# Under this share busy the card is idle (an evaluation's gaps, a pause): its clock is DPM's idle clock.
IDLE_BUSY_RATIO = 0.5


class ClockController(HeldControl[GpuClock, Locate]):
    what, instead = "clock ceiling", "a hot card at the cap's floor is paused instead"

    def __init__(self, sysfs: Sysfs, runtime_dir: Path, *, locate: Locate, nvml: Any = None,
                 clock: Callable[[], float] = time.monotonic, check_access: bool = True,
                 deadline_s: float = DEFAULT_SYSFS_DEADLINE_S) -> None:
        super().__init__(kind, log, sysfs, runtime_dir, locate, nvml, clock, check_access, deadline_s)

    def tick(self, snapshot: Snapshot, below: Acted, config: Config) -> tuple[ClockState, ...]:
        """Each GPU's step under the live ``config``, on its worker within the deadline (``Actuator.run``)."""
        now = self.clock()
        fan_of = {fan.gpu_id: fan for fan in below.fans}
        power_of = {power.gpu_id: power for power in below.powers}
        steps: dict[str, Callable[[], ClockState]] = {}
        for gpu in snapshot.gpus:
            g = self.gpus.get(gpu.gpu_id) or self._new(gpu, config)
            settings = config.power.for_gpu(gpu.gpu_id)
            params = ClockParams(settings.hold_margin_c, settings.clock_floor_percent / 100.0,
                                 settings.idle_restore_after_s)
            exhausted = cap_exhausted(power_of.get(gpu.gpu_id), fan_of.get(gpu.gpu_id))
            room = headroom_c(gpu, thermals_on(config, gpu.gpu_id))
            steps[gpu.gpu_id] = partial(self._tick_one, g, gpu, params, now, room, exhausted)
        ran = self.stuck.results(self.actuator.run(steps), self._blocked)
        return tuple(ran[gpu.gpu_id] for gpu in snapshot.gpus)

    def _new(self, gpu: GpuReading, config: Config) -> GpuClock:
        setting = config.power.for_gpu(gpu.gpu_id).clock
        mode = {"govern": ClockMode.IDLE, "dry-run": ClockMode.DRY_RUN, "off": ClockMode.OFF}[setting]
        quiet = config.fan.mode in ("dry-run", "monitor-only") or config.power.mode == "dry-run"
        if mode is ClockMode.IDLE and quiet:
            log.info("GPU %s: clock ceiling in dry-run (fan.mode %r, power.mode %r)", gpu.gpu_id, config.fan.mode,
                     config.power.mode)
            mode = ClockMode.DRY_RUN
        g = self.gpus[gpu.gpu_id] = GpuClock(gpu_id=gpu.gpu_id, mode=mode)
        if mode is not ClockMode.OFF or gpu.gpu_id in self.actuator.recorded():
            g.backend = self._backend_for(gpu)
        return g

    def _backend_for(self, gpu: GpuReading) -> ClockBackend | None:
        if gpu.backend == "nvml":
            return NvmlClock(self.nvml, gpu.gpu_id) if self.nvml is not None else None
        record = self.actuator.record_of(gpu.gpu_id)
        mask = isinstance(record, DpmMaskRestore)  # a killed daemon's, given back
        return (DpmMaskClock if mask else OdTableClock)(self.sysfs, gpu.gpu_id, self.locate, self.check_access)

    def _probe(self, g: GpuClock, params: ClockParams) -> None:
        """Find the backend the card offers: the OD table, else the level mask (never guessed)."""
        assert g.backend is not None
        if not self._adopt(g):
            return
        probed = self.holder.probe(g, partial(probe_backend, g.backend, self.sysfs, self.locate, self.check_access))
        if probed is None:
            return
        g.backend, g.found = probed
        found = probed[1]
        g.ceilings_mhz = ceilings(found.original_mhz, found.min_mhz, params.floor_ratio, found.levels_mhz)
        if len(g.ceilings_mhz) < 2:
            self.holder.give_up(g, f"no ceiling between the floor ({params.floor_ratio:.0%} of "
                                   f"{found.original_mhz:g} MHz) and the card's maximum ({g.backend.name}, lowest "
                                   f"{found.min_mhz:g} MHz)")
            return
        if g.mode is not ClockMode.OFF:
            log.info("GPU %s: shader clock %g MHz (%s), lowered down to %g MHz when the cap is at its floor%s",
                     g.gpu_id, found.original_mhz, g.backend.name, g.ceilings_mhz[0],
                     " (dry-run)" if g.mode is ClockMode.DRY_RUN else "")

    def _adopt(self, g: GpuClock) -> bool:
        """A ceiling a daemon that did not exit cleanly left (its record, the true original) goes back before the
        probe: the probe would take what it left for the card's own (a level mask left ``manual``, say). False:
        it could not be given back (given up, the record kept for `gpuwatch restore`)."""
        assert g.backend is not None
        record = self.actuator.record_of(g.gpu_id)
        if record is None or record.backend != g.backend.name:
            return True
        log.warning("GPU %s: a clock ceiling left by a daemon that did not exit cleanly (%s): given back",
                    g.gpu_id, self.actuator.file.path)
        problem = give_back(g.backend, record)
        if problem:
            g.probed, g.holding = True, True
            self.holder.give_up(g, problem)
            return False
        self.actuator.forget(g.gpu_id)
        return True

    def _tick_one(self, g: GpuClock, gpu: GpuReading, params: ClockParams, now: float, headroom: float | None,
                  exhausted: bool) -> ClockState:
        dt = g.step_s(now)
        if g.mode is ClockMode.UNAVAILABLE or not gpu.up or gpu.suspended:
            return self._published(g)
        if not g.probed and g.backend is not None:
            self._probe(g, params)
        if g.mode is ClockMode.OFF:
            self.holder.give_back(g)
            return self._published(g)
        if not g.governable:
            return self._published(g)
        if g.holding:
            self._check_in_force(g)
        decision = decide(params, g.law, ClockInputs(now, headroom, exhausted, g.ceilings_mhz, running_mhz(gpu)))
        g.law, g.target = decision.state, decision.ceiling_mhz
        g.pause_allowed = decision.pause_allowed or g.mode is ClockMode.DRY_RUN
        if decision.write and g.mode is ClockMode.DRY_RUN:
            log.info("GPU %s: dry-run: would set the shader clock ceiling to %s", g.gpu_id,
                     "the card's maximum" if decision.ceiling_mhz is None else f"{decision.ceiling_mhz:g} MHz")
        elif decision.write:
            if decision.ceiling_mhz is None:
                self.holder.give_back(g)
            else:
                self._write(g, decision.ceiling_mhz)
        if g.holding:
            g.limited_s += dt
        return self._published(g)

    def _check_in_force(self, g: GpuClock) -> None:
        """The ceiling we wrote must still be in force: a GPU reset or another tool is seen and taken back."""
        assert g.backend is not None
        if g.written is None:
            return
        observed = g.backend.current_mhz()
        if observed is None or abs(observed - g.written) < VERIFY_TOLERANCE_MHZ:
            return
        g.resets_total += 1
        log.warning("GPU %s: shader clock ceiling reads %g MHz, %g MHz was written (a GPU reset or another tool): "
                    "taken again", g.gpu_id, observed, g.written)
        self._write(g, g.written)

    def _write(self, g: GpuClock, ceiling_mhz: float) -> None:
        assert g.backend is not None
        if not g.holding:
            try:
                g.found = g.backend.probe()  # the original in force now (a user's new maximum is the one to give back)
            except (SettingUnavailable, SettingWriteError) as exc:
                self.holder.failed(g, f"clock ceiling probe before the first write failed: {exc}")
                return
        back = self.holder.write(g, ceiling_mhz, g.backend.record, g.backend.write)
        if back is None:
            return
        if abs(back - ceiling_mhz) >= VERIFY_TOLERANCE_MHZ:
            self.holder.failed(g, f"shader clock ceiling reads {back:g} MHz after writing {ceiling_mhz:g} MHz")
            return
        g.failures = 0
        log.info("GPU %s: shader clock ceiling %g MHz", g.gpu_id, back)

    def _give_back(self, g: GpuClock) -> str | None:
        """The recorded original put back, verified."""
        assert g.backend is not None
        record = self.actuator.record_of(g.gpu_id) or g.backend.record()
        problem = give_back(g.backend, record)
        if problem is None:
            log.info("GPU %s: %s", g.gpu_id, record.handed_back())
        return problem

    def _blocked(self, gpu_id: str, reason: str) -> ClockState:
        """A GPU whose step is stuck on its worker: published as such, a hot card paused instead."""
        return replace(self._published(self.gpus[gpu_id]), pause_allowed=True, reason=reason)

    def _published(self, g: GpuClock) -> ClockState:
        mode = g.mode
        if mode is ClockMode.IDLE and g.law.index is not None:
            mode = ClockMode.FLOOR if g.law.index == 0 else ClockMode.LIMITING
        return ClockState(
            gpu_id=g.gpu_id, mode=mode, backend=None if g.backend is None else g.backend.name,
            ceiling_mhz=g.written if g.holding else None, target_ceiling_mhz=g.target,
            original_mhz=None if g.found is None else g.found.original_mhz,
            floor_mhz=g.ceilings_mhz[0] if len(g.ceilings_mhz) > 1 else None,
            pause_allowed=g.pause_allowed or mode not in (ClockMode.LIMITING,), limited_seconds_total=g.limited_s,
            writes_total=g.writes_total, write_errors_total=g.write_errors_total, resets_total=g.resets_total,
            reason=g.reason,
        )


def running_mhz(gpu: GpuReading) -> float | None:
    """The shader clock the card runs at under its load: gpu_metrics' average gfxclk (smu_v13_0_0_get_gpu_metrics
    fills average_gfxclk_frequency), else the current one (hwmon freq1_input, amdgpu_hwmon_show_sclk; NVML's
    graphics clock); 0 while the card is idle (gpu_busy_percent under IDLE_BUSY_RATIO: its clock then says
    nothing of what a ceiling does). The law starts its steps there: an RDNA3 card runs below its overdrive
    maximum (LACT #1068)."""
    if gpu.gpu_busy_ratio is not None and gpu.gpu_busy_ratio < IDLE_BUSY_RATIO:
        return 0.0
    hz = gpu.sclk_average_hz if gpu.sclk_average_hz is not None else gpu.sclk_hz
    return None if hz is None or hz <= 0 else hz / 1e6
