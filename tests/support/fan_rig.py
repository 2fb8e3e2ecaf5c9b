"""Test harness for the fan controller: a recording Sysfs over a real fake tree, plus the driver
behaviours that a plain file cannot have (gpu_od fan_curve staging/commit/reset, EINVAL on pwm1)."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from gpuwatch.config.cooling import FanConfig
from gpuwatch.config.file import Config, parse_config
from gpuwatch.fan.controller import FanController
from gpuwatch.gpus.amdgpu_source import AmdgpuSource
from gpuwatch.gpus.sampler import Sampler
from gpuwatch.model import FanState
from gpuwatch.sim.tree import CardCapture, FakeCard, FakeSysfsTree
from gpuwatch.sysfs import Sysfs, SysfsError

_POINT = re.compile(r"^(\d) (\d+) (\d+)$")


class RecordingSysfs(Sysfs):
    """Writes the real files and records ``(file name, value)`` of every write, in order.

    Simulates the amdgpu driver where a file cannot: ``fan_curve`` stages points, ``c`` commits them
    into what a read shows, ``r`` resets to firmware auto (all ``0C 0%``), as SYSFS_FACTS §6 says.
    ``einval_pwm1`` makes the driver reject pwm1 writes while pwm1_enable != 1 (§4.4).
    """

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.log: list[tuple[str, str]] = []
        self.staged: dict[str, dict[int, tuple[int, int]]] = {}
        self.einval_pwm1 = False

    def write(self, relative: str, value: str) -> None:
        name = relative.rsplit("/", 1)[-1]
        self.log.append((name, value))
        if name == "pwm1" and self.einval_pwm1 and self.read(relative.rsplit("/", 1)[0] + "/pwm1_enable") != "1":
            raise SysfsError(relative, "EINVAL")
        if name == "fan_curve":
            self._fan_curve(relative, value.strip())
            return
        if name == "fan_zero_rpm_enable":
            current = super().read(relative) or ""
            if value.strip() in ("0", "1"):
                lines = current.splitlines()
                lines[1] = value.strip()
                super().write(relative, "\n".join(lines) + "\n")
            return
        super().write(relative, value)

    def _fan_curve(self, relative: str, command: str) -> None:
        current = super().read(relative) or ""
        head, _, ranges = current.partition("OD_RANGE:")
        points = dict(enumerate((int(t), int(s)) for t, s in re.findall(r"^\d: (\d+)C (\d+)%", head, re.M)))
        staged = self.staged.setdefault(relative, {})
        match = _POINT.match(command)
        if match:
            staged[int(match.group(1))] = (int(match.group(2)), int(match.group(3)))
            return
        if command == "c":
            points.update(staged)
            staged.clear()
        elif command == "r":
            points = {i: (0, 0) for i in range(5)}
            staged.clear()
        else:
            raise SysfsError(relative, "EINVAL")
        body = "".join(f"{i}: {t}C {s}%\n" for i, (t, s) in sorted(points.items()))
        super().write(relative, f"OD_FAN_CURVE:\n{body}OD_RANGE:{ranges}")

    def take_log(self) -> list[tuple[str, str]]:
        log, self.log = self.log, []
        return log


class Rig:
    """One card in a fake tree, the controller over a recording sysfs, and a settable clock."""

    def __init__(self, tmp_path: Path, capture: CardCapture, **fan: object) -> None:
        self.tree = FakeSysfsTree(tmp_path / "sys")
        self.card: FakeCard = self.tree.add_capture(capture)
        self.sysfs = RecordingSysfs(self.tree.root)
        self.now = 0.0
        self.config = FanConfig(**fan)  # type: ignore[arg-type]
        self.runtime_dir = tmp_path / "run"
        self.source = AmdgpuSource(Sysfs(self.tree.root))
        self.sampler = Sampler([self.source], monotonic=lambda: self.now)
        self.fans = self.controller()

    def controller(self, clock: Callable[[], float] | None = None) -> FanController:
        """A (new) fan controller over the recording sysfs, locating cards through this rig's source."""
        return FanController(self.sysfs, self.runtime_dir, locate=self.source.locate,
                             clock=clock or (lambda: self.now))

    def hwmon(self, name: str) -> str:
        assert self.card.hwmon_dir
        return f"{self.card.hwmon_dir}/{name}"

    def od(self, name: str) -> str:
        return f"{self.card.device_dir}/gpu_od/fan_ctrl/{name}"

    def set_temp(self, junction_c: float, edge_c: float | None = None) -> None:
        self.tree.write(self.hwmon("temp2_input"), f"{int(junction_c * 1000)}\n")
        if edge_c is not None:
            self.tree.write(self.hwmon("temp1_input"), f"{int(edge_c * 1000)}\n")

    def read(self, relative: str) -> str | None:
        return Sysfs(self.tree.root).read(relative)

    def tick(self, at: float | None = None) -> FanState:
        if at is not None:
            self.now = at
        (state,) = self.fans.tick(self.sampler.sample(), self.live_config())
        return state

    def live_config(self) -> Config:
        """What the daemon's loop passes each tick: a whole configuration with this rig's [fan]."""
        return parse_config({}).model_copy(update={"fan": self.config})
