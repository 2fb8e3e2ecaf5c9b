"""Real-topology fake sysfs trees from the real captures (the builder is gpuwatch.sim.tree)."""

from __future__ import annotations

import errno
from pathlib import Path

from gpuwatch.sim.tree import CardCapture, load_capture
from gpuwatch.sysfs import Sysfs, SysfsError
from tests.support.paths import FIXTURES


def capture(name: str) -> CardCapture:
    """One capture of tests/fixtures/amdgpu/cards by name, e.g. ``navi21-rx6900xt-sapphire-nitro``."""
    return load_capture(FIXTURES / "cards" / f"{name}.json")


class FaultySysfs(Sysfs):
    """A Sysfs whose kernel driver fails some reads, as amdgpu does (EIO, EPERM, ENODATA...).

    Only the driver's failure is simulated: the tree and every other read are real files.
    """

    def __init__(self, root: Path, faults: dict[str, int] | None = None) -> None:
        super().__init__(root)
        self.faults = faults or {}
        self.reads: list[str] = []  # every path read, in order

    def read_bytes(self, relative: str) -> bytes | None:  # every read, text or binary, comes here
        self.reads.append(relative)
        for suffix, code in self.faults.items():
            if relative.endswith(suffix):
                raise SysfsError(relative, errno.errorcode[code])
        return super().read_bytes(relative)
