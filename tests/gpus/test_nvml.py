"""NVIDIA backend against a fake ``pynvml`` module: only the NVML library is faked, everything else is real.

The fake answers like nvidia-ml-py does: bytes/str values, NVMLError subclasses carrying ``value`` (the
nvml.h code), milliwatts, MHz, percentages, and "00000000:BB:DD.F" bus ids. Its constants (sensor, threshold,
clock, field and error numbers) are nvidia-ml-py's own, read from the installed ``pynvml`` (the test extra),
never copied from gpuwatch: a fake that copied the code's numbers once agreed with its wrong
NVML_TEMPERATURE_THRESHOLD_MEM_MAX (5; the library's is 2).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pynvml
import pytest

from gpuwatch.cli import main
from gpuwatch.cli.status import exit_code, render
from gpuwatch.config.base import ConfigError
from gpuwatch.config.file import parse_config
from gpuwatch.daemon.compose import Parts
from gpuwatch.daemon.loop import Daemon
from gpuwatch.daemon.sense import build_sources
from gpuwatch.gpus.nvml import NvmlSource, NvmlUnavailable, normalise_bus_id
from gpuwatch.gpus.sampler import Sampler
from gpuwatch.limits import breaches
from gpuwatch.publish.document import to_document
from tests.support.trees import capture

# nvml.h return codes, as nvidia-ml-py names them.
NOT_SUPPORTED, GPU_IS_LOST = pynvml.NVML_ERROR_NOT_SUPPORTED, pynvml.NVML_ERROR_GPU_IS_LOST
UNKNOWN, DRIVER_NOT_LOADED = pynvml.NVML_ERROR_UNKNOWN, pynvml.NVML_ERROR_DRIVER_NOT_LOADED
VERSION_MISMATCH = pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH


class NVMLError(Exception):
    def __init__(self, value: int) -> None:
        self.value = value

    def __str__(self) -> str:
        messages = {NOT_SUPPORTED: "Not Supported", GPU_IS_LOST: "GPU is lost", UNKNOWN: "Unknown Error",
                    DRIVER_NOT_LOADED: "Driver Not Loaded"}
        return messages.get(self.value, "err")


H100 = {
    "bus": "00000000:1B:00.0", "name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-5c0d-aaaa", "vbios": "96.00.74.00.01",
    "pci_device_id": 0x233010DE, "pci_subsys": 0x16C110DE,
    "temp": 41, "slowdown": 90, "shutdown": 92, "mem_temp": 38, "mem_max": 95,
    "util": (37, 12),
    # An idle H100 (/work/research facts, driver 580): v1 counts the driver's 480 MiB as used, v2 reports
    # it apart, as nvidia-smi does (used 0 MiB, reserved 480 MiB).
    "memory": (480 << 20, 80 << 30), "memory_v2": (0, 480 << 20), "power_mw": 118_500, "cap_mw": 700_000,
    "limits_mw": (200_000, 700_000), "default_mw": 700_000, "sclk": 1980, "mclk": 2619,
    "fan": NVMLError(NOT_SUPPORTED), "gen": 5, "width": 16, "max_gen": 5, "max_width": 16,
}
RTX = {
    **H100, "bus": "00000000:28:00.0", "name": b"NVIDIA GeForce RTX 4090", "uuid": b"GPU-1111", "vbios": b"95.02",
    "pci_device_id": 0x268410DE, "temp": 63, "slowdown": 88, "shutdown": 93, "mem_temp": NVMLError(NOT_SUPPORTED),
    "fan": 55, "memory": (1 << 30, 24 << 30), "memory_v2": NVMLError(VERSION_MISMATCH), "gen": 4, "max_gen": 4,
    "power_mw": 310_250, "cap_mw": 450_000,
}


@dataclass
class FakeNvml:
    """The subset of pynvml that gpuwatch calls. A value that is an NVMLError is raised instead.

    Every ``NVML_*`` constant is the installed nvidia-ml-py's (``__getattr__``); ``bare`` hides them all, as
    a pynvml older than a constant would, so gpuwatch's own fallback numbers are what reach the calls."""

    gpus: list[dict[str, Any]]
    init_error: NVMLError | None = None
    calls: list[str] = field(default_factory=list)
    bare: bool = False
    NVMLError = NVMLError
    nvmlMemory_v2: Any = pynvml.nvmlMemory_v2  # None: an nvidia-ml-py without the v2 memory query

    def __getattr__(self, name: str) -> Any:
        if name.startswith("NVML_") and not self.__dict__.get("bare", False):
            return getattr(pynvml, name)
        raise AttributeError(name)

    def _v(self, handle: int, key: str) -> Any:
        value = self.gpus[handle][key]
        if isinstance(value, NVMLError):
            raise value
        return value

    def nvmlInit(self) -> None:
        if self.init_error:
            raise self.init_error

    def nvmlShutdown(self) -> None:
        pass

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        if self.gpus[index].get("handle_error"):
            raise self.gpus[index]["handle_error"]
        return index

    def nvmlDeviceGetPciInfo(self, h: int) -> Any:
        return SimpleNamespace(busId=self._v(h, "bus"), pciDeviceId=self._v(h, "pci_device_id"),
                               pciSubSystemId=self._v(h, "pci_subsys"))

    def nvmlDeviceGetName(self, h: int) -> Any:
        return self._v(h, "name")

    def nvmlDeviceGetUUID(self, h: int) -> Any:
        return self._v(h, "uuid")

    def nvmlDeviceGetVbiosVersion(self, h: int) -> Any:
        return self._v(h, "vbios")

    def nvmlDeviceGetTemperature(self, h: int, sensor: int) -> int:
        assert sensor == pynvml.NVML_TEMPERATURE_GPU
        return self._v(h, "temp")

    def nvmlDeviceGetTemperatureThreshold(self, h: int, kind: int) -> int:
        return self._v(h, {pynvml.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN: "shutdown",
                           pynvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN: "slowdown",
                           pynvml.NVML_TEMPERATURE_THRESHOLD_MEM_MAX: "mem_max"}[kind])

    def nvmlDeviceGetFieldValues(self, h: int, ids: list[int]) -> list[Any]:
        assert ids == [pynvml.NVML_FI_DEV_MEMORY_TEMP]
        try:
            temp = self._v(h, "mem_temp")
        except NVMLError as exc:
            return [SimpleNamespace(nvmlReturn=exc.value, value=SimpleNamespace(uiVal=0))]
        return [SimpleNamespace(nvmlReturn=0, value=SimpleNamespace(uiVal=temp))]

    def nvmlDeviceGetUtilizationRates(self, h: int) -> Any:
        gpu, memory = self._v(h, "util")
        return SimpleNamespace(gpu=gpu, memory=memory)

    def nvmlDeviceGetMemoryInfo(self, h: int, version: Any = None) -> Any:
        used, total = self._v(h, "memory")
        if version is None:
            return SimpleNamespace(used=used, total=total, free=total - used)
        assert version == pynvml.nvmlMemory_v2
        used, reserved = self._v(h, "memory_v2")  # a driver without v2: NVML_ERROR_ARGUMENT_VERSION_MISMATCH
        return SimpleNamespace(version=version, total=total, reserved=reserved, free=total - used - reserved, used=used)

    def nvmlDeviceGetPowerUsage(self, h: int) -> int:
        return self._v(h, "power_mw")

    def nvmlDeviceGetEnforcedPowerLimit(self, h: int) -> int:
        return self._v(h, "cap_mw")

    def nvmlDeviceGetPowerManagementLimitConstraints(self, h: int) -> tuple[int, int]:
        return self._v(h, "limits_mw")

    def nvmlDeviceGetPowerManagementDefaultLimit(self, h: int) -> int:
        return self._v(h, "default_mw")

    def nvmlDeviceGetClockInfo(self, h: int, clock: int) -> int:
        return self._v(h, {pynvml.NVML_CLOCK_GRAPHICS: "sclk", pynvml.NVML_CLOCK_MEM: "mclk"}[clock])

    def nvmlDeviceGetFanSpeed(self, h: int) -> int:
        return self._v(h, "fan")

    def nvmlDeviceGetCurrPcieLinkGeneration(self, h: int) -> int:
        return self._v(h, "gen")

    def nvmlDeviceGetCurrPcieLinkWidth(self, h: int) -> int:
        return self._v(h, "width")

    def nvmlDeviceGetMaxPcieLinkGeneration(self, h: int) -> int:
        return self._v(h, "max_gen")

    def nvmlDeviceGetMaxPcieLinkWidth(self, h: int) -> int:
        return self._v(h, "max_width")


