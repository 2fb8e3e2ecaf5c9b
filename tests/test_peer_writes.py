"""gpuwatch's fan and power-cap writes against what peer projects did and asserted on the same captures.

tests/fixtures/amdgpu/cards/*.expected.json keep, per card: LACT's apply-config write log (the ordered
sysfs writes LACT's own test performs when applying a config to that card's dump, ``lact_apply_config``,
7 cards) and amdgpu-sysfs-rs's assertions on the same dump (``amdgpu_sysfs_rs_tests``, 5 cards). Where
gpuwatch writes the same file for the same intent, it must write what LACT wrote (the bytes the driver
parses, in the order it needs them); where amdgpu-sysfs-rs states a range or a value, gpuwatch must read
the same and never write outside it. Cards whose peer entries hold no fan or cap write, or no fan or
cap assertion, are named with the reason, so every card is accounted for.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from gpuwatch.fan.gpu_od import GpuOdBackend
from gpuwatch.fan.pwm1 import Pwm1Backend
from gpuwatch.gpus.amdgpu import AmdCard, discover, read_card
from gpuwatch.power.hwmon_cap import HwmonCap
from gpuwatch.sim.tree import FakeSysfsTree
from tests.support.fan_rig import RecordingSysfs
from tests.support.paths import CARD_FILES
from tests.support.power_rig import CapSysfs
from tests.support.trees import capture


def _peers(stem: str) -> dict[str, Any]:
    card_file = next(c for c in CARD_FILES if c.stem == stem)
    peers: dict[str, Any] = json.loads(card_file.with_suffix("").with_suffix(".expected.json").read_text())["peers"]
    return peers


def _lact_writes(stem: str) -> list[tuple[str, str]]:
    """LACT's writes to this card as (file name, bytes), every apply-config entry in order."""
    writes = []
    for entry in _peers(stem).get("lact_apply_config", []):
        for line in entry["writes"]:
            path, _, value = line.partition(": ")
            writes.append((path.rsplit("/", 1)[-1], value))
    return writes


def _card(tmp_path: Path, stem: str, sysfs_class: type[RecordingSysfs] = RecordingSysfs
          ) -> tuple[RecordingSysfs, AmdCard]:
    tree = FakeSysfsTree(tmp_path / "sys")
    tree.add_capture(capture(stem))
    sysfs = sysfs_class(tree.root)
    (card,) = discover(sysfs).cards
    return sysfs, card


LACT_CARDS = sorted(c.stem for c in CARD_FILES if "lact_apply_config" in _peers(c.stem))
RS_CARDS = sorted(c.stem for c in CARD_FILES if "amdgpu_sysfs_rs_tests" in _peers(c.stem))
FAN_OR_CAP = ("pwm1", "pwm1_enable", "fan_curve", "fan_zero_rpm_enable", "power1_cap")


def test_every_card_with_a_peer_log_is_compared_or_named() -> None:
    """LACT's logs: writes to pwm1, fan_curve or power1_cap on five cards; on the other two LACT touched
    neither (a clock/voltage-only config; a config with fan control off)."""
    assert len(LACT_CARDS) == 7 and len(RS_CARDS) == 5
    with_fan_or_cap = [stem for stem in LACT_CARDS if any(name in FAN_OR_CAP for name, _ in _lact_writes(stem))]
    assert sorted(set(LACT_CARDS) - set(with_fan_or_cap)) == ["navi14-rx5500xt-msi", "vega10-rx-vega56-asus-strix"]


# --- power1_cap: microwatts, whole watts, as LACT writes them ---

@pytest.mark.parametrize("stem", ["navi31-rx7900xtx-sapphire-nitro", "navi32-rx7800xt-powercolor-hellhound",
                                  "navi48-rx9070-sapphire-pulse", "navi48-rx9070xt-powercolor"])
