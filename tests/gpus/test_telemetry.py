"""gpu_metrics in a reading: the read policy (awake only, once per tick, EPERM/EOPNOTSUPP/garbage) and
the merge into hwmon's values, on real captures with a table built from their own values."""

from __future__ import annotations

import errno
import logging
from pathlib import Path

import pytest

from gpuwatch.gpus.amdgpu import discover, read_card
from gpuwatch.gpus.amdgpu_source import AmdgpuSource
from gpuwatch.gpus.gpu_metrics import decode
from gpuwatch.gpus.telemetry import GpuMetricsReader, merge
from gpuwatch.gpus.throttle import flags, reasons
from gpuwatch.model import GpuReading
from gpuwatch.sim.tree import FakeSysfsTree
from gpuwatch.sysfs import Sysfs
from tests.support.gpu_metrics import CARD_TABLES, dgpu_v1_3
from tests.support.trees import FaultySysfs, capture


def card_tree(root: Path, name: str, gpu_metrics: bytes | None = None, runtime_status: str | None = None) -> Path:
    tree = FakeSysfsTree(root)
    placed = tree.add_capture(capture(name))
    device = tree.root / placed.device_dir
    if gpu_metrics is not None:
        (device / "gpu_metrics").write_bytes(gpu_metrics)
    if runtime_status is not None:
        (device / "power").mkdir(exist_ok=True)
        (device / "power/runtime_status").write_text(runtime_status + "\n")
    return tree.root


def read_one(root: Path, sysfs: Sysfs | None = None, metrics: GpuMetricsReader | None = None) -> GpuReading:
    sysfs = sysfs or Sysfs(root)
    (card,) = discover(sysfs).cards
    return read_card(sysfs, card, metrics=metrics)


def test_rdna4_without_fan1_input_gets_its_rpm_from_gpu_metrics(tmp_path: Path) -> None:
    name = "navi48-rx9070xt-early-kernel"
    without = read_one(card_tree(tmp_path / "a", name))
    assert without.fan_rpm is None and without.errors == ()
    table_with_fan = dgpu_v1_3(39, 42, 62, 19, 9, 59, 96, 1187, 696, vr=(43, 43, 44))
    gpu = read_one(card_tree(tmp_path / "b", name, table_with_fan))
    assert gpu.fan_rpm == 1187 and dict(gpu.sources) == {"fan_rpm": "gpu_metrics", "mem_busy_ratio": "gpu_metrics"}
    assert gpu.gpu_metrics_revision == "1.3" and gpu.errors == ()
    assert [(t.label, t.temp_c) for t in gpu.temps] == [
        ("edge", 39.0), ("junction", 42.0), ("mem", 62.0), ("vrgfx", 43.0), ("vrsoc", 43.0), ("vrmem", 44.0)]
    # hwmon's own values stay (crit from hwmon; the table adds none).
    assert gpu.temp("junction").crit_c == 110.0  # type: ignore[union-attr]


def test_hwmon_values_win_and_the_table_adds_what_only_it_has(tmp_path: Path) -> None:
    gpu = read_one(card_tree(tmp_path, "navi48-rx9070-sapphire-pulse", CARD_TABLES["navi48-rx9070-sapphire-pulse"]))
    assert gpu.fan_rpm == 1944 and "fan_rpm" not in dict(gpu.sources)
    assert (gpu.sclk_average_hz, gpu.mclk_average_hz) == (900e6, 1124e6)
    assert gpu.throttle_flags == () and gpu.throttle_reasons == () and gpu.indep_throttle_status == 0
    assert gpu.energy_accumulator_j is None  # RDNA4 leaves it 0


def test_apu_table_adds_the_soc_temperature(tmp_path: Path) -> None:
    gpu = read_one(card_tree(tmp_path, "apu-phoenix-lenovo", CARD_TABLES["apu-phoenix-lenovo"]))
    assert gpu.temp("soc").temp_c == 27.37 and gpu.temp("edge").temp_c == 25.0  # type: ignore[union-attr]
    assert gpu.throttle_reasons is None  # v2.1 has only the firmware's word: no named reasons
    assert gpu.throttle_status == 0 and gpu.fclk_average_hz == 400e6


def test_hotspot_quirk_at_idle_and_a_real_thermal_throttle() -> None:
    idle = decode(CARD_TABLES["navi33-rx7600s-laptop"])  # RX 7600S at 54 °C, 1 W, bit 36 set
    assert flags(idle.indep_throttle_status or 0, idle.junction_c, hotspot_quirk=True) == ()
    assert flags(idle.indep_throttle_status or 0, idle.junction_c, hotspot_quirk=False) == ("TEMP_HOTSPOT",)
    hot = merge(GpuReading("0000:03:00.0", "card0", "amdgpu"),
                decode(dgpu_v1_3(80, 97, 90, 150, 100, 2400, 1200, 2500, 900, indep=1 << 36 | 1 << 16 | 1 << 1)))
    assert hot.throttle_flags == ("PPT1", "TDC_GFX", "TEMP_HOTSPOT")
    assert hot.throttle_reasons == ("power", "current", "thermal")
    assert reasons(("PPM", "BIT50")) == ("thermal", "other")


@pytest.mark.parametrize("status", ["suspended", "suspending", "resuming", "error"])
def test_a_gpu_that_is_not_awake_is_never_read(tmp_path: Path, status: str) -> None:
    root = card_tree(tmp_path, "navi21-rx6900xt-sapphire-nitro", CARD_TABLES["navi21-rx6900xt-sapphire-nitro"], status)
    sysfs = FaultySysfs(root)
    gpu = read_one(root, sysfs)
    assert not [p for p in sysfs.reads if p.endswith("gpu_metrics")]
    assert gpu.gpu_metrics_revision is None


