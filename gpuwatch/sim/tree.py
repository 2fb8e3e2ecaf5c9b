"""Builds real-topology fake sysfs trees: for tests, benchmarks and the simulator.

The layout is the kernel's: the PCI device directory lives under ``devices/pci0000:00/<bridge>/<slot>``
with ``drm/cardN`` and ``hwmon/hwmonM`` inside it; ``class/drm/cardN`` and ``class/hwmon/hwmonM`` are
relative symlinks into it, and ``cardN/device`` links back to the PCI device, exactly as on a real
machine. Card contents come from the captures in ``tests/fixtures/amdgpu/cards/*.json`` (keys are
relative to ``class/drm/<card>/``) or from a dict of the same shape.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

_BRIDGE = "pci0000:00/0000:00:01.1"
_HWMON_KEY = re.compile(r"^device/hwmon/(hwmon\d+)/")


@dataclass(frozen=True)
class CardCapture:
    """One capture: the files under ``class/drm/<card>/`` and where they were found."""

    name: str
    card: str
    hwmon: str | None
    files: Mapping[str, str]

    @property
    def pci_slot(self) -> str | None:
        for line in self.files.get("device/uevent", "").splitlines():
            if line.startswith("PCI_SLOT_NAME="):
                return line.split("=", 1)[1].strip()
        return None


def load_capture(path: str | os.PathLike[str]) -> CardCapture:
    raw = json.loads(Path(path).read_text())
    return CardCapture(
        name=raw["name"],
        card=raw.get("card") or "card0",
        hwmon=raw.get("hwmon"),
        files=dict(raw["files"]),
    )


@dataclass(frozen=True)
class FakeCard:
    """Where one card landed in the fake tree (paths relative to the tree's root)."""

    card: str
    pci_slot: str
    device_dir: str
    hwmon_dir: str | None


class FakeSysfsTree:
    """A writable fake ``/sys`` below ``root``."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)
        for sub in ("class/drm", "class/hwmon", "bus/pci/drivers"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        self._slots = 0

    def add_capture(
        self,
        capture: CardCapture,
        card: str | None = None,
        pci_slot: str | None = None,
        hwmon: str | None = None,
        bridge: str = _BRIDGE,
    ) -> FakeCard:
        """Lay out ``capture``; ``card``/``pci_slot``/``hwmon`` rename it so one capture can appear twice."""
        return self.add_card(
            capture.files,
            card=card or capture.card,
            pci_slot=pci_slot or capture.pci_slot,
            hwmon=hwmon,
            source_hwmon=capture.hwmon,
            bridge=bridge,
        )

    def add_card(
        self,
        files: Mapping[str, str],
        card: str = "card0",
        pci_slot: str | None = None,
        hwmon: str | None = None,
        source_hwmon: str | None = None,
        bridge: str = _BRIDGE,
    ) -> FakeCard:
        """``bridge``: the PCI path above the card below ``devices/`` (root port, switch ports)."""
        self._slots += 1
        slot = pci_slot or f"0000:{0x10 + self._slots:02x}:00.0"
        device_rel = f"devices/{bridge}/{slot}"
        device = self.root / device_rel
        device.mkdir(parents=True, exist_ok=True)
        source_hwmon = source_hwmon or _find_hwmon(files)
        hwmon_name = hwmon or source_hwmon
        card_dir = device / "drm" / card
        card_dir.mkdir(parents=True, exist_ok=True)
        for key, value in files.items():
            if key.startswith("device/"):
                rel = key[len("device/"):]
                if source_hwmon and hwmon_name and rel.startswith(f"hwmon/{source_hwmon}/"):
                    rel = f"hwmon/{hwmon_name}/" + rel[len(f"hwmon/{source_hwmon}/"):]
                if rel == "uevent":
                    value = _with_slot(value, slot)
                target = device / rel
            else:
                target = card_dir / key
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(value)
        _relink(card_dir / "device", "../..")
        _relink(self.root / "class/drm" / card, os.path.relpath(card_dir, self.root / "class/drm"))
        driver = _driver_of(files.get("device/uevent", ""))
        if driver:
            (self.root / "bus/pci/drivers" / driver).mkdir(parents=True, exist_ok=True)
            _relink(device / "driver", os.path.relpath(self.root / "bus/pci/drivers" / driver, device))
        hwmon_rel = None
        if hwmon_name and (device / "hwmon" / hwmon_name).is_dir():
            hwmon_dir = device / "hwmon" / hwmon_name
            _relink(hwmon_dir / "device", "../..")
            _relink(self.root / "class/hwmon" / hwmon_name, os.path.relpath(hwmon_dir, self.root / "class/hwmon"))
            hwmon_rel = f"{device_rel}/hwmon/{hwmon_name}"
        return FakeCard(card=card, pci_slot=slot, device_dir=device_rel, hwmon_dir=hwmon_rel)

    def add_connector(self, card: str, connector: str, status: str = "connected") -> None:
        """A ``cardN-DP-1`` style connector: a DRM entry that is not a GPU."""
        real = (self.root / "class/drm" / card).resolve()
        conn = real / connector
        conn.mkdir(parents=True, exist_ok=True)
        (conn / "status").write_text(status + "\n")
        _relink(self.root / "class/drm" / connector, os.path.relpath(conn, self.root / "class/drm"))

    def write(self, relative: str, value: str) -> None:
        path = self.root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(value)

    def read(self, relative: str) -> str:
        return (self.root / relative).read_text().strip()

    def remove(self, relative: str) -> None:
        (self.root / relative).unlink()

    def remove_card(self, card: FakeCard) -> None:
        """The card falls off the bus (or is unbound for a re-probe): its device directory and class links go."""
        shutil.rmtree(self.root / card.device_dir)
        (self.root / "class/drm" / card.card).unlink(missing_ok=True)
        if card.hwmon_dir:
            (self.root / "class/hwmon" / Path(card.hwmon_dir).name).unlink(missing_ok=True)


def _find_hwmon(files: Mapping[str, str]) -> str | None:
    for key in files:
        match = _HWMON_KEY.match(key)
        if match:
            return match.group(1)
    return None


def _with_slot(uevent: str, slot: str) -> str:
    lines = [ln for ln in uevent.splitlines() if not ln.startswith("PCI_SLOT_NAME=")]
    lines.insert(min(4, len(lines)), f"PCI_SLOT_NAME={slot}")
    return "\n".join(lines) + "\n"


def _driver_of(uevent: str) -> str | None:
    for line in uevent.splitlines():
        if line.startswith("DRIVER="):
            return line.split("=", 1)[1].strip() or None
    return None


def _relink(link: Path, target: str) -> None:
    if link.is_symlink() or link.exists():
        link.unlink()
    link.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(target, link)