def test_a_cap_is_written_as_lact_writes_it(tmp_path: Path, stem: str) -> None:
    caps = [value for name, value in _lact_writes(stem) if name == "power1_cap"]
    assert caps
    sysfs, card = _card(tmp_path, stem, CapSysfs)
    backend = HwmonCap(sysfs, card.gpu_id, lambda gpu_id: card, check_access=False)
    for value in caps:
        sysfs.take_log()
        assert backend.write(int(value) / 1_000_000) == int(value) / 1_000_000
        assert sysfs.take_log() == [("power1_cap", value)]


# --- pwm1: manual mode first, then the duty, as LACT's static 100 % on the RX 6900 XT ---

def test_pwm1_takes_manual_mode_then_writes_the_duty_as_lact_does(tmp_path: Path) -> None:
    stem = "navi21-rx6900xt-sapphire-nitro"
    lact = [(name, value.strip()) for name, value in _lact_writes(stem) if name in ("pwm1", "pwm1_enable")]
    assert lact == [("pwm1_enable", "1"), ("pwm1", "255")]  # fan_control_settings: mode static, speed 1.0
    sysfs, card = _card(tmp_path, stem)
    assert card.hwmon_dir is not None
    backend = Pwm1Backend(sysfs, card.hwmon_dir)
    backend.original()
    backend.take_control()
    backend.apply(100.0)
    assert [(name, value.strip()) for name, value in sysfs.take_log()] == lact


# --- gpu_od fan_curve (RDNA3/4): "<index> <temp> <speed>" lines for points 0..4, then "c" ---

GPU_OD_CARDS = ["navi31-rx7900xtx-sapphire-nitro", "navi32-rx7800xt-powercolor-hellhound",
                "navi48-rx9070-sapphire-pulse", "navi48-rx9070xt-powercolor"]


@pytest.mark.parametrize("stem", GPU_OD_CARDS)
def test_gpu_od_writes_five_points_then_commits_as_lact_does(tmp_path: Path, stem: str) -> None:
    lact = [value for name, value in _lact_writes(stem) if name == "fan_curve"]
    sysfs, card = _card(tmp_path, stem)
    backend = GpuOdBackend(sysfs, card.device_dir, card.hwmon_dir)
    backend.original()
    sysfs.take_log()
    backend.apply(80.1)
    ours = [value for name, value in sysfs.take_log() if name == "fan_curve"]
    # The same grammar and order: each point by index 0..4, newline-terminated, then the commit.
    point = re.compile(r"^([0-4]) (\d+) (\d+)\n$")
    for writes in (lact[:6], ours):
        assert [point.match(w).group(1) if point.match(w) else w for w in writes] == ["0", "1", "2", "3", "4", "c\n"]
    # Both stay inside the card's OD_RANGE (the driver rejects the whole curve otherwise).
    (t_lo, t_hi), (s_lo, s_hi) = backend.curve.temp_range_c or (0, 0), backend.curve.speed_range_percent or (0, 0)
    for w in lact[:5] + ours[:5]:
        match = point.match(w)
        assert match and t_lo <= int(match.group(2)) <= t_hi and s_lo <= int(match.group(3)) <= s_hi, w
    assert {point.match(w).group(3) for w in ours[:5]} == {"80"}  # type: ignore[union-attr]


def test_gpu_od_static_speed_and_zero_rpm_as_lact_wrote_them(tmp_path: Path) -> None:
    """LACT's static 80.1 % on the Hellhound: zero-RPM off ("0" staged, "c" committed), every point at 80 %."""
    stem = "navi32-rx7800xt-powercolor-hellhound"
    lact = _lact_writes(stem)
    assert [v for n, v in lact if n == "fan_zero_rpm_enable"][:2] == ["0\n", "c\n"]
    sysfs, card = _card(tmp_path, stem)
    backend = GpuOdBackend(sysfs, card.device_dir, card.hwmon_dir)
    backend.original()
    sysfs.take_log()
    backend.take_control()
    backend.apply(80.1)
    log = sysfs.take_log()
    assert [v for n, v in log if n == "fan_zero_rpm_enable"] == ["0\n", "c\n"]
    speeds = {v.split()[2] for n, v in lact if n == "fan_curve" and v != "c\n"}
    assert speeds == {"80"} and {v.split()[2] for n, v in log if n == "fan_curve" and v != "c\n"} == speeds


