"""The NVML cap backend and its controller path against a stand-in of pynvml (never a real GPU's settings):
the set limit (not the enforced one) is the original, milliwatts, NO_PERMISSION / NOT_SUPPORTED /
INVALID_ARGUMENT make the governor unavailable, and the restore command gives the limit back."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pynvml
import pytest

from gpuwatch.actuation.setting import SettingUnavailable
from gpuwatch.config.file import parse_config
from gpuwatch.model import Acted, GpuReading, PowerMode, Snapshot, TempReading
from gpuwatch.power.controller import PowerController
from gpuwatch.power.nvml_cap import NvmlCap
from gpuwatch.sysfs import Sysfs
from tests.support.power_rig import power_records, restore_caps

GPU = "0000:1b:00.0"


class NVMLError(Exception):
    def __init__(self, value: int) -> None:
        self.value = value

    def __str__(self) -> str:
        return {pynvml.NVML_ERROR_INVALID_ARGUMENT: "Invalid Argument",
                pynvml.NVML_ERROR_NOT_SUPPORTED: "Not Supported",
                pynvml.NVML_ERROR_NO_PERMISSION: "Insufficient Permissions"}.get(self.value, "err")


@dataclass
class FakeNvml:
    """The power-limit subset of pynvml, in milliwatts, with the H100's numbers (docs/nvidia.md):
    limits 200-700 W, default 700 W; ``enforced`` may sit under the set limit (an out-of-band limiter).
    Its NVML_* constants are the installed nvidia-ml-py's; ``bare`` hides them (gpuwatch's fallbacks answer)."""

    limit_mw: int = 700_000
    enforced_mw: int = 650_000
    refuse: int | None = None
    sets: list[int] = field(default_factory=list)
    bare: bool = False
    NVMLError = NVMLError

    def __getattr__(self, name: str) -> Any:
        if name.startswith("NVML_") and not self.__dict__.get("bare", False):
            return getattr(pynvml, name)
        raise AttributeError(name)

    def nvmlInit(self) -> None:
        pass

    def nvmlDeviceGetCount(self) -> int:
        return 2

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetPciInfo(self, handle: int) -> Any:
        return SimpleNamespace(busId=[b"00000000:1A:00.0", b"00000000:1B:00.0"][handle])

    def nvmlDeviceGetPowerManagementLimit(self, handle: int) -> int:
        assert handle == 1
        return self.limit_mw

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: int) -> int:
        return self.enforced_mw

    def nvmlDeviceGetPowerManagementLimitConstraints(self, handle: int) -> list[int]:
        return [200_000, 700_000]

    def nvmlDeviceGetPowerManagementDefaultLimit(self, handle: int) -> int:
        return 700_000

    def nvmlDeviceSetPowerManagementLimit(self, handle: int, milliwatts: int) -> None:
        assert handle == 1 and isinstance(milliwatts, int)
        if self.refuse is not None:
            raise NVMLError(self.refuse)
        self.sets.append(milliwatts)
        self.limit_mw = milliwatts


def test_probe_reads_the_set_limit_not_the_enforced_one() -> None:
    found = NvmlCap(FakeNvml(), GPU).probe()
    assert (found.cap_w, found.min_w, found.max_w, found.default_w) == (700, 200, 700, 700)


def test_write_is_milliwatts_and_read_back() -> None:
    nvml = FakeNvml()
    assert NvmlCap(nvml, GPU).write(512.5) == 512.5 and nvml.sets == [512_500]


@pytest.mark.parametrize("bare", [False, True], ids=["named", "fallback"])
@pytest.mark.parametrize("code, words", [(pynvml.NVML_ERROR_NO_PERMISSION, "needs root"),
                                         (pynvml.NVML_ERROR_NOT_SUPPORTED, "Not Supported"),
                                         (pynvml.NVML_ERROR_INVALID_ARGUMENT, "Invalid Argument")])
def test_refusals_make_it_unavailable(code: int, words: str, bare: bool) -> None:
    """The library's codes, named or (a pynvml without the names) through gpuwatch's own fallbacks."""
    with pytest.raises(SettingUnavailable, match=words):
        NvmlCap(FakeNvml(refuse=code, bare=bare), GPU).write(600)


def _reading(edge_c: float, power_w: float, enforced_w: float) -> Snapshot:
    gpu = GpuReading(gpu_id=GPU, card="nvidia1", backend="nvml", power_w=power_w, power_cap_w=enforced_w,
                     temps=(TempReading("edge", edge_c, crit_c=90.0),))
    return Snapshot(0.0, 0.0, (gpu,))


CONFIG = parse_config({"backend": "nvml"})


def _controller(tmp_path: Path, nvml: FakeNvml, clock: list[float]) -> PowerController:
    return PowerController(Sysfs(tmp_path), tmp_path / "run", locate=lambda gpu_id: None, nvml=nvml,
                           clock=lambda: clock[0])


def test_an_nvidia_gpu_near_its_edge_limit_is_capped_then_given_back(tmp_path: Path) -> None:
    nvml, now = FakeNvml(), [0.0]
    controller = _controller(tmp_path, nvml, now)
    # NVIDIA fans are never driven by gpuwatch: no fan state, so "the fan cannot rise" near the limit.
    for second in range(60):
        now[0] = second
        (state,) = controller.tick(_reading(89.0, nvml.limit_mw / 1000, 650.0), Acted(), CONFIG)
    assert state.mode is PowerMode.GOVERNING and state.original_cap_w == 700 and state.backend == "nvml"
    assert nvml.sets and nvml.limit_mw < 700_000 and state.floor_cap_w == 420
    controller.restore()
    assert nvml.limit_mw == 700_000 and not (tmp_path / "run/power-restore.json").exists()


def test_without_root_it_falls_back_to_the_pause(tmp_path: Path) -> None:
    nvml, now = FakeNvml(refuse=pynvml.NVML_ERROR_NO_PERMISSION), [0.0]
    controller = _controller(tmp_path, nvml, now)
    for second in range(60):
        now[0] = second
        (state,) = controller.tick(_reading(89.0, 700.0, 700.0), Acted(), CONFIG)
    assert state.mode is PowerMode.UNAVAILABLE and state.pause_allowed and "root" in (state.reason or "")
    assert not (tmp_path / "run/power-restore.json").exists()


def test_restore_command_gives_the_limit_back_after_a_crash(tmp_path: Path) -> None:
    nvml, now = FakeNvml(), [0.0]
    controller = _controller(tmp_path, nvml, now)
    for second in range(60):
        now[0] = second
        controller.tick(_reading(89.0, nvml.limit_mw / 1000, 650.0), Acted(), CONFIG)
    assert nvml.limit_mw < 700_000  # SIGKILL here: no restore() ran
    result = restore_caps(Sysfs(tmp_path), tmp_path / "run", lambda: nvml)
    assert result.problems == [] and len(result.done) == 1 and nvml.limit_mw == 700_000


def test_restore_command_without_nvml_says_so(tmp_path: Path) -> None:
    records = power_records(tmp_path)
    records.add(GPU, {"backend": "nvml", "limit_mw": 700_000})

    def no_nvml() -> Any:
        raise RuntimeError("NVML cannot be initialised: Driver Not Loaded")

    (problem,) = restore_caps(Sysfs(tmp_path), tmp_path, no_nvml).problems
    assert GPU in problem and "Driver Not Loaded" in problem and records.path.exists()
