"""A GPU that comes back renumbered is controlled again; a fan that cannot be written says so.

The daemon's own parts (compose.build) tick on a real-topology fake tree; the card is removed and
laid out again under a new hwmon index and card number, as a re-probe after a reset does.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuwatch.config.file import Config
from gpuwatch.config.sections import HttpConfig
from gpuwatch.daemon.loop import Daemon
from gpuwatch.model import FanMode, PublishedState
from gpuwatch.sim.tree import FakeCard, FakeSysfsTree
from tests.support.trees import capture

NAVI10 = "navi10-rx5700xt-sapphire"  # card1, hwmon1, pwm1 backend


@pytest.fixture
def controlled(tmp_path: Path) -> Iterator[tuple[FakeSysfsTree, FakeCard, Daemon]]:
    """The daemon's own parts on one Navi 10 card, after a tick that took its fan under curve control."""
    tree = FakeSysfsTree(tmp_path / "sys")
    card = tree.add_capture(capture(NAVI10))
    daemon = Daemon(Config(sysfs_root=tree.root, runtime_dir=tmp_path / "run", interval_s=0.1,
                           http=HttpConfig(enabled=False)))
    try:
        assert _fan(daemon.tick())[0] is FanMode.CURVE
        assert tree.read(f"{card.hwmon_dir}/pwm1_enable") == "1"
        yield tree, card, daemon
    finally:
        daemon.shutdown()


def _fan(state: PublishedState) -> tuple[FanMode, str | None]:
    (fan,) = state.fans
    return fan.mode, fan.message


@pytest.mark.parametrize("card_after", ["card1", "card2"])
def test_gpu_back_under_a_new_hwmon_and_card_is_controlled_again(controlled, tmp_path: Path, card_after: str,
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    tree, card, daemon = controlled
    tree.remove_card(card)
    assert not daemon.tick().snapshot.gpus[0].up
    # The driver re-probes the card: a new hwmon index (and card number), fan back on firmware auto.
    back = tree.add_capture(capture(NAVI10), card=card_after, pci_slot=card.pci_slot, hwmon="hwmon7")
    assert back.hwmon_dir and back.hwmon_dir != card.hwmon_dir
    assert tree.read(f"{back.hwmon_dir}/pwm1_enable") == "2"
    with caplog.at_level(logging.INFO):
        states = [daemon.tick() for _ in range(3)]
    assert states[-1].snapshot.gpus[0].up and states[-1].snapshot.gpus[0].card == card_after
    assert [_fan(s)[0] for s in states] == [FanMode.CURVE] * 3, [_fan(s) for s in states]
    assert tree.read(f"{back.hwmon_dir}/pwm1_enable") == "1"
    assert tree.read(f"{back.hwmon_dir}/pwm1") == str(states[-1].fans[0].applied_pwm)
    assert any("rebinding" in r.getMessage() for r in caplog.records)
    # fans-auto after a crash now would restore the new path, to the original mode.
    record = json.loads((tmp_path / "run/fan-restore.json").read_text())[card.pci_slot]
    assert record["path"] == f"{back.hwmon_dir}/pwm1_enable" and record["pwm1_enable"] == 2
    daemon.shutdown()
    assert tree.read(f"{back.hwmon_dir}/pwm1_enable") == "2"


def test_a_fan_that_cannot_be_written_is_uncontrolled_and_logged_once(controlled,
                                                                       caplog: pytest.LogCaptureFixture) -> None:
    tree, card, daemon = controlled
    # The fan's files go (the GPU's sensors stay readable): nothing can be written to the fan.
    for name in ("pwm1", "pwm1_enable"):
        tree.remove(f"{card.hwmon_dir}/{name}")
    with caplog.at_level(logging.INFO, logger="gpuwatch.fan"):
        states = [daemon.tick() for _ in range(5)]
    assert all(s.snapshot.gpus[0].up for s in states)
    modes = [_fan(s) for s in states]
    assert all(mode is FanMode.UNCONTROLLED for mode, _ in modes), modes
    assert "ENOENT" in (modes[-1][1] or "")
    said = [r for r in caplog.records if r.levelno >= logging.WARNING and "not controlled" in r.getMessage()]
    assert len(said) == 1, [r.getMessage() for r in caplog.records]
    assert states[-1].fans[0].write_errors_total == 5