# --- amdgpu-sysfs-rs: the fan curve's ranges, the minimum speed, zero-RPM, what a write may not do ---

@pytest.mark.parametrize("stem", ["navi31-rx7900xtx-sapphire-nitro", "navi32-rx7800xt-amd-reference"])
def test_gpu_od_reads_the_ranges_amdgpu_sysfs_rs_asserts(tmp_path: Path, stem: str) -> None:
    rs = _peers(stem)["amdgpu_sysfs_rs_tests"]["assertions"]
    sysfs, card = _card(tmp_path, stem)
    backend = GpuOdBackend(sysfs, card.device_dir, card.hwmon_dir)
    assert backend.curve.temp_range_c == tuple(rs["fan_curve"]["temperature_range"])
    assert backend.curve.speed_range_percent == tuple(rs["fan_curve"]["speed_range"])
    assert [list(p) for p in backend.curve.points] == rs["fan_curve"]["points_temp_c_speed_pct"]
    assert backend.minimum_percent == rs["fan_curve"]["speed_range"][0]
    if "fan_zero_rpm_enable" in rs:
        assert backend.original().zero_rpm_enable == int(rs["fan_zero_rpm_enable"])
    # amdgpu-sysfs-rs rejects a point at 5 °C / 0 % before writing: gpuwatch, asked for 0 %, writes the
    # range's minimum speed at temperatures inside the range.
    sysfs.take_log()
    backend.apply(0.0)
    (t_lo, t_hi), (s_lo, _) = rs["fan_curve"]["temperature_range"], rs["fan_curve"]["speed_range"]
    points = [v.split() for n, v in sysfs.take_log() if n == "fan_curve" and v != "c\n"]
    assert len(points) == 5 and all(t_lo <= int(t) <= t_hi and int(s) == s_lo for _, t, s in points)


@pytest.mark.parametrize("stem", ["polaris-rx580-sapphire-pulse", "vega10-rx-vega56-asus-strix"])
def test_fan_readings_agree_with_amdgpu_sysfs_rs(tmp_path: Path, stem: str) -> None:
    """The pwm and rpm the pwm1 backend reads back and the reading reports, as amdgpu-sysfs-rs asserts."""
    rs = _peers(stem)["amdgpu_sysfs_rs_tests"]["assertions"]
    sysfs, card = _card(tmp_path, stem)
    gpu = read_card(sysfs, card)
    assert (gpu.pwm, gpu.fan_rpm) == (rs["hwmon.fan_pwm"], rs["hwmon.fan_current_rpm"])
    for label, temp in rs["hwmon.temps"].items():
        assert (gpu.temp(label).temp_c, gpu.temp(label).crit_c) == (temp["current"], temp["crit"])
    assert card.hwmon_dir is not None
    backend = Pwm1Backend(sysfs, card.hwmon_dir)
    assert backend.number(f"{card.hwmon_dir}/pwm1") == rs["hwmon.fan_pwm"]


def test_the_rs_card_without_fan_or_cap_assertions_is_named() -> None:
    """navi21's amdgpu-sysfs-rs entry asserts DPM clock levels only, which gpuwatch neither reads nor writes;
    the other four are compared above."""
    fan_keys = ("fan_curve", "hwmon.fan_pwm")
    assert [s for s in RS_CARDS if not any(k in _peers(s)["amdgpu_sysfs_rs_tests"]["assertions"] for k in fan_keys)
            ] == ["navi21-rx6900xt-sapphire-nitro"]
