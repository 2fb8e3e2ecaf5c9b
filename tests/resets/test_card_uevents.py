"""A DRM card node's add/remove uevent makes the GPU source discover again at its next read (issue 31): a GPU
back from a reset under a new card number is bound within a tick or two, not at the periodic rediscovery."""

from __future__ import annotations

import pytest

from gpuwatch.gpus.amdgpu_source import AmdgpuSource
from gpuwatch.resets.uevent import card_changed
from gpuwatch.resets.watch import ResetWatch
from gpuwatch.sim.tree import FakeSysfsTree
from gpuwatch.sysfs import Sysfs
from tests.support.trees import capture

DEVICE = "/devices/pci0000:00/0000:00:01.1/0000:28:00.0"


def _uevent(action: str, devpath: str, **env: str) -> bytes:
    fields = {"ACTION": action, "DEVPATH": devpath, **env, "SEQNUM": "9001"}
    return f"{action}@{devpath}\0".encode() + b"".join(f"{k}={v}\0".encode() for k, v in fields.items())


@pytest.mark.parametrize(("datagram", "changed"), [
    (_uevent("add", f"{DEVICE}/drm/card2", SUBSYSTEM="drm", DEVNAME="dri/card2"), True),
    (_uevent("remove", f"{DEVICE}/drm/card1", SUBSYSTEM="drm", DEVNAME="dri/card1"), True),
    (_uevent("add", f"{DEVICE}/drm/card12", SUBSYSTEM="drm"), True),
    (_uevent("change", f"{DEVICE}/drm/card1", SUBSYSTEM="drm", WEDGED="none"), False),  # a reset, not a new node
    (_uevent("add", f"{DEVICE}/drm/card1/card1-DP-1", SUBSYSTEM="drm"), False),  # a connector
    (_uevent("add", f"{DEVICE}/drm/renderD128", SUBSYSTEM="drm"), False),
    (_uevent("add", f"{DEVICE}/drm/card²", SUBSYSTEM="drm"), False),
    (_uevent("add", "/devices/virtual/devcoredump/devcd1", SUBSYSTEM="devcoredump"), False),
    (_uevent("add", f"{DEVICE}/drm/card2", SUBSYSTEM="sound"), False),
    (b"libudev\0\xfe\xed" + _uevent("add", f"{DEVICE}/drm/card2", SUBSYSTEM="drm"), False),  # udev's copy
    (b"garbage", False),
])
def test_card_changed(datagram: bytes, changed: bool) -> None:
    assert card_changed(datagram) is changed


def test_a_card_uevent_makes_the_next_read_discover_again(fake_sysfs: FakeSysfsTree) -> None:
    card = fake_sysfs.add_capture(capture("navi10-rx5700xt-sapphire"))
    now = [0.0]
    source = AmdgpuSource(Sysfs(fake_sysfs.root), rediscover_s=30.0, clock=lambda: now[0])
    arrived: list[bytes] = []
    watch = ResetWatch(None, lambda: [arrived.pop() for _ in list(arrived)], on_cards_changed=source.rediscover)
    assert [r.card for r in source.read_all()[0]] == ["card1"]

    fake_sysfs.remove_card(card)
    now[0] = 1.0
    assert not source.read_all()[0][0].up  # gone: discovered again at the next read...
    now[0] = 2.0
    assert source.read_all()[0] == []  # ...and not found: the next periodic discovery is at 32 s
    back = fake_sysfs.add_capture(capture("navi10-rx5700xt-sapphire"), card="card2", pci_slot=card.pci_slot,
                                  hwmon="hwmon7")
    now[0] = 3.0
    assert source.read_all()[0] == []  # nobody told it yet
    arrived.append(_uevent("add", f"/{back.device_dir}/drm/card2", SUBSYSTEM="drm", DEVNAME="dri/card2"))
    assert watch.uevent_events({card.pci_slot}) == []  # no reset: only a new card node
    now[0] = 4.0
    (reading,) = source.read_all()[0]
    assert reading.up and reading.card == "card2"
