"""The one decoder of the published document (publish/decode.py), by tables: its SPECS are model's dataclasses, a golden
document decodes, and every field at every level given a wrong type is refused with one line naming it, never a
traceback in the readers built on it (health's verdict in every format, status, receipt)."""

from __future__ import annotations

import copy
import dataclasses
import enum
import json
import types
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpuwatch import model
from gpuwatch.cli import status
from gpuwatch.cli.health import receipt
from gpuwatch.cli.health.render import FORMATS, from_document, render
from gpuwatch.publish import decode, light_view
from gpuwatch.publish.document import to_document
from tests.support.published import example_state

NOW = 1_000_000.0


# Each SPECS entry and the dataclass of model.py a reader decodes it into (publish/view.py).
DATACLASSES: dict[str, type] = {
    "StatusDocument": model.StatusView, "DaemonDoc": model.DaemonInfo, "HealthDoc": model.NodeHealth,
    "HealthFaultDoc": model.HealthFault, "TemperatureDoc": model.PublishedTemp, "FanControllerDoc": model.FanState,
    "PowerGovernorDoc": model.PowerState, "ClockCeilingDoc": model.ClockState, "ErrorDoc": model.ReadError,
    "GpuResetDoc": model.GpuResetState, "UnmanagedDoc": model.UnmanagedState, "GpuDoc": model.PublishedGpu,
    "UnsupportedDoc": model.UnsupportedCard, "TrainerGpuUseDoc": model.TrainerGpuUse, "TrainerDoc": model.TrainerState,
    "ProcessDoc": model.GpuProcess, "JobGpuReceiptDoc": model.JobGpuReceipt, "JobReceiptDoc": model.JobReceipt,
}
# Where the document and its dataclass differ by design: what document.py derives (added) and what it publishes
# elsewhere (left out: a GPU's temps are its ``temperatures``; its reset and unmanaged parts sit under the GPU).
ADDED = {"GpuDoc": {"suspended": "bool", "pwm_ratio": "float?"}, "HealthFaultDoc": {"line": "str"}}
LEFT_OUT = {"GpuDoc": {"temps"}, "GpuResetDoc": {"gpu_id"}, "UnmanagedDoc": {"gpu_id"}}
PAIRS_AS_LISTS = {"restarts_by_reason", "gaps"}  # (name, value) pairs published as lists, not as an object
NAMES = {cls: name for name, cls in DATACLASSES.items()}


