"""Golden ordered write logs of the fan controller on real captures (RDNA2/RDNA3/RDNA4/APU/Polaris)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuwatch.model import FanMode
from tests.support.fan_rig import Rig
from tests.support.gpu_metrics import dgpu_v1_3
from tests.support.trees import capture
from tests.support.waiting import wait_for

PWM1 = "navi21-rx6900xt-sapphire-nitro"


def test_pwm1_startup_curve_steps_spindown_and_restore(tmp_path: Path) -> None:
    rig = Rig(tmp_path, capture(PWM1), dead_band_c=4, spindown_delay_s=10)
    rig.tree.write(rig.hwmon("fan1_input"), "1500\n")
    rig.set_temp(50)
    state = rig.tick(0)
    # Start-up: manual mode, then the floor (50 % of 0..255 = 128).
    assert rig.sysfs.take_log() == [("pwm1_enable", "1"), ("pwm1", "128")]
    assert (state.mode, state.backend, state.sensor, state.applied_pwm, state.readback_pwm) == (
        FanMode.CURVE, "pwm1", "junction", 128, 128)
    assert json.loads((rig.runtime_dir / "fan-restore.json").read_text())[rig.card.pci_slot]["pwm1_enable"] == 2

    rig.set_temp(70)
    assert rig.tick(1).target_ratio == pytest.approx(0.65)
    rig.set_temp(80)
    rig.tick(2)
    assert rig.sysfs.take_log() == [("pwm1", "166"), ("pwm1", "198")]  # raised at once, each step

    # Spindown hold: 75 °C is 5 °C under the last change but must stay there 10 s first.
    rig.set_temp(75)
    for at in (3, 8, 12):
        rig.tick(at)
    assert rig.sysfs.take_log() == []
    rig.tick(13)
    assert rig.sysfs.take_log() == [("pwm1", "178")]  # 70 % after the delay

    # Shutdown restore: the original mode, never 0.
    rig.fans.restore()
    assert rig.sysfs.take_log() == [("pwm1_enable", "2")]
    assert rig.read(rig.hwmon("pwm1_enable")) == "2"
    assert not (rig.runtime_dir / "fan-restore.json").exists()
    rig.fans.restore()  # idempotent: nothing more written
    assert rig.sysfs.take_log() == []


def test_pwm1_crit_and_stale_sensor_go_full_speed(tmp_path: Path) -> None:
    rig = Rig(tmp_path, capture(PWM1), failsafe_after_ticks=2)
    rig.set_temp(60)
    rig.tick(0)
    rig.sysfs.take_log()
    rig.set_temp(110)  # junction crit of this card is 110 °C
    state = rig.tick(1)
    assert rig.sysfs.take_log() == [("pwm1", "255")]
    assert state.mode == FanMode.CURVE and "crit" in (state.message or "")

    rig.set_temp(60)
    rig.tick(100)
    rig.tick(111)
    rig.sysfs.take_log()
    rig.tree.remove(rig.hwmon("temp2_input"))  # junction unreadable: hold, then failsafe
    states = [rig.tick(112), rig.tick(113)]
    assert [s.mode for s in states] == [FanMode.CURVE, FanMode.FAILSAFE]
    assert states[1].failsafe_reason and "no temperature" in states[1].failsafe_reason
    assert states[1].sensor == "junction"  # never silently switched to edge
    assert rig.sysfs.take_log() == [("pwm1", "255")]


def test_pwm1_firmware_mode_reset_is_reasserted_and_counted(tmp_path: Path) -> None:
    rig = Rig(tmp_path, capture(PWM1))
    rig.set_temp(50)
    rig.tick(0)
    rig.sysfs.take_log()
    rig.tree.write(rig.hwmon("pwm1_enable"), "2\n")  # the firmware took the fan back
    state = rig.tick(1)
    assert rig.sysfs.take_log() == [("pwm1_enable", "1"), ("pwm1", "128")]
    assert state.mode_resets_total == 1


def _reads(rig: Rig) -> list[str]:
    """The names of the files the controller reads from now on, in order."""
    read, names = rig.sysfs.read, []

    def recording(relative: str) -> str | None:
        names.append(relative.rsplit("/", 1)[-1])
        return read(relative)

    rig.sysfs.read = recording  # type: ignore[method-assign]
    return names


def test_pwm1_reads_back_what_the_ticks_reading_read_unless_it_wrote(tmp_path: Path) -> None:
    rig = Rig(tmp_path, capture(PWM1))
    rig.tree.write(rig.hwmon("fan1_input"), "1500\n")
    rig.set_temp(50)
    rig.tick(0)  # takes the fan: pwm1_enable and pwm1 written, read back from the files
    reads = _reads(rig)
    state = rig.tick(1)  # nothing written: pwm1_enable, pwm1 and the tach as the tick's reading read them
    assert reads == [] and (state.readback_pwm, state.rpm, state.mode_resets_total) == (128, 1500, 0)
    rig.set_temp(70)
    state = rig.tick(2)  # written: read back from the files
    assert reads == ["pwm1", "fan1_input"] and state.readback_pwm == 166
    reads.clear()
    # The firmware takes the fan back after the tick's reading: that tick cannot see it, the next one does.
    rig.now = 3
    snapshot = rig.sampler.sample()
    rig.tree.write(rig.hwmon("pwm1_enable"), "2\n")
    (state,) = rig.fans.tick(snapshot, rig.live_config())
    assert reads == [] and state.mode_resets_total == 0
    rig.sysfs.take_log()
    state = rig.tick(4)
    assert rig.sysfs.take_log() == [("pwm1_enable", "1"), ("pwm1", "166")] and state.mode_resets_total == 1
    assert rig.read(rig.hwmon("pwm1_enable")) == "1"


def test_gpu_od_reads_its_curve_every_tick_and_pwm1_and_the_tach_only_after_a_write(tmp_path: Path) -> None:
    rig = Rig(tmp_path, capture("navi31-rx7900xtx-sapphire-nitro"), spindown_delay_s=0)
    rig.set_temp(50)
    rig.tick(0)
    reads = _reads(rig)
    rig.tick(1)
    assert reads == ["fan_curve"]  # the curve a reset or another tool puts back is seen within a tick
    reads.clear()
    rig.set_temp(90)
    rig.tick(2)
    assert reads == ["fan_curve", "pwm1", "fan1_input"]
    reads.clear()
    rig.tick(3)
    assert reads == ["fan_curve"]
    rig.sysfs.write(rig.od("fan_curve"), "r\n")  # a GPU reset: the curve is the firmware's again
    rig.sysfs.take_log()
    state = rig.tick(4)
    assert rig.sysfs.take_log() == _flat(92) and state.mode_resets_total == 1


def test_pwm1_einval_is_a_mode_reset(tmp_path: Path) -> None:
    rig = Rig(tmp_path, capture(PWM1))
    rig.sysfs.einval_pwm1 = True
    rig.set_temp(50)
    rig.tick(0)
    rig.sysfs.take_log()
    rig.set_temp(70)
    rig.now = 1
    snapshot = rig.sampler.sample()  # the tick's reading: pwm1_enable 1, what the fan's step goes by
    # Reset between that check of pwm1_enable and the pwm1 write: the driver answers EINVAL.
    rig.tree.write(rig.hwmon("pwm1_enable"), "2\n")
    (state,) = rig.fans.tick(snapshot, rig.live_config())
    assert rig.sysfs.take_log() == [("pwm1", "166"), ("pwm1_enable", "1"), ("pwm1", "166")]
    assert state.mode_resets_total == 1 and state.write_errors_total == 0
    assert rig.read(rig.hwmon("pwm1")) == "166"


def test_pwm1_stalled_fan_is_reported(tmp_path: Path) -> None:
    rig = Rig(tmp_path, capture(PWM1), stall_after_ticks=3)
    rig.set_temp(50)
    stalled = [rig.tick(t).stalled for t in range(4)]  # this capture's fan1_input reads 0
    assert stalled == [False, False, True, True]
    assert rig.tick(5).stalls_total == 1
    rig.tree.write(rig.hwmon("fan1_input"), "900\n")
    assert not rig.tick(6).stalled


def test_pwm1_restores_manual_mode_seen_at_start(tmp_path: Path) -> None:
    rig = Rig(tmp_path, capture("polaris-rx580-sapphire-pulse"))  # pwm1_enable was 1 at capture
    rig.tree.write(rig.hwmon("temp1_input"), "50000\n")
    state = rig.tick(0)
    assert state.sensor == "edge"  # Polaris has no junction sensor
    rig.fans.restore()
    assert rig.read(rig.hwmon("pwm1_enable")) == "1"


def test_the_daemons_restore_leaves_a_fan_it_never_took_alone(tmp_path: Path) -> None:
    """A monitor-only GPU whose fan another tool set to manual: the daemon's restore (shutdown, atexit)
    gives back only what it recorded; only `gpuwatch restore` without any record sets such fans to auto."""
    rig = Rig(tmp_path, capture(PWM1), mode="monitor-only")
    rig.tree.write(rig.hwmon("pwm1_enable"), "1\n")
    rig.set_temp(60)
    assert rig.tick(0).mode == FanMode.MONITOR_ONLY
    rig.fans.restore()
    assert rig.sysfs.take_log() == [] and rig.read(rig.hwmon("pwm1_enable")) == "1"


def test_dry_run_writes_nothing(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    rig = Rig(tmp_path, capture(PWM1), mode="dry-run")
    rig.set_temp(80)
    with caplog.at_level("INFO"):
        state = rig.tick(0)
        rig.fans.restore()
    assert rig.sysfs.take_log() == []
    assert state.mode == FanMode.DRY_RUN and state.applied_pwm == 198
    assert "would write '198'" in caplog.text
    assert not (rig.runtime_dir / "fan-restore.json").exists()


FLAT = [("fan_curve", f"{i} {t} {{s}}\n") for i, t in enumerate((25, 44, 62, 81, 100))]


def _flat(speed: int) -> list[tuple[str, str]]:
    return [(n, v.format(s=speed)) for n, v in FLAT] + [("fan_curve", "c\n")]


def test_gpu_od_rdna3_curve_steps_and_restore(tmp_path: Path) -> None:
    rig = Rig(tmp_path, capture("navi31-rx7900xtx-sapphire-nitro"), spindown_delay_s=0)
    rig.set_temp(50)
    state = rig.tick(0)
    assert state.backend == "gpu_od"
    assert rig.sysfs.take_log() == _flat(50)  # no zero-RPM file on this board
    assert "0: 25C 50%" in (rig.read(rig.od("fan_curve")) or "")
    rig.set_temp(52)
    rig.tick(1)
    assert rig.sysfs.take_log() == []  # same speed: nothing rewritten
    rig.set_temp(90)
    rig.tick(2)
    assert rig.sysfs.take_log() == _flat(92)
    rig.fans.restore()
    assert rig.sysfs.take_log() == [("fan_curve", "r\n"), ("fan_curve", "c\n")]
    assert "0: 0C 0%" in (rig.read(rig.od("fan_curve")) or "")


def test_gpu_od_rdna4_zero_rpm_off_recheck_and_restore(tmp_path: Path) -> None:
    rig = Rig(tmp_path, capture("navi48-rx9070-sapphire-pulse"))  # zero-RPM enabled, no pwm1_enable
    rig.set_temp(50)
    rig.tick(0)
    assert rig.sysfs.take_log() == [("fan_zero_rpm_enable", "0\n"), ("fan_zero_rpm_enable", "c\n"), *_flat(50)]
    # Something (a GPU reset, another tool) turned zero-RPM back on and reset the curve.
    rig.sysfs.write(rig.od("fan_zero_rpm_enable"), "1\n")
    rig.sysfs.write(rig.od("fan_curve"), "r\n")
    rig.sysfs.take_log()
    state = rig.tick(1)
    assert rig.sysfs.take_log() == [("fan_zero_rpm_enable", "0\n"), ("fan_zero_rpm_enable", "c\n"), *_flat(50)]
    assert state.mode_resets_total == 1
    rig.fans.restore()
    assert rig.sysfs.take_log() == [("fan_curve", "r\n"), ("fan_curve", "c\n"),
                                   ("fan_zero_rpm_enable", "1\n"), ("fan_zero_rpm_enable", "c\n")]


def test_gpu_od_rdna4_without_fan1_input_detects_a_stall_from_gpu_metrics(tmp_path: Path) -> None:
    rig = Rig(tmp_path, capture("navi48-rx9070xt-early-kernel"), stall_after_ticks=3)  # no fan1_input at all
    table = tmp_path / "sys" / rig.card.device_dir / "gpu_metrics"
    table.write_bytes(dgpu_v1_3(39, 42, 62, 19, 9, 59, 96, 1450, 696))
    rig.set_temp(50)
    state = rig.tick(0)
    assert (state.rpm, state.stalled, state.backend) == (1450, False, "gpu_od")
    table.write_bytes(dgpu_v1_3(39, 42, 62, 19, 9, 59, 96, 0, 696))  # the fan stops while driven at 50 %
    assert [rig.tick(t).stalled for t in range(1, 5)] == [False, False, True, True]
    assert rig.tick(5).stalls_total == 1


def test_gpu_od_firmware_minimum_and_crit(tmp_path: Path) -> None:
    rig = Rig(tmp_path, capture("navi48-rx9070xt-early-kernel"), floor_percent=0, curve=[[40, 10], [90, 90]])
    rig.set_temp(40)
    rig.tick(0)
    assert rig.sysfs.take_log() == _flat(30)  # the board's OD range starts at 30 %
    rig.set_temp(110)
    rig.tick(1)
    assert rig.sysfs.take_log() == _flat(100)


def test_gpu_od_write_failure_resets(tmp_path: Path) -> None:
    rig = Rig(tmp_path, capture("navi31-rx7900xtx-sapphire-nitro"))
    rig.set_temp(50)
    original_write = rig.sysfs.write

    def failing_write(relative: str, value: str) -> None:
        if value.startswith("2 "):
            rig.sysfs.log.append(("fan_curve", value))
            from gpuwatch.sysfs import SysfsError

            raise SysfsError(relative, "EINVAL")
        original_write(relative, value)

    rig.sysfs.write = failing_write  # type: ignore[method-assign]
    state = rig.tick(0)
    assert rig.sysfs.take_log() == [*_flat(50)[:3], ("fan_curve", "r\n")]
    assert state.write_errors_total == 1


def test_zero_range_fan_curve_is_monitor_only(tmp_path: Path) -> None:
    rig = Rig(tmp_path, capture("navi48-rx9070xt-early-kernel"))
    rig.tree.write(rig.od("fan_curve"), "OD_FAN_CURVE:\n0: 0C 0%\nOD_RANGE:\nFAN_CURVE(hotspot temp): 0C 0C\n"
                                        "FAN_CURVE(fan speed): 0% 0%\n")
    rig.fans = rig.controller()
    rig.set_temp(60)
    state = rig.tick(0)
    assert state.mode == FanMode.MONITOR_ONLY and "zero OD range" in (state.message or "")
    assert "0x4000" in (state.message or "")
    assert rig.sysfs.take_log() == []


def test_read_only_fan_curve_is_monitor_only(tmp_path: Path) -> None:
    rig = Rig(tmp_path, capture("navi31-rx7900xtx-sapphire-nitro"))
    (rig.tree.root / rig.od("fan_curve")).chmod(0o444)
    rig.fans = rig.controller()
    rig.set_temp(60)
    import os

    state = rig.tick(0)
    if os.geteuid() != 0:
        assert state.mode == FanMode.MONITOR_ONLY and "read-only" in (state.message or "")


def test_apu_is_monitor_only_with_temperature(tmp_path: Path) -> None:
    rig = Rig(tmp_path, capture("apu-phoenix-lenovo"))
    state = rig.tick(0)
    assert state.mode == FanMode.MONITOR_ONLY and state.backend == "none"
    assert state.sensor == "edge" and state.sensor_temp_c == 25
    assert "APU" in (state.message or "")
    rig.fans.restore()
    assert rig.sysfs.take_log() == []


def test_per_gpu_override(tmp_path: Path) -> None:
    slot = capture(PWM1).pci_slot
    rig = Rig(tmp_path, capture(PWM1),
              gpus={slot: {"sensor": "edge", "floor_percent": 30, "curve": [[0, 0], [100, 100]]}})
    rig.set_temp(90, edge_c=40)
    state = rig.tick(0)
    assert state.sensor == "edge" and state.target_ratio == pytest.approx(0.40)


def test_suspended_gpu_is_not_written(tmp_path: Path) -> None:
    rig = Rig(tmp_path, capture(PWM1))
    rig.set_temp(50)
    rig.tick(0)
    rig.sysfs.take_log()
    rig.tree.write(f"{rig.card.device_dir}/power/runtime_status", "suspended\n")
    state = rig.tick(1)
    assert rig.sysfs.take_log() == [] and "suspended" in (state.message or "")


def test_restart_after_sigkill_restores_the_true_original(tmp_path: Path) -> None:
    """A daemon killed while in manual mode left pwm1_enable=1 and its record; the next one keeps 2."""
    first = Rig(tmp_path, capture(PWM1))
    first.set_temp(50)
    first.tick(0)  # "killed" here: no restore
    assert first.read(first.hwmon("pwm1_enable")) == "1"
    second = first.controller(clock=lambda: 1.0)
    second.tick(first.sampler.sample(), first.live_config())
    second.restore()
    assert first.read(first.hwmon("pwm1_enable")) == "2"


def test_restore_skips_a_gpu_that_fell_off_the_bus(tmp_path: Path) -> None:
    import shutil

    rig = Rig(tmp_path, capture("navi21-rx6900xt-sapphire-nitro"))
    rig.set_temp(60)
    rig.tick(0)
    assert rig.read(rig.hwmon("pwm1_enable")) == "1"
    shutil.rmtree(rig.tree.root / rig.card.device_dir)
    rig.fans.restore()  # nothing to hand back, and no error: the driver re-inits it in auto mode
    rig.fans.restore()


def test_blocked_fan_write_is_uncontrolled_and_restore_does_not_wait_for_it(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    import threading

    from gpuwatch.fan.controller import FanController

    rig = Rig(tmp_path, capture(PWM1))
    rig.fans = FanController(rig.sysfs, rig.runtime_dir, locate=rig.source.locate,
                             clock=lambda: rig.now, deadline_s=0.2)
    rig.set_temp(50)
    assert rig.tick(0).mode == FanMode.CURVE
    release = threading.Event()
    original_write = rig.sysfs.write

    def stuck_write(relative: str, value: str) -> None:  # the driver never returns from the write
        release.wait(30)
        original_write(relative, value)

    rig.sysfs.write = stuck_write  # type: ignore[method-assign]
    rig.set_temp(80)
    try:
        with caplog.at_level("INFO", logger="gpuwatch.fan"):
            states = [rig.tick(1), rig.tick(2)]
            assert [s.mode for s in states] == [FanMode.UNCONTROLLED] * 2
            assert "blocked" in (states[1].message or "")
            with pytest.raises(RuntimeError, match="blocked"):
                rig.fans.restore()  # gives up after the deadline instead of waiting on the stuck write
        assert sum("fan not controlled" in r.getMessage() for r in caplog.records) == 1
    finally:
        release.set()
    rig.sysfs.write = original_write  # type: ignore[method-assign]
    back = wait_for(lambda: (s := rig.tick(3)).mode == FanMode.CURVE and s, "control regained")
    assert back.applied_pwm == 198
    rig.fans.restore()
    assert rig.read(rig.hwmon("pwm1_enable")) == "2"
