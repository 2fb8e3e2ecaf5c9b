"""Every real capture in tests/fixtures/amdgpu reads without crashing and with the right values.

Values are checked against the raw files (kernel units converted by hand here) and against what
peer projects (LACT snapshots, procfs) assert for the same capture where they state the same quantity.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from gpuwatch.gpus.amdgpu import discover, read_card
from gpuwatch.model import GpuReading
from gpuwatch.sim.tree import FakeSysfsTree, load_capture
from gpuwatch.sysfs import Sysfs
from tests.support.paths import CARD_FILES, FIXTURES

LABELS = {1: "edge", 2: "junction", 3: "mem"}


def _read(tmp_path: Path, card_file: Path) -> tuple[list[GpuReading], list, dict[str, str]]:
    cap = load_capture(card_file)
    tree = FakeSysfsTree(tmp_path / "sys")
    tree.add_capture(cap)
    sysfs = Sysfs(tree.root)
    found = discover(sysfs)
    return [read_card(sysfs, c) for c in found.cards], list(found.unsupported), dict(cap.files)


def _raw(files: dict[str, str], name: str) -> str | None:
    """A device/ or hwmon/ file's stripped content, None if absent from the capture."""
    for key, value in files.items():
        if key == f"device/{name}" or (key.startswith("device/hwmon/") and key.split("/", 3)[-1] == name):
            return value.strip()
    return None


def _num(files: dict[str, str], name: str, scale: float = 1.0) -> float | None:
    raw = _raw(files, name)
    return None if raw in (None, "") else int(raw) * scale


@pytest.mark.parametrize("card_file", CARD_FILES, ids=lambda p: p.stem)
def test_capture_matches_raw_files(tmp_path: Path, card_file: Path) -> None:
    readings, unsupported, files = _read(tmp_path, card_file)
    driver = next(line.split("=")[1] for line in files["device/uevent"].splitlines()
                  if line.startswith("DRIVER="))
    if driver != "amdgpu":
        assert readings == [] and [u.driver for u in unsupported] == [driver]
        return
    assert len(readings) == 1 and unsupported == []
    gpu = readings[0]
    assert gpu.errors == (), gpu.errors
    slot = next(line.split("=")[1] for line in files["device/uevent"].splitlines()
                if line.startswith("PCI_SLOT_NAME="))
    assert gpu.gpu_id == slot
    assert gpu.device_id == next(line.split("=")[1] for line in files["device/uevent"].splitlines()
                                 if line.startswith("PCI_ID="))
    for index, label in LABELS.items():
        temp = gpu.temp(label)
        if _raw(files, f"temp{index}_input") is None:
            assert temp is None
            continue
        assert temp is not None
        assert temp.temp_c == _num(files, f"temp{index}_input", 1e-3)
        assert temp.crit_c == _num(files, f"temp{index}_crit", 1e-3)
        assert temp.emergency_c == _num(files, f"temp{index}_emergency", 1e-3)
        hyst = _num(files, f"temp{index}_crit_hyst", 1e-3)
        assert temp.crit_hyst_c == (None if hyst is None or hyst < -273 else hyst)
    power = _num(files, "power1_average", 1e-6)
    assert gpu.power_w == (power if power is not None else _num(files, "power1_input", 1e-6))
    expected = {
        "power_cap_w": _num(files, "power1_cap", 1e-6),
        "power_cap_max_w": _num(files, "power1_cap_max", 1e-6),
        "gpu_busy_ratio": _num(files, "gpu_busy_percent", 0.01),
        "mem_busy_ratio": _num(files, "mem_busy_percent", 0.01),
        "vram_used_bytes": _num(files, "mem_info_vram_used"),
        "vram_total_bytes": _num(files, "mem_info_vram_total"),
        "gtt_total_bytes": _num(files, "mem_info_gtt_total"),
        "sclk_hz": _num(files, "freq1_input"),
        "mclk_hz": _num(files, "freq2_input"),
        "vddgfx_v": _num(files, "in0_input", 1e-3),
        "fan_rpm": _num(files, "fan1_input"),
        "fan_max_rpm": _num(files, "fan1_max"),
        "pwm": _num(files, "pwm1"),
        "pwm_enable": _num(files, "pwm1_enable"),
        "pcie_link_width": _num(files, "current_link_width"),
    }
    for field, want in expected.items():
        got = getattr(gpu, field)
        assert (got is None) == (want is None), f"{field}: {got!r} vs {want!r} (missing must be None, never 0)"
        if want is not None:
            assert math.isclose(got, want, rel_tol=1e-9), f"{field}: {got} != {want}"


