"""Human names for AMD GPU PCI ids: the system's pci.ids when installed, else a small built-in table.

pci.ids (Debian package `pci.ids`) is the same database LACT and lspci use; the built-in table only
covers the dies gpuwatch is tested against, so a machine without pci.ids still shows a useful name.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

PCI_IDS_PATHS = (Path("/usr/share/misc/pci.ids"), Path("/usr/share/hwdata/pci.ids"))

_BUILTIN: dict[str, str] = {
    "67DF": "Ellesmere [Radeon RX 470/480/570/570X/580/580X/590]",
    "687F": "Vega 10 XL/XT [Radeon RX Vega 56/64]",
    "731F": "Navi 10 [Radeon RX 5600 OEM/5600 XT / 5700/5700 XT]",
    "7340": "Navi 14 [Radeon RX 5500/5500M / Pro 5500M]",
    "73BF": "Navi 21 [Radeon RX 6800/6800 XT / 6900 XT]",
    "73FF": "Navi 23 [Radeon RX 6600/6600 XT/6600M]",
    "744C": "Navi 31 [Radeon RX 7900 XT/7900 XTX/7900 GRE/7900M]",
    "747E": "Navi 32 [Radeon RX 7700 XT / 7800 XT]",
    "7480": "Navi 33 [Radeon RX 7700S/7600/7600S/7600M XT/PRO W7600]",
    "7550": "Navi 48 [Radeon RX 9070/9070 XT/9070 GRE]",
    "15BF": "Phoenix1",
    "150E": "Strix [Radeon 880M / 890M]",
    "163F": "VanGogh [AMD Custom GPU 0405]",
    "6617": "Oland XT [Radeon HD 8670 / R5 340X OEM / R7 250/350/350X OEM]",
    "679A": "Tahiti PRO [Radeon HD 7950/8950 OEM / R9 280]",
    "6818": "Pitcairn XT [Radeon HD 7870 GHz Edition]",
}


def gpu_name(pci_id: str | None) -> str | None:
    """``"1002:731F"`` -> ``"Navi 10 [Radeon RX 5600 OEM/5600 XT / 5700/5700 XT]"``, or None."""
    if not pci_id or ":" not in pci_id:
        return None
    vendor, device = (part.upper() for part in pci_id.split(":", 1))
    return _system_table(vendor).get(device) or (_BUILTIN.get(device) if vendor == "1002" else None)


@lru_cache(maxsize=4)
def _system_table(vendor: str) -> dict[str, str]:
    for path in PCI_IDS_PATHS:
        try:
            text = path.read_text(errors="replace")
        except OSError:
            continue
        return _parse_vendor(text, vendor.lower())
    return {}


def _parse_vendor(text: str, vendor: str) -> dict[str, str]:
    names: dict[str, str] = {}
    inside = False
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        if not line.startswith("\t"):
            inside = line.startswith(vendor + " ")
            continue
        if inside and not line.startswith("\t\t"):
            device, _, name = line.strip().partition("  ")
            names[device.upper()] = name.strip()
    return names
