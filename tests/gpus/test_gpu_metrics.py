"""The gpu_metrics decoder on every layout the kernel publishes, on garbage and on truncation.

Tables are built from the struct definitions (tests/support/gpu_metrics.py, offsets written down by
hand, independent of the package's layout code); the decoder was also checked against real dumps
outside the repository (docs/telemetry.md, "Fixtures and real dumps").
"""

from __future__ import annotations

import json
import random
import struct

import pytest

from gpuwatch.gpus.gpu_metrics import GpuMetrics, GpuMetricsError, decode
from gpuwatch.gpus.gpu_metrics_layouts import LAYOUTS, encode
from tests.support.gpu_metrics import CARD_TABLES, table
from tests.support.gpu_metrics import LAYOUTS as HAND_LAYOUTS
from tests.support.paths import FIXTURES

DGPU_1_X = [(1, 0), (1, 1), (1, 2), (1, 3)]
MI = [(1, 4), (1, 5), (1, 6), (1, 7), (1, 8)]
APU_2_X = [(2, 0), (2, 1), (2, 2), (2, 3), (2, 4)]


def test_every_published_layout_is_known_with_the_kernels_size_and_offsets() -> None:
    assert set(LAYOUTS) == set(HAND_LAYOUTS) == {*DGPU_1_X, *MI, *APU_2_X, (3, 0)}
    for revision, (size, offsets) in HAND_LAYOUTS.items():
        layout = LAYOUTS[revision]
        assert layout.size == size, revision
        for name, (offset, code) in offsets.items():
            field = layout.fields[name]
            assert (field.offset, field.code) == (offset, code), (revision, name)


@pytest.mark.parametrize("revision", DGPU_1_X)
def test_consumer_dgpu_layouts(revision: tuple[int, int]) -> None:
    extra = {"voltage_gfx": 775, "voltage_soc": 818, "voltage_mem": 1356, "indep_throttle_status": 1 << 35} \
        if revision == (1, 3) else {}
    got = decode(table(revision, temperature_edge=56, temperature_hotspot=59, temperature_mem=54,
                       temperature_vrgfx=49, temperature_vrsoc=0, average_gfx_activity=37, average_umc_activity=12,
                       average_socket_power=236, energy_accumulator=17_691_682, system_clock_counter=533_474_291_244,
                       average_gfxclk_frequency=2011, average_uclk_frequency=993, current_gfxclk=2050,
                       current_socclk=800, current_uclk=1000, throttle_status=1 << 14, current_fan_speed=1944,
                       pcie_link_width=16, pcie_link_speed=160, **extra))
    assert got == GpuMetrics(
        revision[0], revision[1], edge_c=56, junction_c=59, mem_c=54, vrgfx_c=49, vrsoc_c=None, vrmem_c=None,
        gfx_busy_ratio=0.37, mem_busy_ratio=0.12, power_w=236, sclk_mhz=2050, sclk_average_mhz=2011, mclk_mhz=1000,
        mclk_average_mhz=993, socclk_mhz=800, fan_rpm=1944, pcie_link_width=16, pcie_link_speed_gts=16.0,
        throttle_status=1 << 14, energy_accumulator=17_691_682, system_clock_ns=533_474_291_244,
        **({"vddgfx_v": 0.775, "vddsoc_v": 0.818, "vddmem_v": 1.356, "indep_throttle_status": 1 << 35}
           if revision == (1, 3) else {}),
    )
    assert got.revision == f"{revision[0]}.{revision[1]}"


@pytest.mark.parametrize("revision", MI)
def test_datacenter_layouts(revision: tuple[int, int]) -> None:
    values = dict(temperature_hotspot=71, temperature_mem=64, temperature_vrsoc=55, curr_socket_power=540,
                  average_gfx_activity=88, average_umc_activity=40, energy_accumulator=1 << 40,
                  system_clock_counter=10**12, pcie_link_width=16, pcie_link_speed=320, current_gfxclk=2100,
                  current_socclk=1200, current_uclk=1300)
    if revision in ((1, 4), (1, 5)):
        values["throttle_status"] = 5
    got = decode(table(revision, **values))
    assert (got.junction_c, got.mem_c, got.vrsoc_c, got.power_w, got.gfx_busy_ratio) == (71, 64, 55, 540, 0.88)
    assert (got.energy_accumulator, got.system_clock_ns, got.pcie_link_speed_gts) == (1 << 40, 10**12, 32.0)
    assert (got.sclk_mhz, got.socclk_mhz, got.mclk_mhz) == (2100, 1200, 1300)
    assert got.throttle_status == (5 if revision in ((1, 4), (1, 5)) else None)
    assert got.edge_c is None and got.fan_rpm is None and got.indep_throttle_status is None