def test_read_once_per_tick_when_awake(tmp_path: Path) -> None:
    root = card_tree(tmp_path, "navi21-rx6900xt-sapphire-nitro", CARD_TABLES["navi21-rx6900xt-sapphire-nitro"],
                     "active")
    sysfs = FaultySysfs(root)
    source = AmdgpuSource(sysfs)
    for _ in range(3):
        readings, _ = source.read_all()
        assert readings[0].gpu_metrics_revision == "1.3"
    assert len([p for p in sysfs.reads if p.endswith("gpu_metrics")]) == 3


def test_eperm_is_asleep_not_an_error(tmp_path: Path) -> None:
    root = card_tree(tmp_path, "navi21-rx6900xt-sapphire-nitro", CARD_TABLES["navi21-rx6900xt-sapphire-nitro"])
    gpu = read_one(root, FaultySysfs(root, {"gpu_metrics": errno.EPERM}))
    assert gpu.errors == () and gpu.gpu_metrics_revision is None and gpu.temp("edge") is not None


@pytest.mark.parametrize("cause", ["EOPNOTSUPP", "empty"])
def test_unsupported_turns_the_table_off_logged_once(tmp_path: Path, caplog: pytest.LogCaptureFixture,
                                                      cause: str) -> None:
    data = b"" if cause == "empty" else CARD_TABLES["navi21-rx6900xt-sapphire-nitro"]
    root = card_tree(tmp_path, "navi21-rx6900xt-sapphire-nitro", data)
    sysfs = FaultySysfs(root, {"gpu_metrics": errno.EOPNOTSUPP} if cause == "EOPNOTSUPP" else {})
    source = AmdgpuSource(sysfs)
    with caplog.at_level(logging.INFO, logger="gpuwatch.amdgpu"):
        for _ in range(3):
            readings, _ = source.read_all()
            assert readings[0].errors == ()
    assert len([p for p in sysfs.reads if p.endswith("gpu_metrics")]) == 1
    assert len([r for r in caplog.records if "not read again" in r.getMessage()]) == 1
    assert list(source.metrics.off) == [readings[0].gpu_id]


def test_garbage_is_a_counted_read_error_logged_once_per_kind(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    root = card_tree(tmp_path, "navi21-rx6900xt-sapphire-nitro", b"\x40\x00\x01\x09" + bytes(60))
    source = AmdgpuSource(Sysfs(root))
    with caplog.at_level(logging.WARNING, logger="gpuwatch.amdgpu"):
        errors = [source.read_all()[0][0].errors for _ in range(3)]
    assert all(e[0].sensor == "gpu_metrics" and e[0].error.startswith("unknown revision: v1.9") for e in errors)
    assert len(caplog.records) == 1 and "gpu_metrics not used" in caplog.records[0].getMessage()
    device = next(root.rglob("gpu_metrics"))
    device.write_bytes(CARD_TABLES["navi21-rx6900xt-sapphire-nitro"][:60])
    assert source.read_all()[0][0].errors[0].error == "truncated: 60 of 120 bytes"
    device.write_bytes(CARD_TABLES["navi21-rx6900xt-sapphire-nitro"])
    assert source.read_all()[0][0].errors == ()  # a good table again: no error, values back


def test_other_read_failures_are_read_errors(tmp_path: Path) -> None:
    root = card_tree(tmp_path, "navi21-rx6900xt-sapphire-nitro", CARD_TABLES["navi21-rx6900xt-sapphire-nitro"])
    gpu = read_one(root, FaultySysfs(root, {"gpu_metrics": errno.EIO}))
    assert [(e.sensor, e.error) for e in gpu.errors] == [("gpu_metrics", "EIO")]


def test_no_file_no_values_no_error(tmp_path: Path) -> None:
    gpu = read_one(card_tree(tmp_path, "navi21-rx6900xt-sapphire-nitro"))
    assert gpu.gpu_metrics_revision is None and gpu.throttle_reasons is None and gpu.errors == ()
    assert [t.label for t in gpu.temps] == ["edge", "junction", "mem"]


def test_a_table_found_absent_is_looked_for_again_at_rediscovery_only(tmp_path: Path) -> None:
    """amdgpu registers gpu_metrics at probe or not at all: absent, it is not opened every tick (the same rule
    as any file found absent, gpus/amdgpu.py), and a discovery looks for it again."""
    root = card_tree(tmp_path, "navi21-rx6900xt-sapphire-nitro")
    sysfs = FaultySysfs(root)
    now = [0.0]
    source = AmdgpuSource(sysfs, rediscover_s=30.0, clock=lambda: now[0])
    for now[0] in (0.0, 1.0, 2.0):
        readings, _ = source.read_all()
        assert readings[0].gpu_metrics_revision is None and readings[0].errors == ()
    assert len([p for p in sysfs.reads if p.endswith("gpu_metrics")]) == 1
    table = CARD_TABLES["navi21-rx6900xt-sapphire-nitro"]
    (root / source.discovered().cards[0].device_dir / "gpu_metrics").write_bytes(table)
    now[0] = 29.0
    assert source.read_all()[0][0].gpu_metrics_revision is None
    now[0] = 30.0
    assert source.read_all()[0][0].gpu_metrics_revision == "1.3"
