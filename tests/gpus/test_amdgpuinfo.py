"""pyamdgpuinfo merged into the amdgpu readings, and every way it is off, with a stand-in module
(tests/support/fake_pyamdgpuinfo.py): the real one needs /dev/dri, which no test machine has."""

from __future__ import annotations

import errno
import importlib.util
import logging
from pathlib import Path

import pytest

from gpuwatch.config.file import Config
from gpuwatch.daemon.sense import with_amdgpuinfo
from gpuwatch.gpus.amdgpu_source import AmdgpuSource
from gpuwatch.gpus.amdgpuinfo import AmdgpuInfo, WithAmdgpuInfo
from gpuwatch.gpus.sampler import Sampler
from gpuwatch.model import GpuReading
from gpuwatch.sim.tree import FakeSysfsTree
from gpuwatch.sysfs import Sysfs
from tests.support.fake_pyamdgpuinfo import FakeGPUInfo, FakePyamdgpuinfo
from tests.support.trees import capture

STEAMDECK, NAVI21 = "apu-vangogh-steamdeck", "navi21-rx6900xt-sapphire-nitro"


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def source(tmp_path: Path, *names: str) -> tuple[AmdgpuSource, list[str]]:
    tree = FakeSysfsTree(tmp_path / "sys")
    slots = [tree.add_capture(capture(name), card=f"card{i}").pci_slot for i, name in enumerate(names)]
    return AmdgpuSource(Sysfs(tree.root)), slots


def readings(inner: AmdgpuSource, info: AmdgpuInfo) -> dict[str, GpuReading]:
    got, _ = WithAmdgpuInfo(inner, info).read_all()
    return {reading.gpu_id: reading for reading in got}


def test_fills_what_sysfs_lacks_and_records_the_source(tmp_path: Path) -> None:
    inner, (deck, navi) = source(tmp_path, STEAMDECK, NAVI21)  # the Steam Deck capture has no mem_info_*
    fake = FakePyamdgpuinfo([FakeGPUInfo(0, deck), FakeGPUInfo(1, navi)])
    clock = Clock()
    info = AmdgpuInfo(fake, polls_per_second=10, clock=clock)
    first = readings(inner, info)
    assert (first[deck].vram_used_bytes, first[deck].gtt_total_bytes) == (512 * 1024**2, 8 * 1024**3)
    assert first[deck].gpu_busy_sampled_ratio is None  # the poller is still warming up: no value, no error
    assert dict(first[deck].sources) == {"gtt_total_bytes": "amdgpuinfo", "gtt_used_bytes": "amdgpuinfo",
                                         "vram_total_bytes": "amdgpuinfo", "vram_used_bytes": "amdgpuinfo"}
    # sysfs wins where it has the value: the RX 6900 XT's own mem_info_* and gpu_busy_percent stay.
    assert first[navi].vram_used_bytes == 668274688 and first[navi].gpu_busy_ratio == 0.03
    assert "query_vram_usage" not in fake.gpus[1].calls and "query_load" not in fake.gpus[1].calls
    clock.now = 2.0
    readings(inner, info)
    later = readings(inner, info)
    assert later[deck].gpu_busy_sampled_ratio == 0.93 and later[navi].gpu_busy_sampled_ratio == 0.93
    assert later[navi].sources == ()  # the sampled load is amdgpuinfo's own field, not a stand-in
    assert fake.detect_calls == 1 and fake.gpus[0].calls.count("start_utilisation_polling") == 1


def test_a_failing_query_turns_off_that_query_only_logged_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    inner, (deck,) = source(tmp_path, STEAMDECK)
    gpu = FakeGPUInfo(0, deck, failing={"query_vram_usage"}, warmup_calls=0)
    info = AmdgpuInfo(FakePyamdgpuinfo([gpu]), polls_per_second=10)
    with caplog.at_level(logging.INFO, logger="gpuwatch.amdgpuinfo"):
        got = [readings(inner, info)[deck] for _ in range(3)]
    assert all(r.vram_used_bytes is None and r.gtt_used_bytes == 64 * 1024**2 for r in got)
    assert gpu.calls.count("query_vram_usage") == 1 and got[-1].errors == ()
    assert [r.getMessage() for r in caplog.records] == [
        f"GPU {deck}: pyamdgpuinfo query_vram_usage off: RuntimeError: Unknown query failure (an AMDGPU call "
        "failed). This query may not be supported for this GPU"]