def _spec_of(hint: Any, field: str = "") -> Any:
    """The SPECS form of a dataclass field's annotation."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        (inner,) = [a for a in args if a is not type(None)]
        spec = _spec_of(inner, field)
        return spec + "?" if isinstance(spec, str) else ("?", spec)
    if origin is tuple and typing.get_origin(args[0]) is tuple:  # pairs
        pair = typing.get_args(args[0])
        if field in PAIRS_AS_LISTS:
            return [["|".join(sorted({a.__name__ for a in pair}, key=lambda n: n != "str"))]]
        return {"*": _spec_of(pair[1])}
    if origin is tuple:
        return [_spec_of(args[0])]
    if origin is dict:
        return {"*": _spec_of(args[1])}
    if origin is typing.Literal or (isinstance(hint, type) and issubclass(hint, enum.Enum)):
        return "str"
    return NAMES.get(hint, getattr(hint, "__name__", None))


def test_the_specs_are_the_dataclasses() -> None:
    """decode.SPECS (plain data, for `gpuwatch health`'s fast path) is model's dataclasses as published: a field
    added to one of them and not to the table (or the other way round) fails here."""
    assert set(decode.SPECS) == set(DATACLASSES)
    for name, cls in DATACLASSES.items():
        fields = {f.name: _spec_of(typing.get_type_hints(cls)[f.name], f.name) for f in dataclasses.fields(cls)
                  if f.name not in LEFT_OUT.get(name, set())}
        assert decode.SPECS[name] == {**fields, **ADDED.get(name, {})}, name
    assert all(set(keys) <= set(decode.SPECS[name]) for name, keys in decode.REQUIRED.items())


def test_the_defaults_and_the_states_are_the_dataclasses() -> None:
    """decode.DEFAULTS (what a missing key stands for) is each field's default as the light view reads it
    (publish/light_view.py: a missing key not listed is None), and decode.CHOICES each Literal's and enum's values:
    a default or a state changed in model.py and not in the tables (or the other way round) fails here."""
    for name, cls in DATACLASSES.items():
        hints = typing.get_type_hints(cls)
        defaults, choices = {}, {}
        for f in dataclasses.fields(cls):
            if f.name not in decode.SPECS[name]:
                continue
            default = (f.default_factory() if f.default_factory is not dataclasses.MISSING
                       else None if f.default is dataclasses.MISSING else f.default)
            if default is not None:
                defaults[f.name] = default
            hint = hints[f.name]
            union = typing.get_origin(hint) in (typing.Union, types.UnionType)
            for kind in typing.get_args(hint) if union else (hint,):
                if typing.get_origin(kind) is typing.Literal:
                    choices[f.name] = typing.get_args(kind)
                elif isinstance(kind, type) and issubclass(kind, enum.Enum):
                    choices[f.name] = tuple(member.value for member in kind)
        listed = decode.DEFAULTS.get(name, {})
        assert set(listed) == set(defaults), name
        assert {key: light_view._value(value, decode.SPECS[name][key], f"{name}.{key}")
                for key, value in listed.items()} == defaults
        assert decode.CHOICES.get(name, {}) == choices, name
    assert set(decode.DEFAULTS) | set(decode.CHOICES) <= set(decode.SPECS)


@pytest.fixture(scope="module")
def golden(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(json.dumps(to_document(example_state(tmp_path_factory.mktemp("sys")), "daemon")))
    assert doc["jobs"] and doc["health"] and doc["trainers"] and doc["processes"]  # every part is exercised
    doc["taken_unix"] = NOW
    return doc


def test_the_golden_document_decodes_whole(golden: dict[str, Any]) -> None:
    assert decode.document(copy.deepcopy(golden)) == golden


def _wrong(spec: Any) -> list[object]:
    """Values of another type than ``spec`` (a nullable spec takes None)."""
    if isinstance(spec, tuple):
        return ["soon", 1]
    if isinstance(spec, list):
        return ["soon", {"a": 1}, None]
    if isinstance(spec, dict):
        return ["soon", [1], None]
    base = spec.rstrip("?")
    wrong = {"str": [1, [1]], "int": ["soon", 1.5, True], "float": ["soon", True, [1], float("inf"), 10**400],
             "bool": [1, "true"], "str|int": [1.5, [1]]}.get(base, ["soon", [1], 7])
    return wrong if spec.endswith("?") else [*wrong, None]


def _fields(doc: Any, spec: Any, path: tuple[Any, ...]) -> Iterator[tuple[tuple[Any, ...], Any]]:
    """Every (path, spec) of the golden document, at every level."""
    if isinstance(spec, tuple):
        spec = spec[1]
    if doc is None:
        return
    if isinstance(spec, list):
        for i, item in enumerate(doc[:2]):
            yield (*path, i), spec[0]
            yield from _fields(item, spec[0], (*path, i))
    elif isinstance(spec, dict):
        for key, item in list(doc.items())[:2]:
            yield (*path, key), spec["*"]
            yield from _fields(item, spec["*"], (*path, key))
    elif spec.rstrip("?") in decode.SPECS:
        for key, field in decode.SPECS[spec.rstrip("?")].items():
            if key in doc:
                yield (*path, key), field
                yield from _fields(doc[key], field, (*path, key))


def _set(doc: Any, path: tuple[Any, ...], value: object) -> Any:
    out = copy.deepcopy(doc)
    target = out
    for step in path[:-1]:
        target = target[step]
    if value is _DROP:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return out


_DROP = object()


def _mutations(golden: dict[str, Any]) -> Iterator[tuple[str, Any]]:
    for path, spec in _fields(golden, "StatusDocument", ()):
        for value in _wrong(spec):
            yield ".".join(map(str, path)) + f"={value!r}"[:40], _set(golden, path, value)


def test_every_wrong_type_at_every_level_is_one_line_naming_it(golden: dict[str, Any]) -> None:
    tried = 0
    for name, doc in _mutations(golden):
        with pytest.raises(decode.Invalid) as refused:
            decode.document(doc)
        said = str(refused.value)
        assert "\n" not in said and (" is not " in said), name
        tried += 1
    assert tried > 500  # the walk reached every level


@pytest.mark.parametrize(("path", "says"), [
    (("jobs", 0, "job_id"), "jobs[0] has no job_id"),
    (("jobs", 0, "last_seen_unix"), "jobs[0] has no last_seen_unix"),
    (("gpus", 0, "gpu_id"), "gpus[0] has no gpu_id"),
    (("daemon", "pid"), "daemon has no pid"),
    (("health", "faults", 0, "line"), "health.faults[0] has no line"),
    (("taken_unix",), "the document has no taken_unix"),
])
def test_a_missing_required_key_is_refused(golden: dict[str, Any], path: tuple[Any, ...], says: str) -> None:
    with pytest.raises(decode.Invalid, match=says.replace("[", r"\[").replace("]", r"\]")):
        decode.document(_set(golden, path, _DROP))


def test_unknown_keys_are_ignored_and_optional_ones_may_be_missing(golden: dict[str, Any]) -> None:
    newer = {**golden, "from_the_future": {"x": [1]}, "gpus": [{**golden["gpus"][0], "new_field": "soon"}]}
    assert decode.document(newer) is newer
    older = _set(_set(golden, ("daemon", "boot_id"), _DROP), ("gpus", 0, "sources"), _DROP)
    assert decode.document(older) is older


@pytest.mark.parametrize("raw", [[1], "soon", None, 1, {"schema": 2, "taken_unix": 1.0}, {"schema": True}])
def test_not_a_document_at_all(raw: object) -> None:
    with pytest.raises(decode.Invalid):
        decode.document(raw)


def test_the_readers_never_trace_back(golden: dict[str, Any]) -> None:
    """Health's verdict in every format, status's render and exit code, receipt's render: on the golden document
    they work; on every wrong one health says G014 in one line and the others are never reached (they read only
    what ``decode.document`` returned)."""
    assert render(from_document(golden, NOW + 1), "nhc")[1].startswith("gpuwatch:")
    document = golden
    status.render(document, NOW + 1), status.exit_code(document)
    receipt.render(golden["jobs"][0])
    for name, doc in _mutations(golden):
        answer = from_document(doc, NOW + 1)
        assert answer.status == "unknown" and answer.lines[0].startswith("gpuwatch:G014 daemon state unusable: "), name
        for fmt in FORMATS:
            code, text = render(answer, fmt)
            assert code != 0 and "G014" in text.splitlines()[0], (name, fmt)


def test_a_state_from_the_future_is_a_finding_and_boot_time_decides_on_the_same_boot(
        golden: dict[str, Any]) -> None:
    ahead = from_document(golden, NOW - 600)  # the checker's clock stepped back (or the daemon's ran ahead)
    assert ahead.lines == ("gpuwatch:G015 daemon state stamped 600s in the future",) and ahead.status == "unknown"
    doc = _set(_set(golden, ("daemon", "boot_id"), "b1"), ("daemon", "taken_boottime_s"), 5000.0)
    # Same boot: the boot-time clock decides whatever the wall clocks say. A stuck daemon's state is stale
    # though stamped in the future on the wall clock...
    stuck = from_document(doc, NOW - 600, "b1", 5000.0 + 600)
    assert stuck.lines == ("gpuwatch:G001 daemon state 600s old",)
    # ... and a fresh one is fresh though the wall clocks disagree by ten minutes.
    assert from_document(doc, NOW + 600, "b1", 5001.0).age_s == 1.0
    # Another boot's stamp is not compared: the wall clocks decide.
    assert from_document(doc, NOW + 1, "b2", 1.0).age_s == 1.0


def test_a_state_file_path_is_read_through_the_decoder(tmp_path: Path, golden: dict[str, Any]) -> None:
    from gpuwatch.publish.state import read_state

    path = tmp_path / "state.json"
    assert read_state(path) == (None, None)
    path.write_text(json.dumps({**golden, "daemon": [1]}))
    assert read_state(path) == (None, "daemon is not an object")
    path.write_text("[" * 100_000)
    assert read_state(path)[0] is None
    path.write_text(json.dumps(golden))
    assert read_state(path) == (golden, None)
