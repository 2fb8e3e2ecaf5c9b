"""Every real capture that carries pp_dpm_sclk, power_dpm_force_performance_level or pp_od_clk_voltage is parsed,
and the clock rung's probe on it says what it offers (never guessed), with the kernel's own quirks (SYSFS_FACTS.md
quirk 6: RDNA's synthetic middle line, two lines marked, SI's empty table)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuwatch.clock.dpm_mask import DpmMaskClock, parse_sclk
from gpuwatch.clock.od_table import OdTable, parse_od_table
from gpuwatch.gpus.amdgpu import discover
from gpuwatch.sim import navi31
from gpuwatch.sim.tree import FakeSysfsTree
from gpuwatch.sysfs import Sysfs
from tests.support.paths import FIXTURES
from tests.support.trees import capture

# pp_dpm_sclk -> the real levels a mask can select (MHz), per capture.
SCLK_LEVELS = {
    "apu-phoenix-lenovo": (800, 1100, 2700),
    "apu-strixpoint-lenovo": (600, 2900),  # 848 MHz * between the ends: the current clock, no level
    "apu-vangogh-steamdeck": (200, 1100, 1600),
    "navi10-rx5700xt-sapphire": (300, 1900),
    "navi14-rx5500xt-msi": (300, 1900),  # "1: 0Mhz *": the synthetic current line
    "navi21-rx6900xt-sapphire-nitro": (500, 2660),
    "navi23-rx6600-gigabyte": (500, 2700),  # "1: 2605Mhz *": the current clock, no level
    "navi23-rx6600xt": (),  # two lines marked, both 0 MHz: no level can be told
    "navi31-rx7900xtx-sapphire-nitro": (500, 2219),
    "navi32-rx7800xt-amd-reference": (500, 2124),
    "navi32-rx7800xt-powercolor-hellhound": (500, 2254),  # "1: 77Mhz *": below level 0, the current clock
    "navi33-rx7600s-laptop": (255, 1841),
    "navi33-rx7700s-laptop": (255, 2208),
    "navi48-rx9070-sapphire-pulse": (500, 2070),
    "navi48-rx9070xt-early-kernel": (500, 2520),
    "navi48-rx9070xt-powercolor": (500, 2400),
    "polaris-rx580-sapphire-pulse": (300, 600, 900, 1145, 1215, 1257, 1300, 1366),
    "si-oland-r7-240": (),  # SI prints an empty table
    "si-tahiti-r9-280-gigabyte": (),
    "vega10-rx-vega56-asus-strix": (852, 991, 1138, 1269, 1312, 1474, 1538, 1590),
    "vega10-rx-vega64-procfs-fixture": (852, 991, 1084, 1138, 1200, 1401, 1536, 1630),
}
# What the level-mask probe says on each capture with power_dpm_force_performance_level (None: offered).
MASK_PROBE = {
    "apu-phoenix-lenovo": None,
    "apu-strixpoint-lenovo": None,
    "navi21-rx6900xt-sapphire-nitro": None,
    "navi31-rx7900xtx-sapphire-nitro": None,
    "navi32-rx7800xt-powercolor-hellhound": "already manual",  # LACT had set it
    "navi33-rx7600s-laptop": "already manual",  # a person or another tool drives the clocks: not taken over
    "navi33-rx7700s-laptop": None,  # "auto" without a trailing newline
    "navi48-rx9070-sapphire-pulse": None,
    "navi48-rx9070xt-early-kernel": None,
    "navi48-rx9070xt-powercolor": None,
    "polaris-rx580-sapphire-pulse": None,
    "si-oland-r7-240": "0 usable level",
    "vega10-rx-vega56-asus-strix": None,
    "vega10-rx-vega64-procfs-fixture": "already manual",
}


def _files(name: str) -> dict[str, str]:
    files: dict[str, str] = json.loads((FIXTURES / "cards" / f"{name}.json").read_text())["files"]
    return files


def test_every_capture_with_clock_files_is_listed() -> None:
    names = {path.name.removesuffix(".json") for path in (FIXTURES / "cards").glob("*.json")
             if not path.name.endswith(".expected.json")}
    with_sclk = {name for name in names if "device/pp_dpm_sclk" in _files(name)}
    with_level = {name for name in names if "device/power_dpm_force_performance_level" in _files(name)}
    assert with_sclk == set(SCLK_LEVELS) and with_level == set(MASK_PROBE)
    assert not any("device/pp_od_clk_voltage" in _files(name) for name in names)  # the OD tables are below


@pytest.mark.parametrize("name", sorted(SCLK_LEVELS))
def test_the_real_levels_of_every_capture(name: str) -> None:
    assert parse_sclk(_files(name)["device/pp_dpm_sclk"]).levels_mhz == SCLK_LEVELS[name]


@pytest.mark.parametrize("name", sorted(MASK_PROBE))
def test_the_level_mask_probe_on_every_capture(tmp_path: Path, name: str) -> None:
    tree = FakeSysfsTree(tmp_path / "sys")
    card = tree.add_capture(capture(name))
    sysfs = Sysfs(tree.root)
    cards = {found.gpu_id: found for found in discover(sysfs).cards}
    backend = DpmMaskClock(sysfs, card.pci_slot, cards.get)
    expected = MASK_PROBE[name]
    if expected is None:
        found = backend.probe()
        assert found.levels_mhz == tuple(float(mhz) for mhz in SCLK_LEVELS[name])
        assert backend.record().to_json()["level"] == _files(name)["device/power_dpm_force_performance_level"].strip()
    else:
        with pytest.raises(Exception, match=expected):
            backend.probe()


# pp_od_clk_voltage in the forms the kernel prints (the captures hold LACT's writes to it, not its text):
NAVI10 = ("OD_SCLK:\n0: 800Mhz\n1: 2100Mhz\nOD_MCLK:\n1: 875MHz\nOD_VDDC_CURVE:\n0: 800MHz @ 711mV\n"
          "1: 1450MHz @ 775mV\n2: 2100MHz @ 1200mV\nOD_RANGE:\nSCLK:     800Mhz       2150Mhz\n"
          "MCLK:     625Mhz        950Mhz\n")
RDNA2 = ("OD_SCLK:\n0: 500Mhz\n1: 2660Mhz\nOD_MCLK:\n0: 97Mhz\n1: 1000MHz\nOD_VDDGFX_OFFSET:\n0mV\nOD_RANGE:\n"
         "SCLK:     500Mhz       3150Mhz\nMCLK:     674Mhz       1200Mhz\n")
VEGA10 = ("OD_SCLK:\n0:        852Mhz        800mV\n1:        991Mhz        900mV\n"
          "OD_MCLK:\n0:        167Mhz        800mV\nOD_RANGE:\nSCLK:     852MHz       2400MHz\n")
RDNA4 = ("OD_SCLK_OFFSET:\n0Mhz\nOD_MCLK:\n0: 97Mhz\n1: 1259MHz\nOD_VDDGFX_OFFSET:\n0mV\nOD_RANGE:\n"
         "SCLK_OFFSET:    -500Mhz     1000Mhz\nMCLK:     97Mhz       1500Mhz\n")


@pytest.mark.parametrize(("text", "expected"), [
    (NAVI10, OdTable(800, 2100, 800, 2150)),
    (RDNA2, OdTable(500, 2660, 500, 3150)),
    (navi31.od_table(500, 2500), OdTable(500, 2500, 500, 3150)),
    (VEGA10, "per-level table"),
    (RDNA4, "no OD_SCLK section"),
    ("", "no OD_SCLK section"),
    ("OD_SCLK:\n0: 500Mhz\n1: 2500Mhz\n", "OD_RANGE"),
])
def test_the_od_table_forms(text: str, expected: OdTable | str) -> None:
    parsed = parse_od_table(text)
    if isinstance(expected, str):
        assert isinstance(parsed, str) and expected in parsed
    else:
        assert parsed == expected
