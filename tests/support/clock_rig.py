"""Test harness for the clock rung: a real capture in a fake tree with the clock files amdgpu keeps, a Sysfs
that plays the kernel's ``pp_od_clk_voltage`` edit/commit and the level mask (sim/kernel.py: what a plain
file cannot), the controller over it, and the power governor's and fan's states as knobs."""

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
from gpuwatch.sim.kernel import LEVEL, OD, SCLK, KernelSysfs
from gpuwatch.sim.tree import CardCapture, FakeCard, FakeSysfsTree
from gpuwatch.sysfs import Sysfs, SysfsError


class ClockSysfs(KernelSysfs):
    """The simulated kernel's clock files (sim/kernel.py: the OD edit buffer and commit, the per-setting limits,
    the level mask), every write recorded as ``(file name, value)``; ``refuse`` answers every clock write with
    that errno."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.log: list[tuple[str, str]] = []
        self.refuse: str | None = None

    def write(self, relative: str, value: str) -> None:
        name = relative.rsplit("/", 1)[-1]
        self.log.append((name, value))
        if self.refuse and name in (OD, LEVEL, SCLK):
            raise SysfsError(relative, self.refuse)
        super().write(relative, value)

    def take_log(self) -> list[tuple[str, str]]:
        log, self.log = self.log, []
        return log


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