def _lact(card_file: Path) -> dict | None:
    expected = json.loads(card_file.with_suffix("").with_suffix(".expected.json").read_text())
    peers = expected["peers"]
    snap = peers.get("lact_snapshot") or peers.get("lact_snapshot_at_942526e3")
    return None if snap is None else snap.get("stats")


def _driver(card_file: Path) -> str:
    uevent = load_capture(card_file).files["device/uevent"]
    return next(line.split("=")[1] for line in uevent.splitlines() if line.startswith("DRIVER="))


# The amdgpu captures that come with a LACT snapshot: chosen here, so every case compares (none skips). The
# others: navi32-rx7800xt-amd-reference (amdgpu-sysfs-rs assertions only), the vega64 procfs/node_exporter
# fixture (its own test below), radeon-driver-pitcairn (not amdgpu: reported unsupported above).
LACT_CARDS = [c for c in CARD_FILES if _lact(c) is not None and _driver(c) == "amdgpu"]


def test_the_lact_comparison_leaves_out_only_the_captures_without_a_snapshot() -> None:
    assert sorted(c.stem for c in CARD_FILES if c not in LACT_CARDS) == [
        "navi32-rx7800xt-amd-reference", "radeon-driver-pitcairn-hd7870", "vega10-rx-vega64-procfs-fixture"]


@pytest.mark.parametrize("card_file", LACT_CARDS, ids=lambda p: p.stem)
def test_capture_agrees_with_lact(tmp_path: Path, card_file: Path) -> None:
    stats = _lact(card_file)
    readings, _, files = _read(tmp_path, card_file)
    assert stats is not None and len(readings) == 1
    gpu = readings[0]
    compared = 0
    for label, lact in (stats.get("temps") or {}).items():
        if lact.get("display_only") or gpu.temp(label) is None:
            continue
        assert gpu.temp(label).temp_c == pytest.approx(lact["current"], abs=1e-3)
        if lact.get("crit") is not None:
            assert gpu.temp(label).crit_c == pytest.approx(lact["crit"], abs=1e-3)
        compared += 1
    power = stats.get("power") or {}
    if power.get("average") is not None and gpu.power_w is not None:
        assert gpu.power_w == pytest.approx(power["average"], abs=1e-6)
        compared += 1
    if power.get("cap_current") is not None:
        assert gpu.power_cap_w == pytest.approx(power["cap_current"])
    fan = stats.get("fan") or {}
    # LACT fills fan speed from the binary gpu_metrics when fan1_input is absent (early RDNA4 kernels):
    # only the hwmon-backed value is comparable.
    if fan.get("speed_current") is not None and _raw(files, "fan1_input") is not None:
        assert gpu.fan_rpm == fan["speed_current"]
        compared += 1
    if fan.get("pwm_current") is not None and gpu.pwm is not None:
        assert gpu.pwm == fan["pwm_current"]
    if stats.get("busy_percent") is not None:
        assert gpu.gpu_busy_ratio == pytest.approx(stats["busy_percent"] / 100)
    clock = (stats.get("clockspeed") or {}).get("gpu_clockspeed")
    if clock is not None and gpu.sclk_hz is not None:
        assert gpu.sclk_hz / 1e6 == pytest.approx(clock, abs=1)
    vram = stats.get("vram") or {}
    if vram.get("total") is not None:
        assert gpu.vram_total_bytes == vram["total"]
    assert compared > 0


def test_procfs_fixture_agrees_with_procfs(tmp_path: Path) -> None:
    card_file = FIXTURES / "cards/vega10-rx-vega64-procfs-fixture.json"
    readings, _, _ = _read(tmp_path, card_file)
    want = json.loads((FIXTURES / "cards/vega10-rx-vega64-procfs-fixture.expected.json").read_text())
    stats = want["peers"]["procfs"]["ClassDRMCardAMDGPUStats"][0]
    gpu = readings[0]
    assert gpu.gpu_busy_ratio == pytest.approx(stats["GPUBusyPercent"] / 100)
    assert gpu.vram_total_bytes == stats["MemoryVRAMSize"]
    assert gpu.vram_used_bytes == stats["MemoryVRAMUsed"]
    assert gpu.gtt_total_bytes == stats["MemoryGTTSize"]
    assert gpu.gtt_used_bytes == stats["MemoryGTTUsed"]
    assert gpu.unique_id == stats["UniqueID"]
    assert gpu.temps == () and discover(Sysfs(tmp_path / "sys")).cards[0].hwmon_dir is None
