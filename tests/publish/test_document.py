"""The status document's TypedDicts (schema 1, what the CLI renders) name exactly the keys to_document writes;
its limits are the published state's."""

from __future__ import annotations

from pathlib import Path

from gpuwatch.model import GpuReading, PublishedState, SensorLimit, Snapshot, TempReading, UnsupportedCard
from gpuwatch.publish.document import to_document
from gpuwatch.publish.schema import (
    ClockCeilingDoc,
    DaemonDoc,
    ErrorDoc,
    FanControllerDoc,
    GpuDoc,
    GpuResetDoc,
    PowerGovernorDoc,
    ProcessDoc,
    StatusDocument,
    TemperatureDoc,
    TrainerDoc,
    TrainerGpuUseDoc,
    UnsupportedDoc,
)
from tests.support.published import GPU_GONE, example_state


def test_typed_dicts_name_every_key_of_the_document(tmp_path: Path) -> None:
    doc = to_document(example_state(tmp_path / "sys"), "daemon")
    assert set(doc) == StatusDocument.__required_keys__
    assert doc["daemon"] is not None and set(doc["daemon"]) == DaemonDoc.__required_keys__
    assert doc["gpus"] and all(set(gpu) == GpuDoc.__required_keys__ for gpu in doc["gpus"])
    fans = [gpu["fan_controller"] for gpu in doc["gpus"] if gpu["fan_controller"] is not None]
    assert fans and all(set(fan) == FanControllerDoc.__required_keys__ for fan in fans)
    powers = [gpu["power_governor"] for gpu in doc["gpus"] if gpu["power_governor"] is not None]
    assert powers and all(set(power) == PowerGovernorDoc.__required_keys__ for power in powers)
    clocks = [gpu["clock_ceiling"] for gpu in doc["gpus"] if gpu["clock_ceiling"] is not None]
    assert clocks and all(set(clock) == ClockCeilingDoc.__required_keys__ for clock in clocks)
    temps = [t for gpu in doc["gpus"] for t in gpu["temperatures"].values()]
    assert temps and all(set(t) == TemperatureDoc.__required_keys__ for t in temps)
    gone = next(gpu for gpu in doc["gpus"] if gpu["gpu_id"] == GPU_GONE)
    assert [set(e) for e in gone["errors"]] == [ErrorDoc.__required_keys__]
    assert doc["trainers"] and all(set(t) == TrainerDoc.__required_keys__ for t in doc["trainers"])
    uses = [use for t in doc["trainers"] for use in t["gpu_use"]]
    assert uses and all(set(use) == TrainerGpuUseDoc.__required_keys__ for use in uses)
    resets = [gpu["reset"] for gpu in doc["gpus"] if gpu["reset"] is not None]
    assert resets and all(set(reset) == GpuResetDoc.__required_keys__ for reset in resets)
    assert doc["processes"] and all(set(row) == ProcessDoc.__required_keys__ for row in doc["processes"])


def test_unsupported_cards_are_typed_too() -> None:
    snapshot = Snapshot(0.0, 0.0, (),
                        unsupported=(UnsupportedCard(card="card5", driver="radeon", gpu_id="0000:44:00.0"),))
    doc = to_document(PublishedState(snapshot=snapshot), "sysfs")
    assert doc["source"] == "sysfs" and doc["daemon"] is None
    assert [set(card) for card in doc["unsupported"]] == [UnsupportedDoc.__required_keys__]


def test_limits_and_over_limit_are_the_published_states() -> None:
    gpu = GpuReading("g", "card0", "amdgpu",
                     temps=(TempReading("edge", 70.0), TempReading("junction", 90.0, crit_c=110.0)))
    snapshot = Snapshot(0.0, 0.0, (gpu,))
    doc = to_document(PublishedState(snapshot, limits_c=(SensorLimit("g", "junction", 85.0),)), "daemon")
    temperatures = doc["gpus"][0]["temperatures"]
    assert (temperatures["edge"]["limit_c"], temperatures["junction"]["limit_c"]) == (None, 85.0)
    assert doc["gpus"][0]["over_limit"] == ["junction"]
    unlimited = to_document(PublishedState(snapshot), "daemon")["gpus"][0]
    assert unlimited["temperatures"]["junction"]["limit_c"] is None and unlimited["over_limit"] == []