@pytest.mark.parametrize("revision", APU_2_X)
def test_apu_layouts_in_centi_degrees_milliwatts_and_centi_percent(revision: tuple[int, int]) -> None:
    extra = {"indep_throttle_status": 1 << 4} if revision >= (2, 2) else {}
    if revision == (2, 4):
        extra |= {"average_gfx_voltage": 1150, "average_soc_voltage": 900}
    got = decode(table(revision, temperature_gfx=2500, temperature_soc=2737, average_gfx_activity=79,
                       average_socket_power=3401, average_gfxclk_frequency=800, average_uclk_frequency=400,
                       average_fclk_frequency=1600, current_gfxclk=810, current_socclk=600, throttle_status=0, **extra))
    assert (got.edge_c, got.soc_c, got.gfx_busy_ratio, got.power_w) == (25.0, 27.37, 0.0079, 3.401)
    assert (got.sclk_average_mhz, got.mclk_average_mhz, got.fclk_average_mhz, got.sclk_mhz) == (800, 400, 1600, 810)
    assert got.indep_throttle_status == (1 << 4 if revision >= (2, 2) else None)
    assert (got.vddgfx_v, got.vddsoc_v) == ((1.15, 0.9) if revision == (2, 4) else (None, None))
    assert got.junction_c is None and got.fan_rpm is None and got.energy_accumulator is None


def test_strix_v3_0_and_its_older_firmware_in_centi_percent() -> None:
    values = dict(temperature_gfx=3812, temperature_soc=4062, average_socket_power=9839, average_gfxclk_frequency=849,
                  average_uclk_frequency=836, average_fclk_frequency=1162, system_clock_counter=152_155_057_130_097)
    got = decode(table((3, 0), average_gfx_activity=3, **values))
    assert (got.edge_c, got.soc_c, got.gfx_busy_ratio, got.power_w) == (38.12, 40.62, 0.03, 9.839)
    assert (got.sclk_average_mhz, got.mclk_average_mhz, got.fclk_average_mhz) == (849, 836, 1162)
    assert got.throttle_status is None and got.indep_throttle_status is None
    assert decode(table((3, 0), average_gfx_activity=4500, **values)).gfx_busy_ratio == 0.45


def test_sentinels_all_ones_and_the_zeros_that_mean_absent() -> None:
    empty = decode(table((1, 3)))  # nothing filled: every field 0xFF..
    assert all(value is None for key, value in vars(empty).items()
               if key not in ("format_revision", "content_revision"))
    zeros = decode(table((1, 3), temperature_vrgfx=0, temperature_vrsoc=0, temperature_vrmem=0, energy_accumulator=0,
                         voltage_gfx=0, current_fan_speed=0))
    assert (zeros.vrgfx_c, zeros.vrsoc_c, zeros.vrmem_c, zeros.energy_accumulator) == (None, None, None, None)
    assert (zeros.vddgfx_v, zeros.fan_rpm) == (0.0, 0)  # GFXOFF and zero-RPM are real readings


@pytest.mark.parametrize("name", sorted(CARD_TABLES))
def test_card_tables_match_their_captures_hwmon(name: str) -> None:
    files = json.loads((FIXTURES / "cards" / f"{name}.json").read_text())["files"]
    hwmon = {key.rsplit("/", 1)[1]: value.strip() for key, value in files.items() if "/hwmon/" in key}
    got = decode(CARD_TABLES[name])
    assert got.edge_c == int(hwmon["temp1_input"]) / 1000
    assert got.power_w == pytest.approx(int(hwmon["power1_average"]) / 1e6)
    assert got.gfx_busy_ratio == pytest.approx(int(files["device/gpu_busy_percent"]) / 100, abs=0.01)
    if got.format_revision == 1:
        assert (got.junction_c, got.mem_c) == (int(hwmon["temp2_input"]) / 1000, int(hwmon["temp3_input"]) / 1000)
        assert got.sclk_mhz == int(hwmon["freq1_input"]) // 10**6 and got.mclk_mhz == int(hwmon["freq2_input"]) // 10**6
        assert got.vddgfx_v == int(hwmon["in0_input"]) / 1000
        assert got.fan_rpm == int(hwmon.get("fan1_input", 0))  # the early-kernel RX 9070 XT has none: 0 RPM idle


