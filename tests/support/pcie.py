"""PCIe topology and AER files for fake trees, in the kernel's formats.

AER files follow Documentation/ABI/testing/sysfs-bus-pci-devices-aer_stats and the names of
drivers/pci/pcie/aer.c (one ``<name> <count>`` line per error bit, then the TOTAL_ERR_* line). A
Radeon's on-package switch is two ports with vendor 0x1002 and class 0x060400 between the platform's
port and the GPU function (drm/amd#1967).
"""

from __future__ import annotations

from pathlib import Path

from gpuwatch.sim.tree import FakeSysfsTree

CORRECTABLE = ("RxErr", "BadTLP", "BadDLLP", "Rollover", "Timeout", "NonFatalErr", "CorrIntErr", "HeaderOF")
UNCORRECTABLE = ("Undefined", "DLP", "SDES", "TLP", "FCP", "CmpltTO", "CmpltAbrt", "UnxCmplt", "RxOF", "MalfTLP",
                 "ECRC", "UnsupReq", "ACSViol", "UncorrIntErr", "BlockedTLP", "AtomicOpBlocked", "TLPBlockedErr",
                 "PoisonTLPBlocked")
_FILES = {"correctable": ("aer_dev_correctable", CORRECTABLE, "TOTAL_ERR_COR"),
          "nonfatal": ("aer_dev_nonfatal", UNCORRECTABLE, "TOTAL_ERR_NONFATAL"),
          "fatal": ("aer_dev_fatal", UNCORRECTABLE, "TOTAL_ERR_FATAL")}


def aer_text(severity: str, counts: dict[str, int] | None = None) -> str:
    """An aer_dev_* file: every named bit with its count, then the total."""
    _, names, total = _FILES[severity]
    counts = counts or {}
    return "".join(f"{name} {counts.get(name, 0)}\n" for name in names) + f"{total} {sum(counts.values())}\n"


def write_aer(directory: Path, correctable: dict[str, int] | None = None, nonfatal: dict[str, int] | None = None,
              fatal: dict[str, int] | None = None) -> None:
    """The three aer_dev_* files of one PCI device directory."""
    for severity, counts in (("correctable", correctable), ("nonfatal", nonfatal), ("fatal", fatal)):
        (directory / _FILES[severity][0]).write_text(aer_text(severity, counts))


def write_port(directory: Path, vendor: str, speed: str, width: int, max_speed: str, max_width: int) -> None:
    """A PCIe port's identity and link files (class 0x060400: PCI bridge)."""
    directory.mkdir(parents=True, exist_ok=True)
    for name, value in (("vendor", vendor), ("class", "0x060400"), ("current_link_speed", f"{speed} PCIe"),
                        ("current_link_width", str(width)), ("max_link_speed", f"{max_speed} PCIe"),
                        ("max_link_width", str(max_width))):
        (directory / name).write_text(value + "\n")


def radeon_switch(tree: FakeSysfsTree, root_port: str, bus: int, slot_link: tuple[str, int] = ("16.0 GT/s", 16),
                  slot_max: tuple[str, int] = ("16.0 GT/s", 16)) -> str:
    """A platform root port and a Radeon's two switch ports below it; returns the ``bridge`` path for
    ``add_card`` (the GPU goes on bus ``bus + 2``). The slot link runs at ``slot_link``, both ends
    could do ``slot_max``; the switch's internal link reports 16 GT/s x16."""
    upstream, downstream = f"0000:{bus:02x}:00.0", f"0000:{bus + 1:02x}:00.0"
    path = f"pci0000:00/{root_port}"
    write_port(tree.root / "devices" / path, "0x1022", slot_link[0], slot_link[1], slot_max[0], slot_max[1])
    write_port(tree.root / "devices" / path / upstream, "0x1002", slot_link[0], slot_link[1], slot_max[0], slot_max[1])
    write_port(tree.root / "devices" / path / upstream / downstream, "0x1002", "16.0 GT/s", 16, "16.0 GT/s", 16)
    return f"{path}/{upstream}/{downstream}"
