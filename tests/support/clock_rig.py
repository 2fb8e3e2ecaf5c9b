"""Test harness for the clock rung: a real capture in a fake tree with the clock files amdgpu keeps, a Sysfs
that plays the kernel's ``pp_od_clk_voltage`` edit/commit and the level mask (what a plain file cannot), the
controller over it, and the power governor's and fan's states as knobs."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from gpuwatch.actuation.actuator import Actuator, Handback, RestoreFile, restore_file_path
from gpuwatch.clock import restore as clock_restore
from gpuwatch.clock.controller import ClockController
from gpuwatch.config.file import parse_config
from gpuwatch.gpus.amdgpu_source import AmdgpuSource
from gpuwatch.gpus.sampler import Sampler
from gpuwatch.model import Acted, ClockState, FanMode, FanState, PowerMode, PowerState
from gpuwatch.sim import navi31
from gpuwatch.sim.tree import CardCapture, FakeCard, FakeSysfsTree
from gpuwatch.sysfs import Sysfs, SysfsError
from tests.support.fan_rig import RecordingSysfs

_EDIT = re.compile(r"^s ([01]) (\d+)$")
LEVELS = ("auto", "low", "high", "manual", "profile_standard", "profile_min_sclk", "profile_min_mclk",
          "profile_peak", "perf_determinism")


class ClockSysfs(RecordingSysfs):
    """amdgpu_set_pp_od_clk_voltage (amdgpu_pm.c) where a file cannot: ``s 0|1 <MHz>`` edits a table the
    driver keeps, out of OD_RANGE is EINVAL, ``c`` commits it into what a read shows, ``r`` resets it to the
    board's defaults; ``power_dpm_force_performance_level`` takes the known levels only; ``pp_dpm_sclk``
    takes a mask only while the level is manual (EINVAL otherwise). ``refuse`` answers every clock write with
    that errno."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.pending: dict[str, dict[int, int]] = {}
        self.defaults: dict[str, tuple[int, int]] = {}
        self.refuse: str | None = None

    def write(self, relative: str, value: str) -> None:
        name = relative.rsplit("/", 1)[-1]
        if name not in ("pp_od_clk_voltage", "power_dpm_force_performance_level", "pp_dpm_sclk"):
            super().write(relative, value)
            return
        self.log.append((name, value))
        if self.refuse:
            raise SysfsError(relative, self.refuse)
        device = relative.rsplit("/", 1)[0]
        if name == "power_dpm_force_performance_level":
            if value.strip() not in LEVELS:
                raise SysfsError(relative, "EINVAL")
            Sysfs.write(self, relative, value.strip() + "\n")
            return
        if name == "pp_dpm_sclk":
            if self.read(f"{device}/power_dpm_force_performance_level") != "manual":
                raise SysfsError(relative, "EINVAL")
            return  # the mask is the firmware's business; the table still lists every level
        self._od(relative, value.strip())

    def _od(self, relative: str, command: str) -> None:
        text = self.read(relative) or ""
        section = text.split("OD_SCLK:\n", 1)[1].split("OD_", 1)[0]  # the gfx clock's lines only
        sclk = dict(re.findall(r"^([01]): (\d+)Mhz$", section, re.MULTILINE))
        low, high = (int(v) for v in re.findall(r"^SCLK:\s+(\d+)Mhz\s+(\d+)Mhz$", text, re.MULTILINE)[0])
        table = {int(k): int(v) for k, v in sclk.items()}
        self.defaults.setdefault(relative, (table[0], table[1]))
        pending = self.pending.setdefault(relative, dict(table))
        if command == "c":
            head, rest = text.split("OD_SCLK:\n", 1)
            tail = rest.split("OD_", 1)[1]
            Sysfs.write(self, relative, f"{head}OD_SCLK:\n0: {pending[0]}Mhz\n1: {pending[1]}Mhz\nOD_{tail}")
            del self.pending[relative]
        elif command == "r":
            pending[0], pending[1] = self.defaults[relative]
        elif (m := _EDIT.match(command)) and low <= int(m.group(2)) <= high:
            pending[int(m.group(1))] = int(m.group(2))
        else:
            raise SysfsError(relative, "EINVAL")


class ClockRig:
    """One card, the clock controller over a ClockSysfs; the cap's mode, the fan and the temperature as knobs."""

    def __init__(self, tmp_path: Path, capture: CardCapture, od: bool = True, power: dict[str, Any] | None = None,
                 **config: Any) -> None:
        self.tree = FakeSysfsTree(tmp_path / "sys")
        self.card: FakeCard = self.tree.add_capture(capture)
        if od:
            self.tree.write(self.device("pp_od_clk_voltage"), navi31.od_table(500, 2500))
        self.sysfs = ClockSysfs(self.tree.root)
        self.now = 0.0
        self.runtime_dir = tmp_path / "run"
        self.config = parse_config({"runtime_dir": str(self.runtime_dir), "power": power or {}, **config})
        self.source = AmdgpuSource(Sysfs(self.tree.root), clock=lambda: self.now)
        self.sampler = Sampler([self.source], monotonic=lambda: self.now)
        self.controller = self.new_controller()
        self.power_mode = PowerMode.FLOOR

    def new_controller(self, deadline_s: float = 5.0) -> ClockController:
        return ClockController(self.sysfs, self.runtime_dir, locate=self.source.locate, clock=lambda: self.now,
                               deadline_s=deadline_s)

    def device(self, name: str) -> str:
        return f"{self.card.device_dir}/{name}"

    def hwmon(self, name: str) -> str:
        assert self.card.hwmon_dir
        return f"{self.card.hwmon_dir}/{name}"

    def od_max_mhz(self) -> int:
        text = Sysfs(self.tree.root).read(self.device("pp_od_clk_voltage")) or ""
        return int(re.findall(r"^1: (\d+)Mhz$", text, re.MULTILINE)[0])

    def tick(self, junction_c: float | None = None, at: float | None = None) -> ClockState:
        if junction_c is not None:
            self.tree.write(self.hwmon("temp2_input"), f"{int(junction_c * 1000)}\n")
        self.now = self.now + 1 if at is None else at
        slot = self.card.pci_slot
        fan = FanState(gpu_id=slot, backend="pwm1", mode=FanMode.CURVE, can_rise=False)
        power = PowerState(gpu_id=slot, mode=self.power_mode, pause_allowed=self.power_mode is not PowerMode.GOVERNING)
        (state,) = self.controller.tick(self.sampler.sample(), Acted(fans=(fan,), powers=(power,)), self.config)
        return state

    def hot(self, seconds: int, junction_c: float = 100.0) -> ClockState:
        state = self.tick(junction_c)
        for _ in range(seconds - 1):
            state = self.tick(junction_c)
        return state


def restore_clocks(sysfs: Sysfs, runtime_dir: Path) -> Handback:
    """The clocks' part of `gpuwatch restore` over ``sysfs``."""
    def no_nvml() -> object:
        raise AssertionError("NVML is not needed for amdgpu records")

    return Actuator(clock_restore.kind(sysfs, no_nvml), runtime_dir, deadline_s=5.0).restore_all(without_records=True)


def clock_records(runtime_dir: Path) -> RestoreFile:
    return RestoreFile(restore_file_path(runtime_dir, clock_restore.NAME))
