"""The stable JSON document (schema 1) of `gpuwatch status --json`, `/status` and the state file.

Field names are the model's field names (units in the name); absent values are ``null``, never 0.
The README's "JSON schema" section documents it; additions are allowed, renames are not.
"""

from __future__ import annotations

from dataclasses import asdict, fields
from enum import Enum
from typing import Any

from gpuwatch.config import ThermalConfig
from gpuwatch.model import GpuReading, PublishedState
from gpuwatch.limits import over_limit, sensor_limit_c

SCHEMA_VERSION = 1
_FLAT_SKIP = {"temps", "errors"}


def to_document(state: PublishedState, thermal: ThermalConfig, source: str) -> dict[str, Any]:
    fans = {fan.gpu_id: fan for fan in state.fans}
    snapshot = state.snapshot
    return {
        "schema": SCHEMA_VERSION,
        "source": source,
        "taken_unix": snapshot.taken_unix,
        "sample_duration_s": snapshot.sample_duration_s,
        "daemon": None if state.daemon is None else asdict(state.daemon),
        "gpus": [
            _gpu(gpu, thermal, None if gpu.gpu_id not in fans else _plain(asdict(fans[gpu.gpu_id])))
            for gpu in snapshot.gpus
        ],
        "unsupported": [asdict(card) for card in snapshot.unsupported],
        "trainers": [_plain(asdict(trainer)) for trainer in state.trainers],
    }


def _gpu(gpu: GpuReading, thermal: ThermalConfig, fan: dict[str, Any] | None) -> dict[str, Any]:
    doc: dict[str, Any] = {f.name: getattr(gpu, f.name) for f in fields(gpu) if f.name not in _FLAT_SKIP}
    doc["suspended"] = gpu.suspended
    doc["pwm_ratio"] = gpu.pwm_ratio
    doc["temperatures"] = {
        t.label: {
            "temp_c": t.temp_c,
            "crit_c": t.crit_c,
            "crit_hyst_c": t.crit_hyst_c,
            "emergency_c": t.emergency_c,
            "limit_c": sensor_limit_c(t, thermal),
        }
        for t in gpu.temps
    }
    doc["over_limit"] = [label for label, t in doc["temperatures"].items() if over_limit(t["temp_c"], t["limit_c"])]
    doc["fan_controller"] = fan
    doc["errors"] = [asdict(e) for e in gpu.errors]
    return doc


def _plain(value: Any) -> Any:
    """Enums to their value, tuples to lists: what json.dumps and a reader expect."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, Enum):
        return value.value
    return value
