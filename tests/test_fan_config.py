"""Fan configuration: defaults, validation messages (key, value, rule), per-GPU overrides, fans-auto log."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import capture
from fanharness import RecordingSysfs
from gpuwatch.config import ConfigError, parse_config
from gpuwatch.cli.curve import render_curve
from gpuwatch.sim.tree import FakeSysfsTree
from gpuwatch.fan.pwm1 import Pwm1Restore
from gpuwatch.fan.restore import RestoreFile, fans_auto


def test_defaults_are_the_seeds_curve_with_a_50_percent_floor() -> None:
    fan = parse_config({}).fan
    assert fan.mode == "curve" and fan.sensor == "auto" and fan.floor_percent == 50
    assert fan.curve[0] == [64.0, 50.0] and fan.curve[-1] == [95.0, 100.0]


@pytest.mark.parametrize(
    "fan, expected",
    [
        ({"curve": [[70, 60], [60, 70]]}, ["fan.curve", "[[70, 60], [60, 70]]", "must be above the previous"]),
        ({"curve": [[60, 80], [70, 60]]}, ["fan.curve", "must not be below"]),
        ({"curve": [[60, 180]]}, ["fan.curve", "within 0..100"]),
        ({"floor_percent": 120}, ["fan.floor_percent", "120", "less than or equal to 100"]),
        ({"sensor": "hotspot"}, ["fan.sensor", "'hotspot'"]),
        ({"gpus": {"0000:28:00.0": {"curve": [[1, 5], [1, 6]]}}}, ["fan.gpus.0000:28:00.0.curve", "must be above"]),
        ({"gpus": {"0000:28:00.0": {"floor": 5}}}, ["fan.gpus.0000:28:00.0.floor", "unknown key"]),
    ],
)
def test_validation_messages_name_key_value_and_rule(fan: dict[str, object], expected: list[str]) -> None:
    with pytest.raises(ConfigError) as err:
        parse_config({"fan": fan})
    for text in expected:
        assert text in str(err.value)


def test_per_gpu_override_merges_only_given_keys() -> None:
    fan = parse_config({"fan": {"dead_band_c": 2, "gpus": {"0000:28:00.0": {"floor_percent": 30}}}}).fan
    merged = fan.for_gpu("0000:28:00.0")
    assert merged.floor_percent == 30 and merged.dead_band_c == 2
    assert fan.for_gpu("0000:99:00.0") is fan


def test_curve_command_renders_table_and_plot() -> None:
    text = render_curve(parse_config({}).fan)
    assert "floor 50 %" in text and "     95       100" in text and "100% |" in text and "°C" in text


def test_fans_auto_without_restore_file_ordered_writes(tmp_path: Path) -> None:
    tree = FakeSysfsTree(tmp_path / "sys")
    rdna2 = tree.add_capture(capture("navi21-rx6900xt-sapphire-nitro"))
    tree.add_capture(capture("navi48-rx9070xt-powercolor"), card="card1", pci_slot="0000:30:00.0")
    tree.add_capture(capture("apu-phoenix-lenovo"), card="card2", pci_slot="0000:c1:00.0")
    tree.write(f"{rdna2.hwmon_dir}/pwm1_enable", "1\n")
    sysfs = RecordingSysfs(tree.root)
    assert fans_auto(sysfs, RestoreFile(tmp_path / "none.json")) == []
    assert sysfs.take_log() == [("pwm1_enable", "2"), ("fan_curve", "r\n"), ("fan_curve", "c\n")]


def test_fans_auto_from_restore_file_never_writes_zero(tmp_path: Path) -> None:
    tree = FakeSysfsTree(tmp_path / "sys")
    card = tree.add_capture(capture("navi21-rx6900xt-sapphire-nitro"))
    tree.write(f"{card.hwmon_dir}/pwm1_enable", "1\n")
    restore = RestoreFile(tmp_path / "fan-restore.json")
    restore.add(card.pci_slot, Pwm1Restore(path=f"{card.hwmon_dir}/pwm1_enable", pwm1_enable=0))
    sysfs = RecordingSysfs(tree.root)
    assert fans_auto(sysfs, restore) == []
    assert sysfs.take_log() == [("pwm1_enable", "2")]
    assert not restore.path.exists()
