"""Discovery and reading edge cases: other drivers, card10, connectors, two GPUs, suspend, bad files."""

from __future__ import annotations

import errno
from pathlib import Path

from gpuwatch.gpus.amdgpu import discover, read_card
from gpuwatch.gpus.amdgpu_source import AmdgpuSource
from gpuwatch.gpus.sampler import Sampler
from gpuwatch.sim.tree import FakeSysfsTree
from gpuwatch.sysfs import Sysfs
from tests.support.trees import FaultySysfs, capture

NAVI10 = "navi10-rx5700xt-sapphire"


def test_skips_connectors_and_lists_other_drivers_unread(fake_sysfs: FakeSysfsTree) -> None:
    fake_sysfs.add_capture(capture(NAVI10), card="card1")
    fake_sysfs.add_connector("card1", "card1-DP-1")
    fake_sysfs.add_capture(capture("radeon-driver-pitcairn-hd7870"), card="card2", pci_slot="0000:44:00.0")
    intel = fake_sysfs.add_card({"device/uevent": "DRIVER=i915\nPCI_ID=8086:3E92\n"}, card="card3")
    found = discover(Sysfs(fake_sysfs.root))
    assert [c.card for c in found.cards] == ["card1"]
    assert {(u.card, u.driver) for u in found.unsupported} == {("card2", "radeon"), ("card3", "i915")}
    assert intel.pci_slot in {u.gpu_id for u in found.unsupported}


def test_card10_and_two_gpus_identified_by_pci_slot(fake_sysfs: FakeSysfsTree) -> None:
    fake_sysfs.add_capture(capture(NAVI10), card="card10", pci_slot="0000:0a:00.0", hwmon="hwmon12")
    fake_sysfs.add_capture(capture(NAVI10), card="card2", pci_slot="0000:0b:00.0", hwmon="hwmon3")
    source = AmdgpuSource(Sysfs(fake_sysfs.root))
    snapshot = Sampler([source]).sample()
    assert [(g.gpu_id, g.card) for g in snapshot.gpus] == [("0000:0a:00.0", "card10"), ("0000:0b:00.0", "card2")]
    assert all(g.temp("junction").temp_c == 58.0 for g in snapshot.gpus)
    assert source.locate(snapshot.gpus[0].gpu_id).hwmon_dir.endswith("hwmon/hwmon12")  # type: ignore[union-attr]


def test_hwmon_found_by_name_not_number(fake_sysfs: FakeSysfsTree) -> None:
    card = fake_sysfs.add_capture(capture(NAVI10))
    fake_sysfs.write(f"{card.device_dir}/hwmon/hwmon0/name", "nvme\n")
    fake_sysfs.write(f"{card.device_dir}/hwmon/hwmon0/temp1_input", "35000\n")
    assert discover(Sysfs(fake_sysfs.root)).cards[0].hwmon_dir.endswith("hwmon1")


def test_suspended_gpu_is_not_read(fake_sysfs: FakeSysfsTree) -> None:
    card = fake_sysfs.add_capture(capture(NAVI10))
    fake_sysfs.write(f"{card.device_dir}/power/runtime_status", "suspended\n")
    sysfs = FaultySysfs(fake_sysfs.root, {"temp1_input": errno.EIO})  # any hwmon read would fail loudly
    gpu = read_card(sysfs, discover(sysfs).cards[0])
    assert gpu.suspended and gpu.temps == () and gpu.power_w is None and gpu.errors == ()


def test_read_errors_are_recorded_per_sensor_and_never_raise(fake_sysfs: FakeSysfsTree) -> None:
    card = fake_sysfs.add_capture(capture(NAVI10))
    fake_sysfs.write(f"{card.hwmon_dir}/fan1_input", "garbage\n")
    fake_sysfs.write(f"{card.device_dir}/current_link_speed", "Unknown speed\n")
    faults = {"temp2_input": errno.EIO, "power1_average": errno.EPERM, "gpu_busy_percent": errno.ENODATA,
              "pwm1_enable": errno.EINVAL}
    sysfs = FaultySysfs(fake_sysfs.root, faults)
    gpu = read_card(sysfs, discover(sysfs).cards[0])
    errors = {e.sensor: e.error for e in gpu.errors}
    assert errors == {
        "temp2_input": "EIO", "power1_average": "EPERM", "gpu_busy_percent": "ENODATA", "pwm1_enable": "EINVAL",
        "fan1_input": "garbage: 'garbage'", "current_link_speed": "garbage: 'Unknown speed'",
    }
    assert gpu.temp("junction").temp_c is None and gpu.temp("junction").crit_c == 108.0
    assert gpu.power_w is None and gpu.fan_rpm is None and gpu.gpu_busy_ratio is None
    assert gpu.temp("edge").temp_c == 58.0


def test_empty_and_binary_files(fake_sysfs: FakeSysfsTree) -> None:
    card = fake_sysfs.add_capture(capture(NAVI10))
    fake_sysfs.write(f"{card.hwmon_dir}/power1_cap", "\n")  # limit query failed: empty, not an error
    (Path(fake_sysfs.root) / card.hwmon_dir / "temp3_input").write_bytes(b"\xff\xfe\x00")
    gpu = read_card(Sysfs(fake_sysfs.root), discover(Sysfs(fake_sysfs.root)).cards[0])
    assert gpu.power_cap_w is None
    assert [e.sensor for e in gpu.errors] == ["temp3_input"]


def test_missing_files_are_none_never_zero(fake_sysfs: FakeSysfsTree) -> None:
    fake_sysfs.add_capture(capture("apu-phoenix-lenovo"))
    gpu = read_card(Sysfs(fake_sysfs.root), discover(Sysfs(fake_sysfs.root)).cards[0])
    assert gpu.fan_rpm is None and gpu.pwm is None and gpu.temp("junction") is None
    assert gpu.temp("edge").crit_c is None
    assert gpu.unique_id is None  # Phoenix: empty unique_id file (SYSFS_FACTS §2)


def test_vanished_gpu_stays_with_up_false(fake_sysfs: FakeSysfsTree) -> None:
    import shutil

    card = fake_sysfs.add_capture(capture(NAVI10))
    sampler = Sampler([AmdgpuSource(Sysfs(fake_sysfs.root))])
    assert sampler.sample().gpus[0].up
    shutil.rmtree(Path(fake_sysfs.root) / card.device_dir)
    (Path(fake_sysfs.root) / "class/drm/card1").unlink()
    gone = sampler.sample().gpus
    assert len(gone) == 1 and not gone[0].up and gone[0].name and gone[0].temps == ()
    assert Sampler([AmdgpuSource(Sysfs(fake_sysfs.root))]).sample().gpus == ()


def test_a_card_whose_hwmon_or_device_directory_vanished_reads_down(fake_sysfs: FakeSysfsTree) -> None:
    """read_card looks for the hwmon directory first: there, the device's is there too (one stat a tick)."""
    import shutil

    placed = fake_sysfs.add_capture(capture(NAVI10))
    sysfs = Sysfs(fake_sysfs.root)
    (card,) = discover(sysfs).cards
    assert read_card(sysfs, card).up
    assert placed.hwmon_dir is not None
    shutil.rmtree(Path(fake_sysfs.root) / placed.hwmon_dir)
    hwmon_gone = read_card(sysfs, card)
    assert not hwmon_gone.up and [e.error for e in hwmon_gone.errors] == ["hwmon directory vanished (driver re-probe?)"]
    shutil.rmtree(Path(fake_sysfs.root) / card.device_dir)
    device_gone = read_card(sysfs, card)
    assert not device_gone.up and device_gone.errors == ()