def test_a_poller_that_never_delivers_is_turned_off_after_its_warm_up(tmp_path: Path) -> None:
    inner, (deck,) = source(tmp_path, STEAMDECK)
    gpu = FakeGPUInfo(0, deck, warmup_calls=10**6)
    clock = Clock()
    info = AmdgpuInfo(FakePyamdgpuinfo([gpu]), polls_per_second=10, clock=clock)
    readings(inner, info)
    assert not info.failed
    clock.now = 10.0
    readings(inner, info)
    assert (deck, "query_utilisation") in info.failed
    readings(inner, info)
    assert gpu.calls.count("query_utilisation") == 2


def test_no_polling_when_asked_not_to(tmp_path: Path) -> None:
    inner, (deck,) = source(tmp_path, STEAMDECK)
    gpu = FakeGPUInfo(0, deck)
    readings(inner, AmdgpuInfo(FakePyamdgpuinfo([gpu]), polls_per_second=0))
    assert "start_utilisation_polling" not in gpu.calls and "query_utilisation" not in gpu.calls


def test_a_gpu_that_is_not_awake_is_not_queried(tmp_path: Path) -> None:
    tree = FakeSysfsTree(tmp_path / "sys")
    placed = tree.add_capture(capture(STEAMDECK))
    tree.write(f"{placed.device_dir}/power/runtime_status", "suspended\n")
    gpu = FakeGPUInfo(0, placed.pci_slot)
    got = readings(AmdgpuSource(Sysfs(tree.root)), AmdgpuInfo(FakePyamdgpuinfo([gpu])))
    assert got[placed.pci_slot].vram_used_bytes is None
    assert [c for c in gpu.calls if c != "start_utilisation_polling"] == []


@pytest.mark.parametrize(("module", "why"), [
    (FakePyamdgpuinfo(detect_error=FileNotFoundError(errno.ENOENT, "No such file or directory", "/dev/dri/by-path")),
     "no usable render node: FileNotFoundError: [Errno 2] No such file or directory: '/dev/dri/by-path'"),
    (FakePyamdgpuinfo(detect_error=OSError("Can't initialize AMDGPU driver for AMDGPU GPU (this is usually a "
                                           "permission error)")),
     "no usable render node: OSError: Can't initialize AMDGPU driver for AMDGPU GPU (this is usually a permission "
     "error)"),
    (FakePyamdgpuinfo([], None), "pyamdgpuinfo found no amdgpu render node it may open"),
    (FakePyamdgpuinfo([FakeGPUInfo(0, None), FakeGPUInfo(1, "0000:99:00.0")], missing={1}),
     "pyamdgpuinfo found no amdgpu render node it may open"),
])
def test_off_when_it_cannot_see_the_gpus_logged_once(tmp_path: Path, caplog: pytest.LogCaptureFixture,
                                                     module: FakePyamdgpuinfo, why: str) -> None:
    inner, _ = source(tmp_path, STEAMDECK)
    info = AmdgpuInfo(module)
    with caplog.at_level(logging.INFO, logger="gpuwatch.amdgpuinfo"):
        got = [readings(inner, info) for _ in range(3)]
    plain, _ = inner.read_all()
    assert all(list(r.values()) == plain for r in got)
    assert info.off == why and module.detect_calls == 1
    assert [r.getMessage() for r in caplog.records if "readings off" in r.getMessage()] == [
        f"pyamdgpuinfo readings off: {why}"]


@pytest.mark.skipif(importlib.util.find_spec("pyamdgpuinfo") is not None, reason="pyamdgpuinfo is installed here")
def test_absent_module_is_off(tmp_path: Path) -> None:
    inner, _ = source(tmp_path, STEAMDECK)
    info = AmdgpuInfo()
    plain, _ = inner.read_all()
    assert list(readings(inner, info).values()) == plain
    assert info.off == "pyamdgpuinfo is not installed (pip install 'gpuwatch[amdgpuinfo]')"


def test_composition_uses_it_only_on_the_real_sysfs_unless_off(tmp_path: Path) -> None:
    inner, (deck,) = source(tmp_path, STEAMDECK)
    fake = FakePyamdgpuinfo([FakeGPUInfo(0, deck)])
    assert with_amdgpuinfo(Config(sysfs_root=tmp_path), inner) is inner  # a test or simulated tree
    assert with_amdgpuinfo(Config(amdgpuinfo={"mode": "off"}), inner) is inner  # type: ignore[arg-type]
    assert isinstance(with_amdgpuinfo(Config(), inner), WithAmdgpuInfo)  # /sys
    merged = with_amdgpuinfo(Config(sysfs_root=tmp_path), inner, module=fake)
    snapshot = Sampler([merged]).sample()
    assert snapshot.gpus[0].vram_used_bytes == 512 * 1024**2