GARBAGE = {
    "empty": b"",
    "one byte": b"\x78",
    "three bytes": b"\x78\x00\x01",
    "header only": table((1, 3))[:4],
    "v1.3 cut at 119 bytes": table((1, 3))[:119],
    "v1.0 cut in half": table((1, 0))[:40],
    "size 0": struct.pack("<HBB", 0, 1, 3) + table((1, 3))[4:],
    "size 0xFFFF": struct.pack("<HBB", 0xFFFF, 1, 3) + table((1, 3))[4:],
    "v1.3 claiming v1.1's 96 bytes": struct.pack("<HBB", 96, 1, 3) + table((1, 3))[4:96],
    "all 0xFF": b"\xff" * 120,
    "all zero": b"\x00" * 120,
    "v1.9 (attribute stream)": struct.pack("<HBBi", 64, 1, 9, 3) + bytes(56),
    "v1.10": struct.pack("<HBB", 120, 1, 10) + bytes(116),
    "v4.0": struct.pack("<HBB", 120, 4, 0) + bytes(116),
    "v0.0": bytes(4) + bytes(116),
    # What a text pipeline does to a table (how a real corrupted copy was made): every byte >= 0x80
    # becomes U+FFFD's UTF-8 and a newline is appended.
    "through a text pipeline": table((1, 3), temperature_edge=29, system_clock_counter=271_401_782_908_133)
    .decode("utf-8", "replace").encode() + b"\n",
    "trailing bytes": table((1, 3)) + b"\x01",
    "hotspot 300 °C": table((1, 3), temperature_hotspot=300),
    "activity 250 %": table((1, 3), average_gfx_activity=250),
    "fan 40000 RPM": table((1, 3), current_fan_speed=40000),
    "link speed 33": table((1, 3), pcie_link_speed=33),
    "link width 3": table((1, 3), pcie_link_width=3),
    "APU at 200 °C": table((2, 1), temperature_gfx=20000),
}
KINDS = {"empty": "truncated", "one byte": "truncated", "three bytes": "truncated", "header only": "truncated",
         "v1.3 cut at 119 bytes": "truncated", "v1.0 cut in half": "truncated", "size 0": "size mismatch",
         "size 0xFFFF": "size mismatch", "v1.3 claiming v1.1's 96 bytes": "size mismatch",
         "through a text pipeline": "trailing garbage", "trailing bytes": "trailing garbage"}


@pytest.mark.parametrize("case", sorted(GARBAGE))
def test_garbage_and_truncation_are_errors_with_a_kind(case: str) -> None:
    with pytest.raises(GpuMetricsError) as caught:
        decode(GARBAGE[case])
    expected = KINDS.get(case, "unknown revision" if case.startswith(("v", "all")) else "implausible")
    assert caught.value.kind == expected, caught.value
    assert str(caught.value).startswith(expected + ": ")


def test_nul_padding_after_the_table_is_accepted() -> None:
    # A dump tool that pads to a page (LACT's RX 6900 XT dump is 120 bytes + 3976 NULs).
    padded = CARD_TABLES["navi21-rx6900xt-sapphire-nitro"] + bytes(3976)
    assert decode(padded) == decode(CARD_TABLES["navi21-rx6900xt-sapphire-nitro"])


def test_random_bytes_never_escape_as_anything_but_a_read_error() -> None:
    rng = random.Random(19)
    for _ in range(3000):
        length = rng.choice([rng.randrange(0, 8), rng.randrange(0, 400), 120, 80, 264])
        data = bytes(rng.randrange(256) for _ in range(length))
        if rng.random() < 0.5 and length >= 4:  # a valid header over random content
            layout = rng.choice(list(LAYOUTS.values()))
            data = encode(layout, {})[:4] + data[4:layout.size] + bytes(max(0, layout.size - length))
        try:
            decode(data)
        except GpuMetricsError:
            pass


def test_package_encoder_round_trips_every_layout() -> None:
    for layout in LAYOUTS.values():
        built = encode(layout, {"system_clock_counter": 12345})
        assert len(built) == layout.size and decode(built).system_clock_ns == 12345