def test_two_gpus_read_with_units_converted() -> None:
    readings, unsupported = NvmlSource(FakeNvml([dict(H100), dict(RTX)])).read_all()
    assert unsupported == []
    h100, rtx = readings
    assert (h100.gpu_id, h100.card, h100.backend, h100.pwm) == ("0000:1b:00.0", "nvidia0", "nvml", None)
    assert (h100.name, h100.unique_id, h100.vbios_version) == (
        "NVIDIA H100 80GB HBM3", "GPU-5c0d-aaaa", "96.00.74.00.01")
    assert (h100.device_id, h100.subsystem_id) == ("10DE:2330", "10DE:16C1")
    edge, mem = h100.temps
    assert (edge.label, edge.temp_c, edge.crit_c, edge.emergency_c) == ("edge", 41.0, 90.0, 92.0)
    assert (mem.label, mem.temp_c, mem.crit_c) == ("mem", 38.0, 95.0)
    assert (h100.gpu_busy_ratio, h100.mem_busy_ratio) == (0.37, 0.12)
    assert (h100.vram_used_bytes, h100.vram_reserved_bytes, h100.vram_total_bytes) == (0, 480 << 20, 80 << 30)
    assert (rtx.vram_used_bytes, rtx.vram_reserved_bytes, rtx.vram_total_bytes) == (1 << 30, None, 24 << 30)
    assert (h100.power_w, h100.power_cap_w, h100.power_cap_min_w, h100.power_cap_max_w, h100.power_cap_default_w) == (
        118.5, 700.0, 200.0, 700.0, 700.0)
    assert (h100.sclk_hz, h100.mclk_hz) == (1980e6, 2619e6)
    assert (h100.pcie_link_speed_gts, h100.pcie_link_width, h100.pcie_max_link_speed_gts) == (32.0, 16, 32.0)
    assert h100.errors == ()
    # Old pynvml hands back bytes; the RTX has a fan and no HBM temperature.
    assert (rtx.gpu_id, rtx.name, rtx.unique_id, rtx.vbios_version) == (
        "0000:28:00.0", "NVIDIA GeForce RTX 4090", "GPU-1111", "95.02")
    assert [t.label for t in rtx.temps] == ["edge"]
    assert (rtx.fan_duty_ratio, rtx.pwm, rtx.pwm_ratio, rtx.fan_rpm) == (0.55, None, None, None)
    assert rtx.pcie_link_speed_gts == 16.0


