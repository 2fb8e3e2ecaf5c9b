"""Shared fixtures: real-topology fake sysfs trees built from the real card captures."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from gpuwatch.sim.tree import CardCapture, FakeSysfsTree, load_capture
from gpuwatch.sysfs import Sysfs

REPO = Path(__file__).resolve().parent.parent
# The real captures (format in their README.md, facts and quirks in SYSFS_FACTS.md).
FIXTURES = REPO / "tests/fixtures/amdgpu"
CARD_FILES = sorted(p for p in (FIXTURES / "cards").glob("*.json") if not p.name.endswith(".expected.json"))


def capture(name: str) -> CardCapture:
    return load_capture(FIXTURES / "cards" / f"{name}.json")


@pytest.fixture
def fake_sysfs(tmp_path: Path) -> FakeSysfsTree:
    """An empty real-topology tree; add cards with ``add_capture(capture(name))``."""
    return FakeSysfsTree(tmp_path / "sys")


class FaultySysfs(Sysfs):
    """A Sysfs whose kernel driver fails some reads, as amdgpu does (EIO, EPERM, ENODATA...).

    Only the driver's failure is simulated: the tree and every other read are real files.
    """

    def __init__(self, root: Path, faults: dict[str, int]) -> None:
        super().__init__(root)
        self.faults = faults

    def read(self, relative: str) -> str | None:
        for suffix, code in self.faults.items():
            if relative.endswith(suffix):
                from gpuwatch.sysfs import SysfsError

                raise SysfsError(relative, errno.errorcode[code])
        return super().read(relative)
