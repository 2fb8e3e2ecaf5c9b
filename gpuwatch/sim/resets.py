"""A simulated GPU reset, as the kernel shows one (drivers/base/devcoredump.c, amdgpu_dev_coredump.c,
drm_dev_wedged_event in drm_drv.c):

* a device coredump appears at once: ``devices/virtual/devcoredump/devcd<K>/`` with ``data`` (amdgpu's
  dump text, naming the process the hung job belonged to) and a relative ``failing_device`` link to the
  card's PCI directory, ``class/devcoredump/devcd<K>`` and the card's reverse ``devcoredump`` link. The
  kernel keeps one per device: a write to ``data`` dismisses it, and it goes after 5 minutes anyway;
* the card stops answering for the outage (the caller makes its sensor files unreadable);
* then ``WEDGED=none`` (recovered through a reset) is sent on the card's primary node, as a uevent
  datagram that ``take_uevents`` hands to the daemon in place of the kernel's netlink socket.
"""

from __future__ import annotations

import os
import platform
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

DUMP_TIMEOUT_S = 300.0  # DEVCD_TIMEOUT
DUMP_HEAD = "**** AMDGPU Device Coredump ****"


@dataclass
class _Dump:
    name: str
    card: int
    until_s: float


class SimulatedResets:
    def __init__(self, root: Path, device_dirs: list[str], cards: list[str]) -> None:
        self.root = root
        self.device_dirs = device_dirs  # per card index, relative to root
        self.cards = cards  # cardN names
        self.outage_until: dict[int, float] = {}
        self._dumps: list[_Dump] = []
        self._uevents: list[bytes] = []
        self._recovered: list[tuple[int, float, int | None, str | None]] = []  # card, at, pid, task
        self._counter = 0
        self._seqnum = 5000
        (root / "class/devcoredump").mkdir(parents=True, exist_ok=True)
        (root / "class/devcoredump/disabled").write_text("0\n")

    def answering(self, card: int, sim_now_s: float) -> bool:
        return sim_now_s >= self.outage_until.get(card, -1.0)

    def inject(self, card: int, sim_now_s: float, outage_s: float, pid: int | None, task: str | None) -> str:
        """Reset ``card`` now: dump, outage, and WEDGED=none once it is over. Returns the dump's name."""
        self.outage_until[card] = sim_now_s + outage_s
        self._recovered.append((card, sim_now_s + outage_s, pid, task))
        self._counter += 1
        name = f"devcd{self._counter}"
        real = self.root / "devices/virtual/devcoredump" / name
        real.mkdir(parents=True)
        (real / "data").write_text(dump_text(pid, task))
        os.symlink(os.path.relpath(self.root / self.device_dirs[card], real), real / "failing_device")
        os.symlink(os.path.relpath(real, self.root / "class/devcoredump"), self.root / "class/devcoredump" / name)
        device = self.root / self.device_dirs[card]
        os.symlink(os.path.relpath(real, device), device / "devcoredump")
        self._dumps.append(_Dump(name, card, sim_now_s + DUMP_TIMEOUT_S))
        self._event("add", f"/devices/virtual/devcoredump/{name}", SUBSYSTEM="devcoredump")
        return name

    def advance(self, sim_now_s: float) -> None:
        for dump in list(self._dumps):
            data = self.root / "devices/virtual/devcoredump" / dump.name / "data"
            dismissed = not data.exists() or not data.read_text(errors="replace").startswith(DUMP_HEAD)
            if dismissed or sim_now_s >= dump.until_s:
                self._drop(dump)
        for item in [r for r in self._recovered if sim_now_s >= r[1]]:
            self._recovered.remove(item)
            card, _, pid, task = item
            extra = {"PID": str(pid), "TASK": task or "?"} if pid is not None else {}
            number = self.cards[card].removeprefix("card")
            self._event("change", f"/{self.device_dirs[card]}/drm/{self.cards[card]}", SUBSYSTEM="drm",
                        WEDGED="none", **extra, DEVNAME=f"dri/{self.cards[card]}", DEVTYPE="drm_minor", MAJOR="226",
                        MINOR=number)

    def take_uevents(self) -> list[bytes]:
        got, self._uevents = self._uevents, []
        return got

    def _drop(self, dump: _Dump) -> None:
        self._dumps.remove(dump)
        (self.root / "class/devcoredump" / dump.name).unlink(missing_ok=True)
        (self.root / self.device_dirs[dump.card] / "devcoredump").unlink(missing_ok=True)
        shutil.rmtree(self.root / "devices/virtual/devcoredump" / dump.name, ignore_errors=True)
        self._event("remove", f"/devices/virtual/devcoredump/{dump.name}", SUBSYSTEM="devcoredump")

    def _event(self, action: str, devpath: str, **env: str) -> None:
        self._seqnum += 1
        fields = {"ACTION": action, "DEVPATH": devpath, **env, "SEQNUM": str(self._seqnum)}
        body = b"".join(f"{key}={value}\0".encode() for key, value in fields.items())
        self._uevents.append(f"{action}@{devpath}\0".encode() + body)


def dump_text(pid: int | None, task: str | None) -> str:
    """An amdgpu device coredump as 6.10+ kernels write it (the sections gpuwatch reads, and some it skips)."""
    process = f"process_name: {task or '?'} PID: {pid}\n" if pid is not None else ""
    return (
        f"{DUMP_HEAD}\nversion: 1\nkernel: {platform.release()}\nmodule: amdgpu\n"
        f"time: {time.monotonic():.9f}\n{process}\n"
        "SOC Information\nSOC Device id: 29471\nSOC PCI Revision id: 202\nSOC Family: 143\nSOC Revision id: 2\n"
        "SOC External Revision id: 42\n\nSOC Memory Information\nreal vram size: 6442450944\n"
        "visible vram size: 268435456\ngtt size: 8589934592\n\nHW IP Version Information\n"
        "HWIP: GC[1][0]: v10.1.10.0.0\nHWIP: SDMA0[3][0]: v5.0.2.0.0\n\n"
        "Ring timed out details\nIP Type: 0 Ring Name: gfx_0.0.0\n\n"
        "[gfxhub] Page fault observed\nFaulty page starting at address: 0x0000000000001000\n"
        "Protection fault status register: 0x301031\n\n"
        "Ring buffer information\nring name: gfx_0.0.0\nRptr: 0x2e0 Wptr: 0x340 RB mask: 3fff\n"
        "Ring size in dwords: 16384\nRing contents\nOffset \t Value\n0x0 \t 0xc0032200\n0x4 \t 0x00000000\n"
        "VRAM is lost due to GPU reset!\n"
    )
