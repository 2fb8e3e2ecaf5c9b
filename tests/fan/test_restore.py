"""`gpuwatch fans-auto` (the fans' restore-all) and the restore file: ordered write logs on real captures,
never pwm1_enable=0."""

from __future__ import annotations

from pathlib import Path

from gpuwatch.actuation.actuator import Actuator, Handback, RestoreFile
from gpuwatch.fan.pwm1 import Pwm1Restore
from gpuwatch.fan.restore import kind
from gpuwatch.sim.tree import FakeSysfsTree
from gpuwatch.sysfs import Sysfs
from tests.support.fan_rig import RecordingSysfs
from tests.support.trees import capture


def fans_auto(sysfs: Sysfs, runtime_dir: Path) -> Handback:
    return Actuator(kind(sysfs), runtime_dir, deadline_s=5.0).restore_all(without_records=True)


def test_fans_auto_without_restore_file_ordered_writes(tmp_path: Path) -> None:
    tree = FakeSysfsTree(tmp_path / "sys")
    rdna2 = tree.add_capture(capture("navi21-rx6900xt-sapphire-nitro"))
    tree.add_capture(capture("navi48-rx9070xt-powercolor"), card="card1", pci_slot="0000:30:00.0")
    tree.add_capture(capture("apu-phoenix-lenovo"), card="card2", pci_slot="0000:c1:00.0")
    tree.write(f"{rdna2.hwmon_dir}/pwm1_enable", "1\n")
    sysfs = RecordingSysfs(tree.root)
    result = fans_auto(sysfs, tmp_path / "none")
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
    result = fans_auto(sysfs, tmp_path)
    assert result.problems == [] and result.done == [
        f"{card.pci_slot}: fan handed back to the firmware (pwm1_enable 2, automatic)"
    ]
    assert sysfs.take_log() == [("pwm1_enable", "2")]
    assert not restore.path.exists()


def test_records_added_at_once_by_every_gpu_worker_all_stay(tmp_path: Path) -> None:
    """The fan controller takes every GPU on its own worker at the same moment (issue 24): concurrent adds
    must neither lose a record nor trip over each other's temporary file."""
    import threading

    restore = RestoreFile(tmp_path / "fan-restore.json")
    for round_ in range(5):
        slots = [f"0000:{round_:02x}:{i:02x}.0" for i in range(8)]
        start = threading.Barrier(len(slots))
        errors: list[BaseException] = []

        def add(slot: str, start: threading.Barrier, errors: list[BaseException]) -> None:
            start.wait()
            try:
                restore.add(slot, Pwm1Restore(path=f"{slot}/pwm1_enable", pwm1_enable=2).to_json())
            except BaseException as exc:  # noqa: BLE001  (collected for the assertion)
                errors.append(exc)

        threads = [threading.Thread(target=add, args=(slot, start, errors)) for slot in slots]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == []
        assert set(slots) <= set(restore.load())


def test_a_record_whose_card_moved_is_restored_where_the_card_is_now(tmp_path: Path) -> None:
    """The record names hwmon5; after a reset the card came back as hwmon3 in manual mode (a killed daemon
    had it): the record's device is gone, so the card is found by its slot and set to automatic."""
    tree = FakeSysfsTree(tmp_path / "sys")
    card = tree.add_capture(capture("navi21-rx6900xt-sapphire-nitro"), hwmon="hwmon3")
    assert card.hwmon_dir
    tree.write(f"{card.hwmon_dir}/pwm1_enable", "1\n")
    moved = f"{card.hwmon_dir}/pwm1_enable".replace("hwmon3", "hwmon5")
    RestoreFile(tmp_path / "fan-restore.json").add(card.pci_slot, Pwm1Restore(path=moved, pwm1_enable=2).to_json())
    sysfs = RecordingSysfs(tree.root)
    result = fans_auto(sysfs, tmp_path)
    assert result.problems == []
    assert result.done == [f"{card.pci_slot}: fan handed back to the firmware (pwm1_enable 2, automatic)"]
    assert (tree.root / card.hwmon_dir / "pwm1_enable").read_text().strip() == "2"
    assert not (tmp_path / "fan-restore.json").exists()
