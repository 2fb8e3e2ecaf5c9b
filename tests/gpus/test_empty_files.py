"""An empty file where a number must be is a read error (counted, in ``errors``), except where the
kernel documents empty as "no value" for that file (tests/fixtures/amdgpu/SYSFS_FACTS.md §2)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuwatch.config.cooling import FanConfig
from gpuwatch.config.file import Config
from gpuwatch.config.sections import HttpConfig
from gpuwatch.daemon.loop import Daemon
from gpuwatch.model import FanMode
from gpuwatch.sim.tree import FakeSysfsTree
from tests.support.trees import capture


@pytest.mark.parametrize(
    "name, counted",
    [
        ("temp2_input", True),  # the junction: a number must be there
        ("fan1_input", True),
        ("pwm1", True),
        ("power1_cap", False),  # "\n" when the limit query fails (K-PM-6.4 amdgpu_hwmon_show_power_cap_generic)
        ("power1_cap_max", False),
    ],
)
def test_empty_number_file(tmp_path: Path, name: str, counted: bool) -> None:
    tree = FakeSysfsTree(tmp_path / "sys")
    card = tree.add_capture(capture("navi10-rx5700xt-sapphire"))
    tree.write(f"{card.hwmon_dir}/{name}", "\n")
    daemon = Daemon(Config(sysfs_root=tree.root, runtime_dir=tmp_path / "run", fan=FanConfig(mode="monitor-only"),
                           http=HttpConfig(enabled=False)))
    try:
        for _ in range(2):
            state = daemon.tick()
    finally:
        daemon.shutdown()
    (gpu,) = state.snapshot.gpus
    errors = [(e.sensor, e.error) for e in gpu.errors]
    if counted:
        assert errors == [(name, "empty")]
        assert state.read_errors_total == ((card.pci_slot, name, 2),)
    else:
        assert errors == [] and state.read_errors_total == ()


def test_empty_junction_goes_failsafe_and_says_why(tmp_path: Path) -> None:
    tree = FakeSysfsTree(tmp_path / "sys")
    card = tree.add_capture(capture("navi10-rx5700xt-sapphire"))
    daemon = Daemon(Config(sysfs_root=tree.root, runtime_dir=tmp_path / "run", http=HttpConfig(enabled=False)))
    try:
        daemon.tick()
        tree.write(f"{card.hwmon_dir}/temp2_input", "")
        for _ in range(3):
            state = daemon.tick()
    finally:
        daemon.shutdown()
    assert state.fans[0].mode is FanMode.FAILSAFE
    assert ("temp2_input", "empty") in [(e.sensor, e.error) for e in state.snapshot.gpus[0].errors]
    document = daemon.holder.document()
    assert document is not None and {"sensor": "temp2_input", "error": "empty"} in document["gpus"][0]["errors"]
