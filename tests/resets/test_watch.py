"""Reset detection on a real-topology fake sysfs: devcoredumps (kept, dismissed), WEDGED uevents, the watch."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gpuwatch.gpus.amdgpu_source import AmdgpuSource
from gpuwatch.gpus.sampler import Sampler
from gpuwatch.model import GpuProcess
from gpuwatch.resets.devcoredump import DevCoredumps
from gpuwatch.resets.uevent import open_uevents, parse, wedged
from gpuwatch.resets.watch import ResetWatch
from gpuwatch.sim.resets import SimulatedResets
from gpuwatch.sim.tree import FakeCard, FakeSysfsTree
from gpuwatch.sysfs import Sysfs, SysfsError
from tests.support.trees import capture

SLOT = "0000:03:00.0"


@pytest.fixture
def card(fake_sysfs: FakeSysfsTree) -> FakeCard:
    return fake_sysfs.add_capture(capture("navi21-rx6900xt-sapphire-nitro"), card="card0", pci_slot=SLOT)


def kernel(fake_sysfs: FakeSysfsTree, card: FakeCard) -> SimulatedResets:
    """Plays the kernel's devcoredump class; a second device (a Wi-Fi card) dumps too."""
    wifi = "devices/pci0000:00/0000:00:1c.0/0000:05:00.0"
    (fake_sysfs.root / wifi).mkdir(parents=True)
    return SimulatedResets(fake_sysfs.root, [card.device_dir, wifi], [card.card, "phy0"])


def test_a_dump_of_our_gpu_is_kept_and_dismissed_others_are_left_alone(
        fake_sysfs: FakeSysfsTree, card: FakeCard, tmp_path: Path) -> None:
    sim = kernel(fake_sysfs, card)
    assert sim.inject(0, 0.0, 5.0, 4242, "python3") == "devcd1"
    sim.inject(1, 0.0, 5.0, None, None)  # another device's dump
    assert os.readlink(fake_sysfs.root / card.device_dir / "devcoredump").endswith("virtual/devcoredump/devcd1")
    original = (fake_sysfs.root / "devices/virtual/devcoredump/devcd1/data").read_text()
    assert original.startswith("**** AMDGPU Device Coredump ****\n") and "PID: 4242" in original
    dumps = DevCoredumps(Sysfs(fake_sysfs.root), tmp_path / "keep")
    (dump,) = dumps.poll({SLOT})
    assert dump.gpu_id == SLOT and dump.name == "devcd1" and dump.problem is None
    assert dump.path is not None and dump.path.read_text() == original
    assert dump.summary.pid == 4242 and dump.summary.vram_lost
    assert dumps.poll({SLOT}) == []  # seen once
    sim.advance(1.0)  # the kernel drops a dismissed dump; the other device's stays
    assert sorted(os.listdir(fake_sysfs.root / "class/devcoredump")) == ["devcd2", "disabled"]
    assert not (fake_sysfs.root / card.device_dir / "devcoredump").exists()


def test_only_the_newest_copies_are_kept(fake_sysfs: FakeSysfsTree, card: FakeCard, tmp_path: Path) -> None:
    sim = kernel(fake_sysfs, card)
    dumps = DevCoredumps(Sysfs(fake_sysfs.root), tmp_path / "keep", keep=2)
    for at in range(4):
        sim.inject(0, float(at), 0.0, 4242, "python3")
        assert len(dumps.poll({SLOT})) == 1
        sim.advance(float(at) + 0.5)
    assert sorted(p.name.rsplit("-", 1)[-1] for p in (tmp_path / "keep").iterdir()) == ["devcd3.txt", "devcd4.txt"]


class NotRoot(Sysfs):
    def read_all(self, relative: str, max_bytes: int) -> bytes | None:
        raise SysfsError(relative, "EACCES")  # data is 0600 root