def test_board_without_fan_is_not_an_error() -> None:
    (h100,), _ = NvmlSource(FakeNvml([dict(H100)])).read_all()
    assert h100.fan_duty_ratio is None
    assert h100.errors == ()


def test_unreadable_field_is_recorded_and_the_rest_is_read() -> None:
    broken = {**RTX, "power_mw": NVMLError(UNKNOWN), "temp": NVMLError(UNKNOWN)}
    (gpu,), _ = NvmlSource(FakeNvml([broken])).read_all()
    assert gpu.up and gpu.power_w is None and gpu.temp("edge").temp_c is None
    assert {(e.sensor, e.error) for e in gpu.errors} == {("power", "Unknown Error"), ("temp", "Unknown Error")}
    assert gpu.power_cap_w == 450.0 and gpu.gpu_busy_ratio == 0.37


def test_lost_gpu_reads_as_down_and_keeps_its_identity() -> None:
    fake = FakeNvml([dict(H100)])
    backend = NvmlSource(fake)
    backend.read_all()
    fake.gpus[0]["power_mw"] = NVMLError(GPU_IS_LOST)
    (lost,), _ = backend.read_all()
    assert not lost.up and lost.gpu_id == "0000:1b:00.0" and lost.name == "NVIDIA H100 80GB HBM3"
    fake.gpus[0]["handle_error"] = NVMLError(GPU_IS_LOST)
    (gone,), _ = backend.read_all()
    assert not gone.up and gone.errors[0].sensor == "device"


