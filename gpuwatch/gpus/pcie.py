"""PCIe health of one GPU: the link at its slot, and the error counters along the way there.

**Which link.** Radeon dGPUs since RDNA1 carry a PCIe switch on the package: platform port -> AMD
upstream switch port -> AMD downstream switch port -> GPU function (vendor 0x1002, class 0x060400 for
both switch ports). The GPU function's own ``current_link_speed`` is then the internal link (a real
RX 9070 reads "32.0 GT/s" there while its slot runs at 16 GT/s; drm/amd#1967). So, as
libdrm-amdgpu-sys' bus_info.rs does, the walk goes up through at most two AMD switch ports and reads
the topmost one: its link is the one in the slot. Without a switch (Polaris, Vega, APUs) the GPU's own
link is the slot link. The most the slot link can do is the lower of the two ends' ``max_link_*``.

**AER.** ``aer_dev_correctable``, ``aer_dev_nonfatal`` and ``aer_dev_fatal`` (PCI core, since Linux
4.19, Documentation/ABI/testing/sysfs-bus-pci-devices-aer_stats) count the errors each device
detected: one ``<name> <count>`` line per error bit and a ``TOTAL_ERR_COR``/``TOTAL_ERR_NONFATAL``/
``TOTAL_ERR_FATAL`` line. A bad link often shows on the link partner (the platform port) and not on
the GPU, so the totals of every device from the GPU up to that partner are summed. The files exist
only on devices with the AER capability: none anywhere is an absent value, never 0. They are read
once per discovery (every 30 s) like the fixed attributes, not every tick: up to 12 files per GPU
made a poll cycle 1.5x as long (benchmarks/poll_cycle.py --telemetry), and their alerts look at 10
minutes to an hour.
``pcie_replay_count`` is amdgpu's own count of PCIe replays (NAKs sent and received).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Protocol, TypeVar

T = TypeVar("T")
AMD_VENDOR, BRIDGE_CLASS = "0x1002", "0x060400"
MAX_SWITCH_PORTS = 2
AER_KINDS = {"correctable": "aer_dev_correctable", "nonfatal": "aer_dev_nonfatal", "fatal": "aer_dev_fatal"}
_PCI_FUNCTION = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")


class TextReader(Protocol):
    """Reads files of one directory, recording failures (amdgpu.py's reader)."""

    def text(self, name: str) -> str | None: ...

    def number(self, name: str, parse: Callable[[str], T]) -> T | None: ...


ReaderFor = Callable[[str], TextReader]  # a directory (relative to the sysfs root) -> its reader


def link_path(reader_for: ReaderFor, device_dir: str) -> tuple[str, str | None, tuple[str, ...]]:
    """(the device whose link is the slot link, its link partner, the devices from the GPU up to it)."""
    path = [device_dir]
    for _ in range(MAX_SWITCH_PORTS):
        parent = _parent(path[-1])
        if parent is None:
            break
        port = reader_for(parent)
        if port.text("vendor") != AMD_VENDOR or port.text("class") != BRIDGE_CLASS:
            break
        path.append(parent)
    return path[-1], _parent(path[-1]), tuple(path)


@dataclass(frozen=True)
class FixedPcie:
    """What ``read_pcie`` reads that stays put until the next discovery: the slot link's device, its
    ends' maximum speed and width, the AER totals (read once per discovery, see the module's docstring)."""

    link_dir: str
    fields: dict[str, Any]


def fixed_pcie(reader_for: ReaderFor, device_dir: str) -> FixedPcie:
    """The fixed part of ``read_pcie``: every file it reads is one of amdgpu's STATIC_ATTRIBUTES, so a
    caller that remembers those may keep this until the next discovery (when no read failed)."""
    link_dir, partner, devices = link_path(reader_for, device_dir)
    link = reader_for(link_dir)
    ends = [link] + ([reader_for(partner)] if partner else [])
    speeds = [s for end in ends if (s := end.number("max_link_speed", link_speed))]
    widths = [w for end in ends if (w := end.number("max_link_width", int))]
    fields: dict[str, Any] = {
        # An end that cannot tell ("Unknown", width 0) does not bound the link.
        "pcie_slot_max_link_speed_gts": min(speeds, default=None),
        "pcie_slot_max_link_width": min(widths, default=None),
    }
    on_path = [reader_for(d) for d in devices + ((partner,) if partner else ())]
    for kind, name in AER_KINDS.items():
        counts = [n for device in on_path if (n := device.number(name, aer_total)) is not None]
        fields[f"pcie_aer_{kind}_total"] = sum(counts) if counts else None
    return FixedPcie(link_dir, fields)


def read_pcie(reader_for: ReaderFor, device_dir: str, own_link: tuple[float | None, int | None],
              fixed: FixedPcie | None = None) -> dict[str, Any]:
    """The slot link, the AER totals and amdgpu's replay count as GpuReading fields; ``own_link`` is
    the GPU function's current speed and width, already read (the slot link when there is no switch);
    ``fixed``: ``fixed_pcie``'s answer kept since the discovery (None: read it now)."""
    if fixed is None:
        fixed = fixed_pcie(reader_for, device_dir)
    speed, width = own_link
    if fixed.link_dir != device_dir:
        link = reader_for(fixed.link_dir)
        speed, width = link.number("current_link_speed", link_speed), link.number("current_link_width", int)
    return {
        **fixed.fields,
        "pcie_slot_link_speed_gts": speed,
        "pcie_slot_link_width": width,
        "pcie_replays_total": reader_for(device_dir).number("pcie_replay_count", int),
    }


def link_speed(text: str) -> float | None:
    """"16.0 GT/s PCIe" -> 16.0 (SYSFS_FACTS.md §3); "Unknown" (pci_speed_string of a link that
    cannot tell) -> None; anything else is garbage."""
    return None if text == "Unknown" else float(text.split()[0])


@lru_cache(maxsize=256)  # the same text every tick until a counter moves: parse it once
def aer_total(text: str) -> int:
    """The TOTAL_ERR_* line of an aer_dev_* file (older kernels without one: the sum of the bit lines)."""
    total, bits = None, 0
    for line in text.splitlines():
        name, _, count = line.strip().rpartition(" ")
        if not name:
            raise ValueError(f"not an AER line: {line!r}")
        if name.startswith("TOTAL_ERR_"):
            total = int(count)
        else:
            bits += int(count)
    return bits if total is None else total


@lru_cache(maxsize=256)  # the same few device directories every tick
def _parent(device_dir: str) -> str | None:
    """The PCI device above ``device_dir`` in the sysfs hierarchy, None at the host bridge."""
    parent = device_dir.rstrip("/").rpartition("/")[0]
    return parent if _PCI_FUNCTION.match(parent.rpartition("/")[2]) else None
