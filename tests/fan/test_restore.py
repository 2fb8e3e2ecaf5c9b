"""`gpuwatch fans-auto` and the restore file: ordered write logs on real captures, never pwm1_enable=0."""

from __future__ import annotations

from pathlib import Path

from gpuwatch.fan.pwm1 import Pwm1Restore
from gpuwatch.fan.restore import fans_auto
from gpuwatch.restore_file import RestoreFile
from gpuwatch.sim.tree import FakeSysfsTree
from tests.support.fan_rig import RecordingSysfs
from tests.support.trees import capture


def test_fans_auto_without_restore_file_ordered_writes(tmp_path: Path) -> None:
    tree = FakeSysfsTree(tmp_path / "sys")
    rdna2 = tree.add_capture(capture("navi21-rx6900xt-sapphire-nitro"))
    tree.add_capture(capture("navi48-rx9070xt-powercolor"), card="card1", pci_slot="0000:30:00.0")
    tree.add_capture(capture("apu-phoenix-lenovo"), card="card2", pci_slot="0000:c1:00.0")
    tree.write(f"{rdna2.hwmon_dir}/pwm1_enable", "1\n")
    sysfs = RecordingSysfs(tree.root)
    result = fans_auto(sysfs, RestoreFile(tmp_path / "none.json"))
    assert result.problems == []
    assert sysfs.take_log() == [("pwm1_enable", "2"), ("fan_curve", "r\n"), ("fan_curve", "c\n")]
    assert result.done == ["0000:0c:00.0: fan handed back to the firmware (pwm1_enable 2, automatic)",
                           "0000:30:00.0: fan handed back to the firmware (fan_curve reset to the firmware's)"]


def test_fans_auto_from_restore_file_never_writes_zero(tmp_path: Path) -> None:
    tree = FakeSysfsTree(tmp_path / "sys")
    card = tree.add_capture(capture("navi21-rx6900xt-sapphire-nitro"))
    tree.write(f"{card.hwmon_dir}/pwm1_enable", "1\n")
    restore = RestoreFile(tmp_path / "fan-restore.json")
    restore.add(card.pci_slot, Pwm1Restore(path=f"{card.hwmon_dir}/pwm1_enable", pwm1_enable=0).to_json())
    sysfs = RecordingSysfs(tree.root)
    result = fans_auto(sysfs, restore)
    assert result.problems == [] and result.done == [f"{card.pci_slot}: fan handed back to the firmware (pwm1_enable 2, automatic)"]
    assert sysfs.take_log() == [("pwm1_enable", "2")]
    assert not restore.path.exists()
