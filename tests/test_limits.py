"""limits.limits_in_force: every sensor's limit under a [thermal], as a tick publishes them (pure)."""

from __future__ import annotations

from gpuwatch.config.cooling import ThermalConfig
from gpuwatch.limits import limits_in_force
from gpuwatch.model import GpuReading, SensorLimit, Snapshot, TempReading


def test_every_sensor_with_a_limit_in_snapshot_order() -> None:
    a = GpuReading("a", "card0", "amdgpu", temps=(TempReading("edge", 50.0),
                                                   TempReading("junction", 60.0, crit_c=110.0),
                                                   TempReading("mem", 55.0)))
    b = GpuReading("b", "card1", "amdgpu", temps=(TempReading("junction", None, crit_c=100.0),))
    gone = GpuReading("c", "card2", "amdgpu", up=False)
    thermal = ThermalConfig(mem_limit_c=85.0)
    assert limits_in_force(Snapshot(0.0, 0.0, (a, b, gone)), thermal) == (
        SensorLimit("a", "edge", 90.0), SensorLimit("a", "junction", 100.0), SensorLimit("a", "mem", 85.0),
        SensorLimit("b", "junction", 90.0),
    )
    # mem without a configured limit and without crit has none: left out, not 0.
    assert limits_in_force(Snapshot(0.0, 0.0, (a,)), ThermalConfig()) == (
        SensorLimit("a", "edge", 90.0), SensorLimit("a", "junction", 100.0))