@pytest.mark.parametrize("raw, expected", [
    ("00000000:28:00.0", "0000:28:00.0"),
    ("00000001:AB:1F.3", "0001:ab:1f.3"),
    ("0000:03:00.0", "0000:03:00.0"),
    ("", None),
    (None, None),
])
def test_bus_id_normalised_to_the_amdgpu_form(raw: str | None, expected: str | None) -> None:
    assert normalise_bus_id(raw) == expected


def test_init_failure_raises_unavailable() -> None:
    with pytest.raises(NvmlUnavailable, match="Driver Not Loaded"):
        NvmlSource(FakeNvml([], init_error=NVMLError(DRIVER_NOT_LOADED)))


def test_auto_without_nvml_keeps_amdgpu_only(fake_sysfs: Any) -> None:
    fake_sysfs.add_capture(capture("navi31-rx7900xtx-sapphire-nitro"), card=0, pci_slot="0000:03:00.0")
    config = parse_config({"sysfs_root": str(fake_sysfs.root)})
    backends = build_sources(config, nvml=FakeNvml([dict(H100)], init_error=NVMLError(DRIVER_NOT_LOADED)))
    assert [b.name for b in backends] == ["amdgpu"]
    snapshot = Sampler(backends).sample()
    assert [g.backend for g in snapshot.gpus] == ["amdgpu"]


def test_auto_with_both_reads_both(fake_sysfs: Any) -> None:
    fake_sysfs.add_capture(capture("navi31-rx7900xtx-sapphire-nitro"), card=0, pci_slot="0000:03:00.0")
    config = parse_config({"sysfs_root": str(fake_sysfs.root)})
    snapshot = Sampler(build_sources(config, nvml=FakeNvml([dict(RTX)]))).sample()
    assert [(g.gpu_id, g.backend) for g in snapshot.gpus] == [("0000:03:00.0", "amdgpu"), ("0000:28:00.0", "nvml")]


def test_backend_choice(tmp_path: Path) -> None:
    fake = FakeNvml([dict(H100)])
    assert [b.name for b in build_sources(parse_config({"backend": "nvml"}), nvml=fake)] == ["nvml"]
    assert [b.name for b in build_sources(parse_config({"backend": "amdgpu"}), nvml=fake)] == ["amdgpu"]
    with pytest.raises(ConfigError, match='backend = "nvml": NVML cannot be initialised'):
        build_sources(parse_config({"backend": "nvml"}), nvml=FakeNvml([], init_error=NVMLError(DRIVER_NOT_LOADED)))
    with pytest.raises(ConfigError, match="backend"):
        parse_config({"backend": "cuda"})


def test_edge_limit_applies_to_the_nvidia_core_temperature() -> None:
    (rtx,), _ = NvmlSource(FakeNvml([dict(RTX)])).read_all()
    thermal = parse_config({"thermal": {"edge_limit_c": 60}}).thermal
    assert [(b.sensor, b.temp_c, b.limit_c) for b in breaches(rtx, thermal)] == [("edge", 63.0, 60.0)]


