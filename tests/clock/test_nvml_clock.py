"""NVML's locked clocks as the clock rung's backend, against a stand-in of pynvml (never a real GPU's settings):
the range from the supported graphics clocks, the lock written and given back by a reset, NO_PERMISSION and
NOT_SUPPORTED make it unavailable, and `gpuwatch restore`'s part unlocks after a crash."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pynvml
import pytest

from gpuwatch.actuation.actuator import Actuator
from gpuwatch.actuation.setting import SettingUnavailable
from gpuwatch.clock import restore as clock_restore
from gpuwatch.clock.controller import ClockController
from gpuwatch.config.file import parse_config
from gpuwatch.model import Acted, ClockMode, GpuReading, PowerMode, PowerState, Snapshot, TempReading
from gpuwatch.sysfs import Sysfs
from tests.support.clock_rig import clock_records

GPU = "0000:1b:00.0"


class NVMLError(Exception):
    def __init__(self, value: int) -> None:
        self.value = value


@dataclass
class FakeNvml:
    """The clock subset of pynvml with an H100's graphics clocks (345..1980 MHz at the top memory clock)."""

    refuse: int | None = None
    calls: list[tuple[str, ...]] = field(default_factory=list)
    NVMLError = NVMLError

    def __getattr__(self, name: str) -> Any:
        if name.startswith("NVML_"):
            return getattr(pynvml, name)
        raise AttributeError(name)

    def nvmlDeviceGetCount(self) -> int:
        return 1

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetPciInfo(self, handle: int) -> SimpleNamespace:
        return SimpleNamespace(busId=b"00000000:1B:00.0")

    def nvmlDeviceGetSupportedMemoryClocks(self, handle: int) -> list[int]:
        return [2619, 1593]

    def nvmlDeviceGetSupportedGraphicsClocks(self, handle: int, memory: int) -> list[int]:
        assert memory == 2619
        return list(range(1980, 330, -15))

    def nvmlDeviceSetGpuLockedClocks(self, handle: int, low: int, high: int) -> None:
        if self.refuse is not None:
            raise NVMLError(self.refuse)
        self.calls.append(("lock", str(low), str(high)))

    def nvmlDeviceResetGpuLockedClocks(self, handle: int) -> None:
        self.calls.append(("reset",))


def _tick(controller: ClockController, config: Any, now: list[float], junction_c: float) -> Any:
    now[0] += 1
    gpu = GpuReading(gpu_id=GPU, card="nvidia0", backend="nvml", temps=(TempReading("junction", junction_c, 95.0),))
    (state,) = controller.tick(Snapshot(now[0], now[0], (gpu,)), Acted(powers=(PowerState(GPU, PowerMode.FLOOR),)),
                                config)
    return state


def test_locks_and_unlocks(tmp_path: Path) -> None:
    nvml, now = FakeNvml(), [0.0]
    config = parse_config({"runtime_dir": str(tmp_path), "thermal": {"junction_limit_c": 85.0}})
    controller = ClockController(Sysfs(tmp_path), tmp_path, locate=lambda _: None, nvml=nvml, clock=lambda: now[0])
    state = _tick(controller, config, now, 86.0)
    assert state.backend == "nvml" and state.mode is ClockMode.LIMITING and state.original_mhz == 1980.0
    assert nvml.calls == [("lock", "345", str(1980 - 20))]  # one 1 % step under the top
    assert clock_records(tmp_path).load() == {GPU: {"backend": "nvml", "max_mhz": 1980}}
    controller.restore()
    assert nvml.calls[-1] == ("reset",) and not clock_records(tmp_path).path.exists()


@pytest.mark.parametrize("code", [pynvml.NVML_ERROR_NO_PERMISSION, pynvml.NVML_ERROR_NOT_SUPPORTED])
def test_refused_locks_make_it_unavailable(tmp_path: Path, code: int) -> None:
    nvml, now = FakeNvml(refuse=code), [0.0]
    config = parse_config({"runtime_dir": str(tmp_path), "thermal": {"junction_limit_c": 85.0}})
    controller = ClockController(Sysfs(tmp_path), tmp_path, locate=lambda _: None, nvml=nvml, clock=lambda: now[0])
    state = _tick(controller, config, now, 86.0)
    assert state.mode is ClockMode.UNAVAILABLE and "NVML refuses locked clocks" in (state.reason or "")
    assert not clock_records(tmp_path).path.exists()  # refused outright: given back, nothing of ours held


def test_restore_after_a_crash_unlocks(tmp_path: Path) -> None:
    nvml = FakeNvml()
    clock_records(tmp_path).add(GPU, {"backend": "nvml", "max_mhz": 1980})
    result = Actuator(clock_restore.kind(Sysfs(tmp_path), lambda: nvml), tmp_path, 5.0).restore_all()
    assert result.problems == [] and nvml.calls == [("reset",)]
    assert result.done == [f"{GPU}: graphics clocks unlocked (nvmlDeviceResetGpuLockedClocks)"]


def _no_nvml() -> Any:
    raise RuntimeError("NVML cannot be initialised: Driver Not Loaded")


@pytest.mark.parametrize("load, why", [(_no_nvml, "NVML cannot be initialised: Driver Not Loaded"),
                                       (lambda: None, "NVML is not loaded")], ids=["gpuwatch-restore", "daemon"])
def test_restore_without_nvml_says_so_and_keeps_the_record(tmp_path: Path, load: Any, why: str) -> None:
    """`gpuwatch restore` where NVML cannot start, or a daemon that loaded none (amdgpu) with an NVIDIA record."""
    clock_records(tmp_path).add(GPU, {"backend": "nvml", "max_mhz": 1980})
    (problem,) = Actuator(clock_restore.kind(Sysfs(tmp_path), load), tmp_path, 5.0).restore_all().problems
    assert problem == f"{GPU}: NVML unavailable, clocks not unlocked: {why}"
    assert GPU in clock_records(tmp_path).load()


def test_restore_loads_nvml_once_for_every_record(tmp_path: Path) -> None:
    """actuation.setting.StoredHandback: the GPUs give their records back on their workers at once, NVML is loaded once;
    a slot NVML does not list is that GPU's problem alone (NvmlDevice.handle)."""
    nvml, loads = FakeNvml(), []
    gone = "0000:99:00.0"
    for slot in (GPU, gone):
        clock_records(tmp_path).add(slot, {"backend": "nvml", "max_mhz": 1980})

    def load() -> Any:
        loads.append(1)
        return nvml

    result = Actuator(clock_restore.kind(Sysfs(tmp_path), load), tmp_path, 5.0).restore_all()
    assert loads == [1] and nvml.calls == [("reset",)]
    assert result.problems == [f"{gone}: clock ceiling not restored (nvml, original 1980 MHz): NVML has no GPU at "
                               f"{gone}"]
    assert list(clock_records(tmp_path).load()) == [gone]


def test_a_missing_gpu_is_unavailable(tmp_path: Path) -> None:
    from gpuwatch.clock.nvml_clock import NvmlClock
    with pytest.raises(SettingUnavailable, match="no GPU"):
        NvmlClock(FakeNvml(), "0000:99:00.0").probe()
