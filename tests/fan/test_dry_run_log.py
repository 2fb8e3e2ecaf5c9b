"""Issue 32 point 11: a dry run's log says what it would do, never that it took a fan it did not touch."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.fan_rig import Rig
from tests.support.trees import capture


@pytest.mark.parametrize("card", ["navi10-rx5700xt-sapphire", "navi31-rx7900xtx-sapphire-nitro"])  # pwm1, gpu_od
def test_a_dry_run_logs_would_take_and_writes_nothing(tmp_path: Path, caplog: pytest.LogCaptureFixture,
                                                     card: str) -> None:
    rig = Rig(tmp_path, capture(card), mode="dry-run")
    rig.set_temp(80)
    with caplog.at_level("INFO", logger="gpuwatch.fan"):
        rig.tick(0)
    assert rig.sysfs.take_log() == []
    assert "took the fan" not in caplog.text
    assert "dry run: would take the fan" in caplog.text and "nothing written, the firmware keeps it" in caplog.text


def test_a_real_run_still_says_it_took_the_fan(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    rig = Rig(tmp_path, capture("navi10-rx5700xt-sapphire"))
    rig.set_temp(80)
    with caplog.at_level("INFO", logger="gpuwatch.fan"):
        rig.tick(0)
    assert "took the fan" in caplog.text and "would take" not in caplog.text
