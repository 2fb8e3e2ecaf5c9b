"""A reloaded ``[fan]`` (issue 32 point 9): every setting the fan controller keeps per GPU is re-derived from the
configuration its tick is given, from that tick on; only the mode waits for a restart (daemon/reload.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuwatch.config.cooling import FanConfig
from gpuwatch.fan.pwm1 import Pwm1Backend
from gpuwatch.model import FanMode
from tests.support.fan_rig import Rig
from tests.support.trees import capture

PWM1 = "navi21-rx6900xt-sapphire-nitro"


def _rig(tmp_path: Path) -> Rig:
    rig = Rig(tmp_path, capture(PWM1), floor_percent=0, dead_band_c=4, spindown_delay_s=10,
              curve=[[20, 40], [90, 80]])
    rig.tree.write(rig.hwmon("fan1_input"), "1500\n")
    rig.set_temp(55, edge_c=45)
    return rig


def test_a_lower_curve_applies_at_the_next_tick_not_after_the_dead_band(tmp_path: Path) -> None:
    """The hysteresis held the old curve's speed: at a steady temperature it would hold it for ever, since the
    temperature never falls a dead band below the last change."""
    rig = _rig(tmp_path)
    assert rig.tick(0).target_ratio == pytest.approx(0.60)  # 55 °C half way up 40..80 %
    rig.config = FanConfig(floor_percent=0, dead_band_c=4, spindown_delay_s=10, curve=[[20, 20], [90, 20]])
    state = rig.tick(1)
    assert state.target_ratio == pytest.approx(0.20) and state.mode is FanMode.CURVE
    assert rig.read(rig.hwmon("pwm1")) == str(round(0.20 * 255))


def test_a_higher_floor_and_a_per_gpu_override_apply_at_the_next_tick(tmp_path: Path) -> None:
    rig = _rig(tmp_path)
    rig.tick(0)
    rig.config = FanConfig(floor_percent=70, dead_band_c=4, spindown_delay_s=10, curve=[[20, 40], [90, 80]])
    assert rig.tick(1).target_ratio == pytest.approx(0.70)
    rig.config = rig.config.model_copy(update={"gpus": FanConfig.model_validate(
        {"gpus": {rig.card.pci_slot: {"floor_percent": 90}}}).gpus})
    assert rig.tick(2).target_ratio == pytest.approx(0.90)


def test_the_sensor_is_picked_again_when_its_rule_changes(tmp_path: Path) -> None:
    rig = _rig(tmp_path)
    assert rig.tick(0).sensor == "junction"  # auto: the hottest-running sensor the card has
    rig.config = rig.config.model_copy(update={"sensor": "edge"})
    state = rig.tick(1)
    assert state.sensor == "edge" and state.sensor_temp_c == 45
    assert state.target_ratio == pytest.approx((40 + 40 * 25 / 70) / 100)


def test_the_read_back_tolerance_reaches_the_pwm1_backend(tmp_path: Path) -> None:
    rig = _rig(tmp_path)
    rig.tick(0)
    rig.config = rig.config.model_copy(update={"verify_tolerance_percent": 12.0})
    rig.tick(1)
    backend = rig.fans.fans[rig.card.pci_slot].backend
    assert isinstance(backend, Pwm1Backend) and backend.tolerance_percent == 12.0


def test_the_mode_is_kept_until_a_restart(tmp_path: Path) -> None:
    """A fan taken in curve mode stays under the curve (the reload plan keeps fan.mode; a tick given another
    mode all the same does not switch it: taking and handing back fans is the start's and shutdown's)."""
    rig = _rig(tmp_path)
    rig.tick(0)
    rig.sysfs.take_log()
    rig.config = rig.config.model_copy(update={"mode": "dry-run", "floor_percent": 70})
    state = rig.tick(1)
    assert state.mode is FanMode.CURVE and rig.sysfs.take_log() == [("pwm1", str(round(0.70 * 255)))]


def test_a_sighup_applies_a_new_curve_to_a_running_daemons_fan(tmp_path: Path) -> None:
    """The whole path: `gpuwatch run`, a new [fan] curve in the file, SIGHUP, the fan's pwm1 at the new curve's
    speed from the next tick (a lower one too: no dead band or spin-down hold on the old curve's speed)."""
    import signal

    from gpuwatch.sim.tree import FakeSysfsTree
    from tests.support.daemon_process import DaemonProcess
    from tests.support.processes import Processes
    from tests.support.waiting import wait_for

    tree = FakeSysfsTree(tmp_path / "sys")
    card = tree.add_capture(capture("navi10-rx5700xt-sapphire"))
    tree.write(f"{card.hwmon_dir}/temp2_input", "60000\n")  # junction 60 °C
    pwm1 = tree.root / str(card.hwmon_dir) / "pwm1"
    head = "interval_s = 0.2\n[http]\nenabled = false\n[fan]\nfloor_percent = 0\nsensor = \"junction\"\n"
    with Processes(tmp_path / "logs") as processes:
        daemon = DaemonProcess(processes, tmp_path, tree.root, head + "curve = [[20, 60], [100, 60]]\n")
        wait_for(lambda: pwm1.read_text().strip() == str(round(0.60 * 255)), "the fan at 60 %", 30,
                 detail=daemon.child.tail)
        daemon.write_config(head + "curve = [[20, 30], [100, 30]]\n")
        daemon.signal(signal.SIGHUP)
        wait_for(lambda: pwm1.read_text().strip() == str(round(0.30 * 255)), "the fan at the new curve's 30 %", 30,
                 detail=daemon.child.tail)
        assert "applied fan (the fan controller, from its next tick)" in daemon.log()
        assert daemon.stop() == 0
