"""The status document's table (publish/decode.py's SPECS, schema 1: model's dataclasses as published, which the
CLI renders) names exactly the keys to_document writes; its limits are the published state's."""

from __future__ import annotations

import json
from dataclasses import asdict
from enum import Enum
from pathlib import Path

from gpuwatch.model import GpuReading, PublishedState, SensorLimit, Snapshot, TempReading, UnsupportedCard
from gpuwatch.publish.decode import SPECS
from gpuwatch.publish.document import plain, to_document
from tests.support.published import GPU_GONE, example_state


def test_the_specs_name_every_key_of_the_document(tmp_path: Path) -> None:
    doc = to_document(example_state(tmp_path / "sys"), "daemon")
    assert set(doc) == set(SPECS["StatusDocument"]) - {"redacted"}  # redacted: only in a redacted one
    assert doc["daemon"] is not None and set(doc["daemon"]) == set(SPECS["DaemonDoc"])
    assert doc["gpus"] and all(set(gpu) == set(SPECS["GpuDoc"]) for gpu in doc["gpus"])
    fans = [gpu["fan_controller"] for gpu in doc["gpus"] if gpu["fan_controller"] is not None]
    assert fans and all(set(fan) == set(SPECS["FanControllerDoc"]) for fan in fans)
    powers = [gpu["power_governor"] for gpu in doc["gpus"] if gpu["power_governor"] is not None]
    assert powers and all(set(power) == set(SPECS["PowerGovernorDoc"]) for power in powers)
    clocks = [gpu["clock_ceiling"] for gpu in doc["gpus"] if gpu["clock_ceiling"] is not None]
    assert clocks and all(set(clock) == set(SPECS["ClockCeilingDoc"]) for clock in clocks)
    temps = [t for gpu in doc["gpus"] for t in gpu["temperatures"].values()]
    assert temps and all(set(t) == set(SPECS["TemperatureDoc"]) for t in temps)
    gone = next(gpu for gpu in doc["gpus"] if gpu["gpu_id"] == GPU_GONE)
    assert [set(e) for e in gone["errors"]] == [set(SPECS["ErrorDoc"])]
    assert doc["trainers"] and all(set(t) == set(SPECS["TrainerDoc"]) for t in doc["trainers"])
    uses = [use for t in doc["trainers"] for use in t["gpu_use"]]
    assert uses and all(set(use) == set(SPECS["TrainerGpuUseDoc"]) for use in uses)
    resets = [gpu["reset"] for gpu in doc["gpus"] if gpu["reset"] is not None]
    assert resets and all(set(reset) == set(SPECS["GpuResetDoc"]) for reset in resets)
    assert doc["processes"] and all(set(row) == set(SPECS["ProcessDoc"]) for row in doc["processes"])


def test_unsupported_cards_are_typed_too() -> None:
    snapshot = Snapshot(0.0, 0.0, (),
                        unsupported=(UnsupportedCard(card="card5", driver="radeon", gpu_id="0000:44:00.0"),))
    doc = to_document(PublishedState(snapshot=snapshot), "sysfs")
    assert doc["source"] == "sysfs" and doc["daemon"] is None
    assert [set(card) for card in doc["unsupported"]] == [set(SPECS["UnsupportedDoc"])]


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


def test_plain_is_asdict_with_enums_as_values(tmp_path: Path) -> None:
    """The one-walk conversion gives what ``dataclasses.asdict`` and json gave (enums as values, tuples as lists)."""
    state = example_state(tmp_path / "sys")
    parts = (state.daemon, state.health, *state.fans, *state.powers, *state.clocks, *state.trainers,
             *state.snapshot.processes, *state.snapshot.resets, *state.unmanaged, *state.jobs,
             *state.snapshot.gpus, state.snapshot, state)
    assert len(parts) > 8
    for part in parts:
        assert plain(part) == json.loads(json.dumps(asdict(part), default=lambda e: e.value)), type(part).__name__
        assert not _enums(plain(part)), type(part).__name__  # a str enum equals its value: looked for apart
    # Each GPU's flat fields in the document likewise, in the dataclass's order (the state file's bytes).
    for gpu, doc in zip(state.snapshot.gpus, to_document(state, "daemon")["gpus"], strict=True):
        flat = {k: v for k, v in plain(gpu).items() if k not in ("temps", "errors", "throttled_s", "sources")}
        assert list(doc)[:len(flat)] == list(flat) and json.dumps({k: doc[k] for k in flat}) == json.dumps(flat)


def _enums(value: object) -> list[Enum]:
    if isinstance(value, Enum):
        return [value]
    if isinstance(value, dict):
        return [e for v in value.values() for e in _enums(v)]
    if isinstance(value, list):
        return [e for v in value for e in _enums(v)]
    return []
