"""families.py's pure helpers: ``packed`` (the values' bits, or None) and ``gpu_gauges`` (columns of per-GPU values)."""

from __future__ import annotations

import math
import struct

import pytest

from gpuwatch.model import GpuReading
from gpuwatch.publish.families import GpuGauge, gpu_gauges, packed


@pytest.mark.parametrize(("values", "expected"), [
    ((), b""),
    ((1.5,), struct.pack("=d", 1.5)),
    ((0.0, -0.0), struct.pack("=2d", 0.0, -0.0)),  # the bits tell the zeros apart (they format differently)
    ((1, True, 1.0), struct.pack("=3d", 1.0, 1.0, 1.0)),  # one text each: floatToGoString floats first
    ((math.inf, -math.inf), struct.pack("=2d", math.inf, -math.inf)),
    ((2**53 + 1,), struct.pack("=d", float(2**53 + 1))),
    ((1.0, 10**400), None),  # no float carries it
    (("7",), None),
    ((None,), None),
])
def test_packed(values: tuple[object, ...], expected: bytes | None) -> None:
    rows = [((f"g{index}",), value) for index, value in enumerate(values)]
    assert packed(rows) == expected
    assert packed(rows) == expected  # the packer kept for the count gives the same


def test_packed_nan_is_bits() -> None:
    bits = packed([(("g",), math.nan)])
    assert bits is not None and math.isnan(struct.unpack("=d", bits)[0])


TABLE: tuple[GpuGauge, ...] = (
    ("t_power_watts", "Power.", "power_w", 1.0),
    ("t_fan_rpm", "Fan.", "fan_rpm", 1.0),
    ("t_gtt_used_bytes", "GTT.", "gtt_used_bytes", 1.0),
    ("t_link_speed", "Speed.", "pcie_link_speed_gts", 1e9),
)


@pytest.mark.parametrize(("gpus", "expected"), [
    ((), [[], [], [], []]),
    ((GpuReading("a", "card0", "amdgpu", power_w=50.0, fan_rpm=1200, pcie_link_speed_gts=16.0),
      GpuReading("b", "card1", "amdgpu", power_w=-0.0, pcie_link_speed_gts=8.0)),
     [[(("a",), 50.0), (("b",), -0.0)],  # a whole column: zipped with the labels
      [(("a",), 1200)],  # a value absent on one GPU: that series absent, never 0
      [],  # absent on every GPU: no series
      [(("a",), 16e9), (("b",), 8e9)]]),  # scaled
    ((GpuReading("a", "card0", "amdgpu", fan_rpm=10**400),),
     [[], [(("a",), 10**400)], [], []]),  # left for metrics.render to drop and count
])
def test_gpu_gauges(gpus: tuple[GpuReading, ...], expected: list[list[object]]) -> None:
    families = gpu_gauges(TABLE, gpus)
    assert [family.name for family in families] == [f"gpuwatch_{name}" for name, _, _, _ in TABLE]
    assert [family.rows for family in families] == expected
    # The values as they were (-0.0 is not 0.0 to the exposition).
    assert [packed(family.rows) for family in families] == [packed(rows) for rows in expected]  # type: ignore[arg-type]


def test_gpu_gauges_one_row_table_and_an_iterator() -> None:
    families = gpu_gauges(TABLE[:1], iter([GpuReading("a", "card0", "amdgpu", power_w=3.0)]))
    assert [family.rows for family in families] == [[(("a",), 3.0)]]
