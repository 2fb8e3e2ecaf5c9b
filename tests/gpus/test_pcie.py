"""PCIe health: the slot link behind a Radeon's own switch, AER totals along the path, absent stays absent."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuwatch.gpus.amdgpu import Remembered, discover, read_card
from gpuwatch.gpus.pcie import aer_total, link_speed
from gpuwatch.model import GpuReading
from gpuwatch.sim.tree import FakeSysfsTree
from gpuwatch.sysfs import Sysfs
from tests.support.pcie import aer_text, radeon_switch, write_aer, write_port
from tests.support.trees import capture


def read(root: Path) -> GpuReading:
    sysfs = Sysfs(root)
    (card,) = discover(sysfs).cards
    return read_card(sysfs, card)


def test_rx9070_endpoint_says_32_gts_but_the_slot_runs_16(tmp_path: Path) -> None:
    # The real capture's endpoint reads "32.0 GT/s" (the switch's internal link) while the card runs
    # at 16 GT/s x16 in its slot (its pp_dpm_pcie and gpu_metrics say so).
    tree = FakeSysfsTree(tmp_path)
    bridge = radeon_switch(tree, "0000:00:01.1", 0x01, slot_link=("16.0 GT/s", 16), slot_max=("16.0 GT/s", 16))
    tree.add_capture(capture("navi48-rx9070-sapphire-pulse"), bridge=bridge)
    gpu = read(tree.root)
    assert (gpu.pcie_link_speed_gts, gpu.pcie_link_width) == (32.0, 16)
    assert (gpu.pcie_slot_link_speed_gts, gpu.pcie_slot_link_width) == (16.0, 16)
    assert (gpu.pcie_slot_max_link_speed_gts, gpu.pcie_slot_max_link_width) == (16.0, 16)


def test_a_degraded_slot_is_below_what_both_ends_can_do(tmp_path: Path) -> None:
    tree = FakeSysfsTree(tmp_path)
    bridge = radeon_switch(tree, "0000:00:03.1", 0x0a, slot_link=("2.5 GT/s", 4), slot_max=("16.0 GT/s", 16))
    # The platform port can do only Gen3: the slot's maximum is the lower end.
    write_port(tmp_path / "devices/pci0000:00/0000:00:03.1", "0x1022", "2.5 GT/s", 4, "8.0 GT/s", 16)
    tree.add_capture(capture("navi21-rx6900xt-sapphire-nitro"), bridge=bridge)
    gpu = read(tree.root)
    assert (gpu.pcie_slot_link_speed_gts, gpu.pcie_slot_link_width) == (2.5, 4)
    assert (gpu.pcie_slot_max_link_speed_gts, gpu.pcie_slot_max_link_width) == (8.0, 16)


def test_without_a_switch_the_gpus_own_link_is_the_slot(tmp_path: Path) -> None:
    tree = FakeSysfsTree(tmp_path)
    write_port(tmp_path / "devices/pci0000:00/0000:00:01.1", "0x8086", "8.0 GT/s", 16, "8.0 GT/s", 16)
    tree.add_capture(capture("polaris-rx580-sapphire-pulse"))
    gpu = read(tree.root)
    assert gpu.pcie_slot_link_speed_gts == gpu.pcie_link_speed_gts
    assert gpu.pcie_slot_max_link_speed_gts == min(8.0, gpu.pcie_max_link_speed_gts or 99)


def test_aer_totals_sum_the_path_and_absent_files_are_absent(tmp_path: Path) -> None:
    tree = FakeSysfsTree(tmp_path)
    bridge = radeon_switch(tree, "0000:00:01.1", 0x01)
    placed = tree.add_capture(capture("navi21-rx6900xt-sapphire-nitro"), bridge=bridge)
    assert read(tree.root).pcie_aer_correctable_total is None  # no AER capability anywhere: no value
    write_aer(tmp_path / placed.device_dir, correctable={"BadTLP": 1}, nonfatal={"CmpltTO": 1})
    write_aer(tmp_path / "devices/pci0000:00/0000:00:01.1", correctable={"RxErr": 4, "BadDLLP": 2})
    # The platform's parent bridge is not on the card's path: its errors do not count.
    write_aer(tmp_path / "devices/pci0000:00", correctable={"RxErr": 100})
    gpu = read(tree.root)
    assert (gpu.pcie_aer_correctable_total, gpu.pcie_aer_nonfatal_total, gpu.pcie_aer_fatal_total) == (7, 1, 0)
    assert gpu.errors == ()


def test_garbage_aer_file_is_a_read_error(tmp_path: Path) -> None:
    tree = FakeSysfsTree(tmp_path)
    placed = tree.add_capture(capture("navi21-rx6900xt-sapphire-nitro"))
    write_aer(tmp_path / placed.device_dir)
    (tmp_path / placed.device_dir / "aer_dev_fatal").write_text("\x01\x02junk\n")
    gpu = read(tree.root)
    assert [e.sensor for e in gpu.errors] == ["aer_dev_fatal"] and gpu.pcie_aer_fatal_total is None


def test_the_fixed_part_is_kept_until_discovery_and_the_slot_link_is_read_every_tick(tmp_path: Path) -> None:
    """The switch walk, the ends' maxima and the AER totals are kept once read without an error (until the
    next discovery); the slot link's current speed is read every tick; a garbage AER file is reported every
    tick, as before."""
    tree = FakeSysfsTree(tmp_path)
    bridge = radeon_switch(tree, "0000:00:01.1", 0x01, slot_link=("16.0 GT/s", 16), slot_max=("16.0 GT/s", 16))
    placed = tree.add_capture(capture("navi21-rx6900xt-sapphire-nitro"), bridge=bridge)
    write_aer(tmp_path / placed.device_dir, correctable={"BadTLP": 1})
    (tmp_path / placed.device_dir / "aer_dev_fatal").write_text("junk\n")
    sysfs = Sysfs(tmp_path)
    (card,) = discover(sysfs).cards
    static: Remembered = {}
    for _ in range(2):
        gpu = read_card(sysfs, card, static)
        assert [e.sensor for e in gpu.errors] == ["aer_dev_fatal"] and gpu.pcie_aer_correctable_total == 1
    assert static[card.device_dir].pcie is None  # a failed read is not kept
    write_aer(tmp_path / placed.device_dir, correctable={"BadTLP": 1})
    static = {}  # the next discovery
    gpu = read_card(sysfs, card, static)
    assert gpu.errors == () and static[card.device_dir].pcie is not None
    write_aer(tmp_path / placed.device_dir, correctable={"BadTLP": 5})  # seen at the next discovery only
    slot_port = tmp_path / "devices" / bridge.rsplit("/", 1)[0]  # the upstream switch port: the slot link
    (slot_port / "current_link_speed").write_text("2.5 GT/s PCIe\n")
    gpu = read_card(sysfs, card, static)
    assert (gpu.pcie_aer_correctable_total, gpu.pcie_slot_link_speed_gts) == (1, 2.5)
    assert read_card(sysfs, card).pcie_aer_correctable_total == 5


@pytest.mark.parametrize(("text", "total"), [
    (aer_text("correctable", {"RxErr": 3, "Timeout": 2}), 5),
    (aer_text("fatal"), 0),
    # 4.19's long names with spaces, and a bit without a name (kernel prints it only when non-zero)
    ("Receiver Error 2\nBad TLP 0\nRELAY_NUM Rollover 0\ndev_cor_errs_bit[9] 1\nTOTAL_ERR_COR 3\n", 3),
    ("RxErr 2\nBadTLP 1\n", 3),  # no TOTAL line: the sum
])
def test_aer_file_formats(text: str, total: int) -> None:
    assert aer_total(text.strip()) == total


@pytest.mark.parametrize("text", ["junk", "RxErr two", "TOTAL_ERR_COR"])
def test_aer_garbage_raises_value_error(text: str) -> None:
    with pytest.raises(ValueError):
        aer_total(text)


def test_link_speed_text() -> None:
    assert link_speed("16.0 GT/s PCIe") == 16.0 and link_speed("2.5 GT/s PCIe") == 2.5
    assert link_speed("Unknown") is None
    with pytest.raises(ValueError):
        link_speed("fast")
