"""The stable JSON document (schema 1) of `gpuwatch status --json`, `/status` and the state file.

Built from the PublishedState only, the thermal limits included (``PublishedState.limits_c``): the one encoder;
publish/view.py decodes it back into model's dataclasses. Enums become their values and tuples lists, as
json.dumps and a reader expect.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields, is_dataclass
from enum import Enum
from operator import attrgetter
from types import UnionType
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints

from gpuwatch.limits import limits_by_sensor, over_limit
from gpuwatch.model import GpuReading, GpuResetState, JobReceipt, NodeHealth, PublishedState, Source, UnmanagedState
from gpuwatch.publish.decode import SCHEMA_VERSION
from gpuwatch.publish.health_codes import fault_line

# The document as JSON's plain data: its shape is model's dataclasses (publish/view.py decodes it into them) and
# publish/decode.py's SPECS (what every reader validates it with), kept equal by tests/publish/test_decode.py.
StatusDocument = dict[str, Any]

_FLAT_SKIP = {"temps", "errors", "throttled_s", "sources"}
# A GPU reading's flat fields, in order, read by one C call per GPU (``attrgetter``), not a getattr each.
_GPU_FLAT = tuple(f.name for f in fields(GpuReading) if f.name not in _FLAT_SKIP)
_gpu_flat = attrgetter(*_GPU_FLAT)


def to_document(state: PublishedState, source: Source) -> StatusDocument:
    fans = {fan.gpu_id: fan for fan in state.fans}
    powers = {power.gpu_id: power for power in state.powers}
    clocks = {clock.gpu_id: clock for clock in state.clocks}
    snapshot = state.snapshot
    resets = {r.gpu_id: r for r in snapshot.resets}
    unmanaged = {u.gpu_id: u for u in state.unmanaged}
    limits = limits_by_sensor(state.limits_c)
    return {
        "schema": SCHEMA_VERSION,
        "source": source,
        "taken_unix": snapshot.taken_unix,
        "sample_duration_s": snapshot.sample_duration_s,
        "daemon": None if state.daemon is None else plain(state.daemon),
        "gpus": [
            _gpu(limits, gpu, None if gpu.gpu_id not in fans else plain(fans[gpu.gpu_id]),
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


def _gpu(limits: dict[tuple[str, str], float], gpu: GpuReading, fan: dict[str, Any] | None,
         power: dict[str, Any] | None, reset: dict[str, Any] | None, unmanaged: dict[str, Any] | None = None,
         clock: dict[str, Any] | None = None) -> dict[str, Any]:
    doc: dict[str, Any] = dict(zip(_GPU_FLAT, _gpu_flat(gpu), strict=True))
    temperatures: dict[str, dict[str, Any]] = {
        t.label: {
            "temp_c": t.temp_c,
            "crit_c": t.crit_c,
            "crit_hyst_c": t.crit_hyst_c,
            "emergency_c": t.emergency_c,
            "limit_c": limits.get((gpu.gpu_id, t.label)),
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
Convert = Callable[[Any], Any]
_CONVERTERS: dict[type, Convert] = {}  # a dataclass type's converter, made once per type (``_converter``)


def plain(value: Any) -> Any:
    """A dataclass as JSON's plain data, its fields in order: nested dataclasses to dicts, enums to their value,
    tuples and lists to lists, dicts' values likewise (their keys as they are).

    What ``_plain(dataclasses.asdict(value))`` gave. asdict deep-copied every leaf and looked every type up again
    on every call (a fifth of the 8-GPU daemon's main thread, docs/performance.md, issue 52); a walk that asked
    each value its type was still the document's largest part. Each dataclass type gets one converter, made from
    its fields' declared types the first time it is met (``_converter``); the generic walk is for what they do
    not declare precisely."""
    convert = _CONVERTERS.get(type(value))
    if convert is not None:
        return convert(value)
    if isinstance(value, Enum):  # first: a str or int enum is a leaf's instance too
        return value.value
    if isinstance(value, _LEAVES):
        return value
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if not (is_dataclass(value) and not isinstance(value, type)):
        return value
    convert = _CONVERTERS[type(value)] = _converter(type(value))
    return convert(value)


def _converter(cls: type) -> Convert:
    """``plain`` for instances of the dataclass ``cls``: every field read by one ``attrgetter`` call, zipped
    with the names into the dict (both in C), then only the fields that are not leaves converted: an enum to its
    value, a tuple of leaves to a list, anything else by the generic walk."""
    names = tuple(f.name for f in fields(cls))
    if not names:
        return lambda value: {}
    try:
        hints = get_type_hints(cls)
    except Exception:  # a hint that does not resolve: every field walked
        hints = {}
    fixes = tuple((name, fix) for name in names if (fix := _fix(hints.get(name, object))) is not None)
    get = attrgetter(*names) if len(names) > 1 else (lambda value: (getattr(value, names[0]),))

    def convert(value: Any) -> dict[str, Any]:
        doc = dict(zip(names, get(value), strict=True))
        for name, fix in fixes:
            doc[name] = fix(doc[name])
        return doc

    return convert


def _fix(hint: Any) -> Convert | None:
    """What a field declared ``hint`` needs after it is read: None for a leaf (str, int, float, bool, None, a
    Literal of them, or a union of those), else its conversion. A field is trusted to hold what it declares
    (mypy --strict); a str enum in a field declared ``str`` would stay one, which json writes as its value."""
    if _leaf(hint):
        return None
    args = get_args(hint) if get_origin(hint) in (Union, UnionType) else (hint,)
    kinds = [a for a in args if a is not type(None)]
    if len(kinds) == 1:
        kind = kinds[0]
        if isinstance(kind, type) and issubclass(kind, Enum):
            return _enum_value
        inner = get_args(kind)
        if get_origin(kind) is tuple and len(inner) == 2 and inner[1] is Ellipsis and _leaf(inner[0]):
            return _listed
    return plain


def _leaf(hint: Any) -> bool:
    if get_origin(hint) in (Union, UnionType):
        return all(_leaf(arg) for arg in get_args(hint))
    if get_origin(hint) is Literal:
        return all(isinstance(arg, _LEAVES) and not isinstance(arg, Enum) for arg in get_args(hint))
    # An enum subclasses str or int too: only the leaf types themselves.
    return hint in _LEAVES


def _enum_value(value: Any) -> Any:
    return value._value_ if isinstance(value, Enum) else plain(value)  # _value_: what the ``value`` property reads


def _listed(value: Any) -> Any:
    return None if value is None else list(value)
