"""The power restore file and its part of `gpuwatch restore` (after a SIGKILL or a watchdog kill): by PCI slot,
verified, nothing written without a record, problems named per GPU and the record kept for the next try."""

from __future__ import annotations

from pathlib import Path

from gpuwatch.sim.tree import FakeSysfsTree
from tests.support.power_rig import EACCES, CapSysfs, power_records, restore_caps
from tests.support.trees import capture


def _no_nvml() -> object:
    raise AssertionError("NVML is not needed for amdgpu records")


def _tree(tmp_path: Path) -> tuple[FakeSysfsTree, str, str]:
    tree = FakeSysfsTree(tmp_path / "sys")
    card = tree.add_capture(capture("navi21-rx6900xt-sapphire-nitro"), hwmon="hwmon3")
    assert card.hwmon_dir
    tree.write(f"{card.hwmon_dir}/power1_cap", "200000000\n")  # lowered by a daemon that was SIGKILLed
    return tree, card.pci_slot, f"{card.hwmon_dir}/power1_cap"


def test_restores_by_pci_slot_where_the_card_is_now(tmp_path: Path) -> None:
    tree, slot, cap = _tree(tmp_path)
    records = power_records(tmp_path / "run")
    # Recorded when the card was hwmon5: after a reset it came back as hwmon3.
    records.add(slot, {"backend": "hwmon", "cap_uw": 289_000_000, "path": cap.replace("hwmon3", "hwmon5")})
    sysfs = CapSysfs(tree.root)
    result = restore_caps(sysfs, tmp_path / "run", _no_nvml)
    assert result.problems == [] and result.done == [f"{slot}: power cap back to its original 289 W"]
    assert sysfs.take_log() == [("power1_cap", "289000000")]
    assert (tree.root / cap).read_text() == "289000000" and not records.path.exists()


def test_nothing_recorded_nothing_written(tmp_path: Path) -> None:
    tree, _, cap = _tree(tmp_path)
    sysfs = CapSysfs(tree.root)
    result = restore_caps(sysfs, tmp_path / "run", _no_nvml)
    assert result.done == result.problems == []
    assert sysfs.take_log() == [] and (tree.root / cap).read_text() == "200000000\n"


def test_a_refused_restore_is_reported_and_kept_for_the_next_try(tmp_path: Path) -> None:
    tree, slot, _ = _tree(tmp_path)
    records = power_records(tmp_path / "run")
    records.add(slot, {"backend": "hwmon", "cap_uw": 289_000_000})
    sysfs = CapSysfs(tree.root)
    sysfs.refuse = EACCES
    (problem,) = restore_caps(sysfs, tmp_path / "run", _no_nvml).problems
    assert slot in problem and "289 W" in problem and EACCES in problem
    assert slot in records.load()


def test_a_broken_record_is_named(tmp_path: Path) -> None:
    tree, slot, _ = _tree(tmp_path)
    records = power_records(tmp_path / "run")
    records.add(slot, {"backend": "hwmon", "cap_uw": "lots"})
    records.add("0000:99:00.0", {"backend": "pwm9"})
    problems = restore_caps(CapSysfs(tree.root), tmp_path / "run", _no_nvml).problems
    assert len(problems) == 2 and "without a cap" in problems[0] and "unknown" in problems[1]
