"""Test harness for the power governor: a real capture in a fake tree, a Sysfs that plays amdgpu's
``power1_cap`` store (what a plain file cannot do), the controller over it, and a settable clock."""

from __future__ import annotations

import errno
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpuwatch.actuation.actuator import Actuator, Handback, RestoreFile, restore_file_path
from gpuwatch.config.file import parse_config
from gpuwatch.gpus.amdgpu_source import AmdgpuSource
from gpuwatch.gpus.sampler import Sampler
from gpuwatch.model import Acted, FanMode, FanState, PowerState
from gpuwatch.power import restore as power_restore
from gpuwatch.power.controller import PowerController
from gpuwatch.sim.tree import CardCapture, FakeCard, FakeSysfsTree
from gpuwatch.sysfs import Sysfs, SysfsError
from tests.support.fan_rig import RecordingSysfs


class CapSysfs(RecordingSysfs):
    """``amdgpu_hwmon_set_power_cap`` (drivers/gpu/drm/amd/pm/amdgpu_pm.c) where a file cannot: kstrtou32
    (garbage: EINVAL), swsmu's range check against power1_cap_min..max (EINVAL), the truncation to whole
    watts; ``refuse`` answers every power1_cap write with that errno (EACCES for non-root, EPERM mid-reset),
    ``ignore`` accepts writes and keeps the old value (old swsmu code that ignored the SMU's answer)."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.refuse: str | None = None
        self.ignore = False
        self.paths: list[str] = []  # every power1_cap written, in order

    def take_log(self) -> list[tuple[str, str]]:
        self.paths = []
        return super().take_log()

    def write(self, relative: str, value: str) -> None:
        if not relative.endswith("/power1_cap"):
            super().write(relative, value)
            return
        self.log.append(("power1_cap", value))
        self.paths.append(relative)
        if self.refuse:
            raise SysfsError(relative, self.refuse)
        hwmon = relative.rsplit("/", 1)[0]
        try:
            uw = int(value)
        except ValueError:
            raise SysfsError(relative, "EINVAL") from None
        low, high = (int(self.read(f"{hwmon}/power1_cap_{end}") or 0) for end in ("min", "max"))
        if uw < low or (high and uw > high) or uw >= 1 << 32:
            raise SysfsError(relative, "EINVAL")
        if not self.ignore:
            Sysfs.write(self, relative, str(uw // 1_000_000 * 1_000_000))


class PowerRig:
    """One card, the power controller over a CapSysfs, the fan's "can it rise" as a knob."""

    def __init__(self, tmp_path: Path, capture: CardCapture, power: dict[str, Any] | None = None,
                 **config: Any) -> None:
        self.tree = FakeSysfsTree(tmp_path / "sys")
        self.card: FakeCard = self.tree.add_capture(capture)
        self.sysfs = CapSysfs(self.tree.root)
        self.now = 0.0
        self.runtime_dir = tmp_path / "run"
        self.config = parse_config({"runtime_dir": str(self.runtime_dir), "power": power or {}, **config})
        self.source = AmdgpuSource(Sysfs(self.tree.root), clock=lambda: self.now)
        self.sampler = Sampler([self.source], monotonic=lambda: self.now)
        self.controller = self.new_controller()

    def new_controller(self) -> PowerController:
        """A (new) controller, as a daemon started again would make it."""
        return PowerController(self.sysfs, self.runtime_dir, locate=self.source.locate, clock=lambda: self.now)

    def hwmon(self, name: str) -> str:
        assert self.card.hwmon_dir
        return f"{self.card.hwmon_dir}/{name}"

    def set(self, junction_c: float | None = None, power_w: float | None = None) -> None:
        if junction_c is not None:
            self.tree.write(self.hwmon("temp2_input"), f"{int(junction_c * 1000)}\n")
        if power_w is not None:
            self.tree.write(self.hwmon("power1_average"), f"{int(power_w * 1e6)}\n")

    def cap_w(self) -> float:
        return int(Sysfs(self.tree.root).read(self.hwmon("power1_cap")) or 0) / 1e6

    def tick(self, at: float | None = None, can_rise: bool = False) -> PowerState:
        if at is not None:
            self.now = at
        fan = FanState(gpu_id=self.card.pci_slot, backend="pwm1", mode=FanMode.CURVE, can_rise=can_rise)
        (state,) = self.controller.tick(self.sampler.sample(), Acted(fans=(fan,)), self.config)
        return state

    def governing(self, junction_c: float = 99.0, seconds: int = 60) -> PowerState:
        """A hot card at full power with the fan at its top, long enough for the cap to come down."""
        self.set(junction_c=junction_c, power_w=self.cap_w())
        state = self.tick()
        for _ in range(seconds):
            self.set(junction_c=junction_c, power_w=self.cap_w())
            state = self.tick(self.now + 1)
        return state


EACCES = errno.errorcode[errno.EACCES]


def restore_caps(sysfs: Sysfs, runtime_dir: Path, load_nvml: Callable[[], Any]) -> Handback:
    """The caps' part of `gpuwatch restore` over ``sysfs`` (a CapSysfs, say) and an NVML stand-in."""
    return Actuator(power_restore.kind(sysfs, load_nvml), runtime_dir, deadline_s=5.0).restore_all(without_records=True)


def power_records(runtime_dir: Path) -> RestoreFile:
    return RestoreFile(restore_file_path(runtime_dir, power_restore.NAME))
