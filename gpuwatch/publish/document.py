"""The stable JSON document (schema 1) of `gpuwatch status --json`, `/status` and the state file.

Built from the PublishedState only, the thermal limits included (``PublishedState.limits_c``): the one encoder;
publish/view.py decodes it back into model's dataclasses. Enums become their values and tuples lists, as
json.dumps and a reader expect.
"""

from __future__ import annotations

from dataclasses import fields, is_dataclass
from enum import Enum
from typing import Any

from gpuwatch.limits import over_limit
from gpuwatch.model import GpuReading, GpuResetState, JobReceipt, NodeHealth, PublishedState, Source, UnmanagedState
from gpuwatch.publish.decode import SCHEMA_VERSION
from gpuwatch.publish.health_codes import fault_line

# The document as JSON's plain data: its shape is model's dataclasses (publish/view.py decodes it into them) and
# publish/decode.py's SPECS (what every reader validates it with), kept equal by tests/publish/test_decode.py.
StatusDocument = dict[str, Any]

_FLAT_SKIP = {"temps", "errors", "throttled_s", "sources"}


def to_document(state: PublishedState, source: Source) -> StatusDocument:
    fans = {fan.gpu_id: fan for fan in state.fans}
    powers = {power.gpu_id: power for power in state.powers}
    clocks = {clock.gpu_id: clock for clock in state.clocks}
    snapshot = state.snapshot
    resets = {r.gpu_id: r for r in snapshot.resets}
    unmanaged = {u.gpu_id: u for u in state.unmanaged}
    return {
        "schema": SCHEMA_VERSION,
        "source": source,
        "taken_unix": snapshot.taken_unix,
        "sample_duration_s": snapshot.sample_duration_s,
        "daemon": None if state.daemon is None else plain(state.daemon),
        "gpus": [
            _gpu(state, gpu, None if gpu.gpu_id not in fans else plain(fans[gpu.gpu_id]),
                 None if gpu.gpu_id not in powers else plain(powers[gpu.gpu_id]),
                 None if gpu.gpu_id not in resets else _reset(resets[gpu.gpu_id]),
                 None if gpu.gpu_id not in unmanaged else _unmanaged(unmanaged[gpu.gpu_id]),
                 None if gpu.gpu_id not in clocks else plain(clocks[gpu.gpu_id]))
            for gpu in snapshot.gpus
        ],
        "unsupported": [plain(card) for card in snapshot.unsupported],
        "trainers": [plain(trainer) for trainer in state.trainers],
        "processes": [plain(process) for process in snapshot.processes],
        "processes_unreadable": snapshot.processes_unreadable,
        "health": None if state.health is None else _health(state.health),
        "jobs": [_job(job) for job in state.jobs],
    }


def _health(health: NodeHealth) -> dict[str, Any]:
    doc: dict[str, Any] = plain(health)
    doc["faults"] = [{**plain(f), "line": fault_line(f.code, f.gpu_id, f.detail)} for f in health.faults]
    return doc


def _job(job: JobReceipt) -> dict[str, Any]:
    doc: dict[str, Any] = plain(job)
    doc["gpus"] = [{**plain(gpu), "max_temps_c": dict(gpu.max_temps_c), "throttled_s": dict(gpu.throttled_s)}
                   for gpu in job.gpus]
    return doc


def _reset(state: GpuResetState) -> dict[str, Any]:
    doc: dict[str, Any] = plain(state)
    del doc["gpu_id"]
    return doc


def _unmanaged(state: UnmanagedState) -> dict[str, Any]:
    doc: dict[str, Any] = plain(state)
    del doc["gpu_id"]
    return doc


def _gpu(state: PublishedState, gpu: GpuReading, fan: dict[str, Any] | None, power: dict[str, Any] | None,
         reset: dict[str, Any] | None, unmanaged: dict[str, Any] | None = None,
         clock: dict[str, Any] | None = None) -> dict[str, Any]:
    doc: dict[str, Any] = {f.name: getattr(gpu, f.name) for f in fields(gpu) if f.name not in _FLAT_SKIP}
    temperatures: dict[str, dict[str, Any]] = {
        t.label: {
            "temp_c": t.temp_c,
            "crit_c": t.crit_c,
            "crit_hyst_c": t.crit_hyst_c,
            "emergency_c": t.emergency_c,
            "limit_c": state.limit_c(gpu.gpu_id, t.label),
        }
        for t in gpu.temps
    }
    for key in ("throttle_flags", "throttle_reasons"):
        doc[key] = None if doc[key] is None else list(doc[key])
    doc["throttled_s"] = dict(gpu.throttled_s)
    doc["sources"] = dict(gpu.sources)
    doc["suspended"] = gpu.suspended
    doc["pwm_ratio"] = gpu.pwm_ratio
    doc["temperatures"] = temperatures
    doc["over_limit"] = [label for label, t in temperatures.items() if over_limit(t["temp_c"], t["limit_c"])]
    doc["fan_controller"] = fan
    doc["power_governor"] = power
    doc["clock_ceiling"] = clock
    doc["errors"] = [plain(e) for e in gpu.errors]
    doc["reset"] = reset
    doc["unmanaged"] = unmanaged
    return doc


_LEAVES = (str, int, float, bool, type(None))
_FIELDS: dict[type, tuple[str, ...]] = {}  # a dataclass type's field names, looked up once per type


def plain(value: Any) -> Any:
    """A dataclass as JSON's plain data, its fields in order: nested dataclasses to dicts, enums to their value,
    tuples and lists to lists, dicts' values likewise (their keys as they are).

    What ``_plain(dataclasses.asdict(value))`` gave, in one walk: asdict deep-copied every leaf and looked every
    type up again on every call: a fifth of the 8-GPU daemon's main thread (docs/performance.md, issue 52)."""
    if isinstance(value, Enum):  # first: a str or int enum is a leaf's instance too
        return value.value
    if isinstance(value, _LEAVES):
        return value
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    names = _FIELDS.get(type(value))
    if names is None:
        if not (is_dataclass(value) and not isinstance(value, type)):
            return value
        names = _FIELDS[type(value)] = tuple(f.name for f in fields(value))
    return {name: plain(getattr(value, name)) for name in names}