def test_an_unreadable_dump_still_counts_and_is_not_dismissed(
        fake_sysfs: FakeSysfsTree, card: FakeCard, tmp_path: Path) -> None:
    sim = kernel(fake_sysfs, card)
    sim.inject(0, 0.0, 5.0, 4242, "python3")
    (dump,) = DevCoredumps(NotRoot(fake_sysfs.root), tmp_path / "keep").poll({SLOT})
    assert dump.path is None and "EACCES" in (dump.problem or "")
    sim.advance(1.0)
    assert (fake_sysfs.root / "class/devcoredump/devcd1").exists()


def test_wedged_uevents() -> None:
    # As `udevadm monitor --kernel --property` shows xe's (amdgpu sends WEDGED=none, later with PID/TASK).
    xe = (b"change@/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:01.0/0000:03:00.0/drm/card0\0ACTION=change\0"
          b"DEVPATH=/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:01.0/0000:03:00.0/drm/card0\0SUBSYSTEM=drm\0"
          b"WEDGED=rebind,bus-reset\0DEVNAME=dri/card0\0DEVTYPE=drm_minor\0SEQNUM=5208\0MAJOR=226\0MINOR=0\0")
    event = wedged(xe)
    assert event is not None and (event.gpu_id, event.methods, event.pid) == (SLOT, "rebind,bus-reset", None)
    amd = xe.replace(b"WEDGED=rebind,bus-reset\0", b"WEDGED=none\0PID=4242\0TASK=python3\0")
    event = wedged(amd)
    assert event is not None and (event.methods, event.pid, event.task) == ("none", 4242, "python3")
    assert wedged(xe.replace(b"ACTION=change", b"ACTION=add").replace(b"change@", b"add@")) is None
    assert wedged(b"add@/devices/virtual/devcoredump/devcd1\0ACTION=add\0SUBSYSTEM=devcoredump\0") is None
    assert parse(b"libudev\0\xfe\xed\xca\xfe...") is None and parse(b"garbage") is None and wedged(b"") is None


def test_the_kernel_socket_opens_and_drains_without_blocking() -> None:
    sock = open_uevents()
    if sock is None:
        pytest.skip("no NETLINK_KOBJECT_UEVENT here")
    try:
        assert isinstance(sock.drain(), list)
    finally:
        sock.close()


def test_the_watch_counts_a_reset_once_and_follows_the_gpu_back(
        fake_sysfs: FakeSysfsTree, card: FakeCard, tmp_path: Path) -> None:
    sim = kernel(fake_sysfs, card)
    watch = ResetWatch(DevCoredumps(Sysfs(fake_sysfs.root), tmp_path / "keep"), sim.take_uevents, answer_ticks=3)
    sampler = Sampler([AmdgpuSource(Sysfs(fake_sysfs.root))])
    stuck = [GpuProcess(pid=4242, gpu_id=SLOT, command="python3", state="D")]

    def tick(now: float, processes: list[GpuProcess] | None = None) -> tuple[int, bool, tuple[int, ...]]:
        snapshot = sampler.sample()
        events = watch.detect(snapshot)
        (state,) = watch.update(snapshot, events, [] if processes is None else processes, now, 1000.0 + now)
        assert state == watch._gpus[SLOT].published()  # a kept state is the one its Recovery makes
        return state.resets_total, state.recovering, state.stuck_pids

    assert tick(0) == (0, False, ())
    sim.inject(0, 0.0, 1.0, 4242, "python3")
    assert tick(1, stuck) == (1, True, (4242,)) and watch.recovering() == {SLOT}
    sim.advance(2.0)  # the outage is over: WEDGED=none, the same incident
    assert tick(2, stuck) == (1, True, (4242,))
    assert tick(3) == (1, True, ())
    assert tick(4) == (1, False, ()) and watch.recovering() == frozenset()
    kept = watch.published(sampler.sample())
    assert tick(5) == (1, False, ()) and watch.published(sampler.sample()) == kept
    assert watch.published(sampler.sample())[0] is kept[0]  # nothing happened: made once, handed out again
