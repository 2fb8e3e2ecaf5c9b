"""An empty ``power1_cap`` at the first tick (issue 31 point 12): the kernel prints "\\n" when the SMU's limit
query fails (SYSFS_FACTS.md §2). The probe is retried every tick, like any read error, instead of giving the
governor up until a restart; only a board without the file has no cap for good."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from gpuwatch.model import PowerMode
from tests.support.power_rig import PowerRig
from tests.support.trees import capture

NAVI21 = "navi21-rx6900xt-sapphire-nitro"  # cap 289 W = default


@pytest.mark.parametrize("unreadable", ["\n", "garbage\n"])
def test_an_unreadable_cap_at_the_first_tick_is_probed_again(tmp_path: Path, unreadable: str,
                                                               caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="gpuwatch.power")
    rig = PowerRig(tmp_path, capture(NAVI21))
    rig.sysfs.path(rig.hwmon("power1_cap")).write_text(unreadable)
    for at in range(5):
        rig.set(junction_c=99, power_w=289)
        state = rig.tick(at, can_rise=False)
        assert state.mode is not PowerMode.UNAVAILABLE and state.pause_allowed
        assert "not known yet" in (state.reason or "") and state.cap_w is None
    assert caplog.text.count("power cap not known yet") == 1  # said once
    assert rig.sysfs.take_log() == []

    rig.sysfs.path(rig.hwmon("power1_cap")).write_text("289000000\n")  # the SMU answers again
    state = rig.governing()
    assert state.mode is PowerMode.GOVERNING and state.reason is None
    assert state.original_cap_w == 289 and state.cap_w is not None and state.cap_w < 289
    assert "power cap readable again" in caplog.text
    rig.controller.restore()
    assert rig.cap_w() == 289


def test_a_board_without_power1_cap_is_still_unavailable_at_once(tmp_path: Path) -> None:
    rig = PowerRig(tmp_path, capture(NAVI21))
    rig.sysfs.path(rig.hwmon("power1_cap")).unlink()
    state = rig.tick(0, can_rise=False)
    assert state.mode is PowerMode.UNAVAILABLE and "no power1_cap" in (state.reason or "")
