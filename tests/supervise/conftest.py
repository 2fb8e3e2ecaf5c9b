"""The supervisor harness fixture the supervise tests share: a Supervisor over one fake RX 6900 XT at a cool
60 °C, with the trainer each test describes (tests/supervise/test_supervisor.py's Harness)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from gpuwatch.sim.tree import FakeSysfsTree
from tests.supervise.test_supervisor import SLOT, Harness
from tests.support.trees import capture


@pytest.fixture
def make(tmp_path: Path, fake_sysfs: FakeSysfsTree) -> Iterator[Callable[..., Harness]]:
    made: list[Harness] = []
    card = fake_sysfs.add_capture(capture("navi21-rx6900xt-sapphire-nitro"), card="card0", pci_slot=SLOT)

    def build(**trainer: Any) -> Harness:
        h = Harness(tmp_path, fake_sysfs, card.hwmon_dir, **trainer)
        h.set_junction_c(60)
        made.append(h)
        return h

    yield build
    for h in made:
        h.close()
