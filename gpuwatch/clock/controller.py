"""The clock controller the daemon runs: per GPU and tick, probe -> law -> write (verified) -> publish.

Implements the daemon's ClockConsumer (``tick(snapshot, fans, powers, config)``, ``restore()``), the third rung
of fan -> power cap -> clock -> pause. Per GPU: a backend probed, never guessed (the OD table, else the level
mask: gpu_clock.probe_backend; NVML's locked clocks for NVIDIA GPUs), the law (law.py) with this tick's
headroom and whether the rungs below are exhausted, the writes through the clocks' Actuator (the original
recorded before the first write of every episode; every step on the GPU's worker within the sysfs
deadline: a stuck write costs one deadline, published as blocked, never the loop).
A ceiling we hold is read back every tick: one that reads otherwise (a GPU reset, another tool) is logged,
counted (``resets_total``) and written again, as the fan controller takes a pwm1_enable reset back; on the OD
table a maximum that is neither ours nor the original is the user's (issue 49): the new original, never
raised above, given back at exit. A step down the card refuses (EINVAL: its unprinted GfxclkFmax minimum) is
its floor: the last ceiling it took is held, and the pause rung acts below it. What the card runs at under
load verifies a commit (in_force.py): above it after the settle time, committed once more, then reported as
not taking effect (pause allowed). A GPU whose ceiling cannot be set is published as unavailable with the
reason, and paused at the cap's floor.
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
from gpuwatch.clock.backend import VERIFY_TOLERANCE_MHZ, CeilingRefused, ClockBackend
from gpuwatch.clock.dpm_mask import SCLK_FILE, DpmMaskClock, DpmMaskRestore, parse_sclk
from gpuwatch.clock.gpu_clock import GpuClock, cap_exhausted, probe_backend
from gpuwatch.clock.in_force import SETTLE_S, operating_mhz, running_mhz, verdict
from gpuwatch.clock.law import ClockInputs, ClockParams, ceilings, decide
from gpuwatch.clock.nvml_clock import NvmlClock
from gpuwatch.clock.od_table import OdTableClock, OdTableRestore
from gpuwatch.clock.restore import give_back, kind
from gpuwatch.config.base import DEFAULT_SYSFS_DEADLINE_S
from gpuwatch.config.cooling import ThermalConfig
from gpuwatch.config.file import Config
from gpuwatch.gpus.amdgpu import Locate
from gpuwatch.limits import ThermalsOn, headroom_c
from gpuwatch.model import Acted, ClockMode, ClockState, FanState, GpuReading, PowerState, Snapshot
from gpuwatch.sysfs import Sysfs, SysfsError

log = logging.getLogger("gpuwatch.clock")
# Under this share busy the card is idle (an evaluation's gaps, a pause): its clock is DPM's idle clock.


class ClockController(HeldControl[GpuClock, Locate]):
    what, instead = "clock ceiling", "a hot card at the cap's floor is paused instead"

    def __init__(self, sysfs: Sysfs, runtime_dir: Path, *, locate: Locate, nvml: Any = None,
                 clock: Callable[[], float] = time.monotonic, check_access: bool = True,
                 deadline_s: float = DEFAULT_SYSFS_DEADLINE_S) -> None:
        super().__init__(kind, log, sysfs, runtime_dir, locate, nvml, clock, check_access, deadline_s)
        self.thermals_on = ThermalsOn()  # each GPU's limit sets, made once per configuration

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
            steps[gpu.gpu_id] = partial(self._tick_one, g, gpu, params, now, self.thermals_on(config, gpu.gpu_id),
                                        power_of.get(gpu.gpu_id), fan_of.get(gpu.gpu_id))
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
        g.ceilings_mhz = self._ladder(g, params)
        if len(g.ceilings_mhz) < 2:
            self.holder.give_up(g, f"no ceiling between the floor ({params.floor_ratio:.0%} of "
                                   f"{found.original_mhz:g} MHz) and the card's maximum ({g.backend.name}, lowest "
                                   f"{found.min_mhz:g} MHz)")
            return
        if g.mode is not ClockMode.OFF:
            log.info("GPU %s: shader clock %g MHz (%s), lowered down to %g MHz when the cap is at its floor%s",
                     g.gpu_id, found.original_mhz, g.backend.name, g.ceilings_mhz[0],
                     " (dry-run)" if g.mode is ClockMode.DRY_RUN else "")

    @staticmethod
    def _ladder(g: GpuClock, params: ClockParams) -> tuple[float, ...]:
        """The law's ceilings from what was found, none under the floor the card showed (it refused a step
        under ``card_floor_mhz``)."""
        assert g.found is not None
        found = g.found
        ladder = ceilings(found.original_mhz, found.min_mhz, params.floor_ratio, found.levels_mhz)
        floor = g.card_floor_mhz
        if floor is None:
            return ladder
        if floor >= found.original_mhz:
            return (found.original_mhz,)
        return tuple(sorted({c for c in ladder if c > floor} | {floor}))

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

    def _tick_one(self, g: GpuClock, gpu: GpuReading, params: ClockParams, now: float, thermals: list[ThermalConfig],
                  power: PowerState | None, fan: FanState | None) -> ClockState:
        """One GPU's step, on its worker; the law's headroom and whether the rungs below are exhausted are worked out
        only where the law runs (on the daemon's main thread, for every GPU, they were most of this rung's tick:
        a card whose ceiling is unavailable, asleep or off needs neither)."""
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
            self._check_in_force(g, params)
        if g.holding:
            self._verify_running(g, gpu, params, now)
        inputs = ClockInputs(now, headroom_c(gpu, thermals), cap_exhausted(power, fan), g.ceilings_mhz,
                             operating_mhz(gpu))
        decision = decide(params, g.law, inputs)
        g.law, g.target = decision.state, decision.ceiling_mhz
        g.pause_allowed = (decision.pause_allowed or g.mode is ClockMode.DRY_RUN or g.not_in_force
                           or g.unrecorded)
        if decision.write and g.mode is ClockMode.DRY_RUN:
            log.info("GPU %s: dry-run: would set the shader clock ceiling to %s", g.gpu_id,
                     "the card's maximum" if decision.ceiling_mhz is None else f"{decision.ceiling_mhz:g} MHz")
        elif decision.write:
            if decision.ceiling_mhz is None:
                self.holder.give_back(g)
            else:
                self._write(g, decision.ceiling_mhz, params)
        if g.holding:
            g.limited_s += dt
        return self._published(g)

    def _check_in_force(self, g: GpuClock, params: ClockParams) -> None:
        """The ceiling we wrote must still be in force: a GPU reset or another tool is seen and taken back; on the
        OD table a maximum that is neither ours nor the original is the user's setting (``_user_maximum``)."""
        assert g.backend is not None
        if g.written is None:
            return
        observed = g.backend.current_mhz()
        if observed is None or abs(observed - g.written) < VERIFY_TOLERANCE_MHZ:
            return
        if isinstance(g.backend, OdTableClock) and g.found is not None and \
                abs(observed - g.found.original_mhz) >= VERIFY_TOLERANCE_MHZ and \
                (g.backend.last_edit_mhz is None or abs(observed - g.backend.last_edit_mhz) >= VERIFY_TOLERANCE_MHZ):
            self._user_maximum(g, observed, params)
            return
        g.resets_total += 1
        log.warning("GPU %s: shader clock ceiling reads %g MHz, %g MHz was written (a GPU reset or another tool): "
                    "taken again", g.gpu_id, observed, g.written)
        self._write(g, g.written, params)

    def _user_maximum(self, g: GpuClock, user_mhz: float, params: ClockParams) -> None:
        """A maximum the user set in the OD table while we hold a ceiling (the file prints the edit buffer:
        committed, or pending and committed by our next ``c``): the user's setting from now on. It is the
        original given back at exit and the top of the ladder; ours stays in force only where it is lower."""
        assert g.found is not None and g.written is not None
        held = g.written
        log.warning("GPU %s: shader clock maximum %g MHz set outside gpuwatch while it held %g MHz: the user's "
                    "setting from now on (never raised above, given back at exit)", g.gpu_id, user_mhz, held)
        g.found = replace(g.found, original_mhz=user_mhz)
        record = OdTableRestore(round(user_mhz))
        try:
            self.actuator.record(g.gpu_id, record, adopt=lambda _stored: record.to_json())
        except OSError as exc:
            self.holder.failed(g, f"the user's shader clock maximum not recorded in {self.actuator.file.path} "
                                  f"({exc.strerror or exc}): the old original stays the one given back")
        g.ceilings_mhz = self._ladder(g, params)
        lower = [index for index, mhz in enumerate(g.ceilings_mhz[:-1]) if mhz <= held + VERIFY_TOLERANCE_MHZ]
        if not lower:
            self.holder.release(g)  # the user's maximum is at or under ours: theirs is in force, nothing of ours
            return
        g.law = replace(g.law, index=lower[-1])
        self._write(g, g.ceilings_mhz[lower[-1]], params)

    def _verify_running(self, g: GpuClock, gpu: GpuReading, params: ClockParams, now: float) -> None:
        """What the card runs at under load says whether the ceiling took (in_force.py): above it ``SETTLE_S``
        after the commit, committed once more; still above, reported as not taking effect (pause allowed)."""
        if g.written is None or g.committed_at is None:
            return
        dpm = None if gpu.sclk_hz or gpu.sclk_average_hz else self._dpm_current_mhz(gpu.gpu_id)
        running = running_mhz(gpu, dpm)
        found = verdict(g.written, running, gpu.gpu_busy_ratio)
        if found == "in_force":
            g.recommitted = False
            if g.not_in_force:
                log.info("GPU %s: shader clock ceiling %g MHz takes effect now", g.gpu_id, g.written)
                g.not_in_force, g.reason = False, None
            return
        if found != "above" or now - g.committed_at < SETTLE_S or g.not_in_force:
            return
        if not g.recommitted:
            log.warning("GPU %s: runs at %g MHz, above its shader clock ceiling %g MHz %.0f s after the commit: "
                        "committed again", g.gpu_id, running, g.written, now - g.committed_at)
            g.recommitted = True
            self._write(g, g.written, params)
            return
        g.not_in_force = True
        g.reason = (f"shader clock ceiling {g.written:g} MHz not taking effect: the card runs at {running:g} MHz "
                    "after a second commit (the firmware keeps its maximum); pause allowed")
        log.warning("GPU %s: %s", g.gpu_id, g.reason)

    def _dpm_current_mhz(self, gpu_id: str) -> float | None:
        """The ``*`` line of pp_dpm_sclk (where gpu_metrics gives no gfxclk)."""
        card = self.locate(gpu_id)
        if card is None:
            return None
        try:
            text = self.sysfs.read(f"{card.device_dir}/{SCLK_FILE}")
        except SysfsError:
            return None
        current = None if text is None else parse_sclk(text).current_mhz
        return None if current is None else float(current)

    def _write(self, g: GpuClock, ceiling_mhz: float, params: ClockParams) -> None:
        assert g.backend is not None
        if not g.holding:
            try:
                g.found = g.backend.probe()  # the original in force now (a user's new maximum is the one to give back)
            except (SettingUnavailable, SettingWriteError) as exc:
                self.holder.failed(g, f"clock ceiling probe before the first write failed: {exc}")
                return
        held = g.written if g.holding else None
        try:
            back = self.holder.write(g, ceiling_mhz, g.backend.record, g.backend.write)
        except CeilingRefused as exc:
            self._refused(g, ceiling_mhz, held, params, str(exc))
            return
        if back is None:
            return
        if abs(back - ceiling_mhz) >= VERIFY_TOLERANCE_MHZ:
            self.holder.failed(g, f"shader clock ceiling reads {back:g} MHz after writing {ceiling_mhz:g} MHz")
            return
        g.failures = 0
        g.committed_at = g.last_now
        log.info("GPU %s: shader clock ceiling %g MHz", g.gpu_id, back)

    def _refused(self, g: GpuClock, ceiling_mhz: float, held: float | None, params: ClockParams,
                 problem: str) -> None:
        """EINVAL on the edit: on a step down, the card's floor (issue 49): the last ceiling it took is held and
        remembered for the run, the law's ladder ends there and the pause rung acts below it. Refused on the
        first step (no ceiling under the maximum) or on a step up: given up, as any refusal."""
        assert g.found is not None
        if held is None:
            self.holder.release(g, law=False)  # recorded for the first write, nothing written
            g.card_floor_mhz = g.found.original_mhz
            self.holder.give_up(g, f"the card refuses any ceiling under its maximum {g.found.original_mhz:g} MHz: "
                                   f"{problem}")
            return
        if ceiling_mhz >= held:
            self.holder.give_up(g, problem)
            return
        held = self._lowest_taken(g, ceiling_mhz, held)
        first = g.card_floor_mhz is None or abs(g.card_floor_mhz - held) >= VERIFY_TOLERANCE_MHZ
        g.card_floor_mhz = held
        g.ceilings_mhz = self._ladder(g, params)
        g.law, g.target = replace(g.law, index=0), held
        if first:
            log.warning("GPU %s: %s: %g MHz is this card's lowest shader clock ceiling for this run (held; a hotter "
                        "card is paused below it)", g.gpu_id, problem, held)

    def _lowest_taken(self, g: GpuClock, refused_mhz: float, held_mhz: float) -> float:
        """The lowest ladder ceiling between a refused step and the one held that the card takes: the law steps
        several rungs at once when the card heats fast, so the refused step says only that the card's minimum
        lies above it. Each try is an edit the kernel refuses before any commit (amdgpu_pm.c,
        amdgpu_set_pp_od_clk_voltage: the od_edit_dpm_table call's EINVAL returns before the ``c``)."""
        assert g.backend is not None
        for between in (c for c in g.ceilings_mhz if refused_mhz < c < held_mhz):
            try:
                back = self.holder.write(g, between, g.backend.record, g.backend.write)
            except CeilingRefused:
                continue
            if back is not None and abs(back - between) < VERIFY_TOLERANCE_MHZ:
                g.committed_at = g.last_now
                log.info("GPU %s: shader clock ceiling %g MHz", g.gpu_id, back)
                return between
            break
        return held_mhz

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
            floor_mhz=g.ceilings_mhz[0] if len(g.ceilings_mhz) > 1 else None, card_floor_mhz=g.card_floor_mhz,
            not_in_force=g.not_in_force,
            pause_allowed=g.pause_allowed or mode not in (ClockMode.LIMITING,), limited_seconds_total=g.limited_s,
            writes_total=g.writes_total, write_errors_total=g.write_errors_total, resets_total=g.resets_total,
            reason=g.reason,
        )