def test_status_and_document_render_an_nvidia_gpu(tmp_path: Path) -> None:
    config = parse_config({"runtime_dir": str(tmp_path), "thermal": {"edge_limit_c": 60}, "backend": "nvml"})
    daemon = Daemon(config, Parts(sources=build_sources(config, nvml=FakeNvml([dict(H100), dict(RTX)]))))
    state = daemon.tick()
    doc = json.loads(json.dumps(to_document(state, source="daemon")))
    h100, rtx = doc["gpus"]
    assert h100["backend"] == "nvml" and h100["temperatures"]["edge"] == {
        "temp_c": 41.0, "crit_c": 90.0, "crit_hyst_c": None, "emergency_c": 92.0, "limit_c": 60.0}
    assert h100["temperatures"]["mem"]["limit_c"] == 90.0  # HBM crit 95 - mem_crit_margin_c 5
    assert rtx["fan_duty_ratio"] == 0.55 and rtx["over_limit"] == ["edge"]
    assert exit_code(doc) == 1
    text = render(doc, now=doc["taken_unix"])
    assert "[0000:1b:00.0] nvidia0  NVIDIA H100 80GB HBM3" in text
    assert "temp   edge 41°C  mem 38°C\n  limit  pause at edge 60°C  mem 90°C\n  crit   edge 90°C  mem 95°C" in text
    assert "edge 63°C OVER LIMIT" in text  # the RTX, over the configured edge limit of 60 °C
    assert "vram   0 MiB / 80.0 GiB   reserved by the driver 480 MiB" in text
    assert "power  118 W / cap 700 W" in text and "sclk 1980 MHz" in text
    assert "fan    none (passive board)  control: unsupported (monitor only)" in text
    assert "fan    duty 55%  control: unsupported (monitor only)" in text
    assert json.loads(config.state_file.read_text())["gpus"][1]["gpu_id"] == "0000:28:00.0"
    daemon.shutdown()


def test_nvidia_drm_card_is_not_also_listed_as_unsupported(fake_sysfs: Any) -> None:
    fake_sysfs.add_capture(capture("navi31-rx7900xtx-sapphire-nitro"), card="card0", pci_slot="0000:03:00.0")
    fake_sysfs.add_card({"device/uevent": "DRIVER=nvidia\nPCI_ID=10DE:2684\n"}, card="card1", pci_slot="0000:28:00.0")
    fake_sysfs.add_card({"device/uevent": "DRIVER=i915\nPCI_ID=8086:3E92\n"}, card="card2", pci_slot="0000:00:02.0")
    config = parse_config({"sysfs_root": str(fake_sysfs.root)})
    snapshot = Sampler(build_sources(config, nvml=FakeNvml([dict(RTX)]))).sample()
    assert [(g.gpu_id, g.backend) for g in snapshot.gpus] == [("0000:03:00.0", "amdgpu"), ("0000:28:00.0", "nvml")]
    assert [(c.card, c.driver) for c in snapshot.unsupported] == [("card2", "i915")]


def test_memory_without_the_v2_query_is_v1() -> None:
    fake = FakeNvml([dict(H100)])
    fake.nvmlMemory_v2 = None
    reading = NvmlSource(fake).read_all()[0][0]
    assert (reading.vram_used_bytes, reading.vram_reserved_bytes, reading.errors) == (480 << 20, None, ())


def test_sensors_on_an_nvidia_gpu_name_nvml_as_the_source(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """`gpuwatch sensors` through the CLI's own path, with the stand-in in pynvml's place."""
    monkeypatch.setattr("gpuwatch.gpus.nvml._pynvml", lambda: FakeNvml([dict(H100)]))
    config = tmp_path / "gpuwatch.toml"
    config.write_text(f'backend = "nvml"\nruntime_dir = "{tmp_path}"\n')
    assert main(["sensors", "-c", str(config)]) == 0
    header, note, *rest = capsys.readouterr().out.splitlines()
    assert "read from NVML" in header and "sysfs" not in header
    assert note == "gpuwatch daemon is not running"
    assert "  vram   0 MiB / 80.0 GiB   reserved by the driver 480 MiB" in rest


def test_a_pynvml_without_the_named_constants_reads_the_same() -> None:
    """gpuwatch's fallback numbers (used when a pynvml predates a constant) are nvidia-ml-py's: the bare
    fake hides every NVML_* name, and each reading, HBM temperature limit included, is what the named
    constants give. Fails with the old fallback of 5 for NVML_TEMPERATURE_THRESHOLD_MEM_MAX (it is 2)."""
    named, _ = NvmlSource(FakeNvml([dict(H100), dict(RTX)])).read_all()
    bare, _ = NvmlSource(FakeNvml([dict(H100), dict(RTX)], bare=True)).read_all()
    assert bare == named
    assert [(t.label, t.crit_c) for t in bare[0].temps] == [("edge", 90.0), ("mem", 95.0)]
