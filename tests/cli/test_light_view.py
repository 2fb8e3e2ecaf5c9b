"""`gpuwatch status` renders the light view of a document (publish/light_view.py) as it renders model's dataclasses
(publish/view.py): every status document the tests have (the example state, every card capture read through the
simulator's tree, the simulated 8-GPU daemon's, redacted and not, each as an older daemon wrote it without its
optional fields, every state of every controller and trainer) gives the same text, colours on and off, at 80 and 120
columns and unfitted, with ``--gpu``, the same process table and the same exit code; and the view holds every field
as the dataclass does (issue 52)."""

from __future__ import annotations

import ast
import copy
import dataclasses
import enum
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpuwatch.cli import fleet
from gpuwatch.cli.process_table import processes_text
from gpuwatch.cli.remote import HostResult
from gpuwatch.cli.status import render_view, select_gpus, view_exit_code
from gpuwatch.cli.text import safe_strings
from gpuwatch.config.cooling import ThermalConfig
from gpuwatch.gpus.amdgpu_source import AmdgpuSource
from gpuwatch.gpus.sampler import Sampler
from gpuwatch.limits import limits_in_force
from gpuwatch.model import PublishedState
from gpuwatch.publish import decode
from gpuwatch.publish.document import to_document
from gpuwatch.publish.light_view import Part, light_view
from gpuwatch.publish.redact import redact
from gpuwatch.publish.view import status_view
from gpuwatch.sim.tree import FakeSysfsTree
from gpuwatch.sysfs import Sysfs
from tests.publish.test_decode import ADDED, NAMES
from tests.support.paths import FIXTURES, REPO
from tests.support.published import NOW_UNIX, example_state, with_rungs
from tests.support.trees import capture

CARDS = sorted(path.name.removesuffix(".json") for path in (FIXTURES / "cards").glob("*.json")
               if not path.name.endswith(".expected.json"))


def _captures(root: Path) -> dict[str, Any]:
    """Every card capture in one simulated tree, read directly (`gpuwatch status` without a daemon)."""
    tree = FakeSysfsTree(root)
    for i, name in enumerate(CARDS):
        tree.add_capture(capture(name), card=f"card{i}", pci_slot=f"0000:{0x10 + i:02x}:00.0", hwmon=f"hwmon{i}")
    clock = iter(float(n) for n in range(100))
    sampler = Sampler([AmdgpuSource(Sysfs(tree.root))], wall_clock=lambda: NOW_UNIX, monotonic=lambda: next(clock))
    sampler.sample()
    snapshot = sampler.sample()
    return to_document(PublishedState(snapshot=snapshot, limits_c=limits_in_force(snapshot, ThermalConfig())),
                       source="sysfs")


def _every_state(doc: dict[str, Any]) -> dict[str, Any]:
    """``doc`` with every mode of every controller and every trainer phase, one per GPU and trainer, round the
    GPUs; an NVML GPU, a reset that failed to recover, a clock the card ignores."""
    doc = copy.deepcopy(doc)
    gpus = [gpu for gpu in doc["gpus"] if gpu.get("up", True)]
    trainer = doc["trainers"][0]
    doc["trainers"] = [{**trainer, "phase": phase, "origin": "attached" if i % 2 else "configured", "user": "alice",
                        "job_id": "77" if i % 3 else None}
                       for i, phase in enumerate(decode.CHOICES["TrainerDoc"]["phase"])]
    parts = {"fan_controller": "FanControllerDoc", "power_governor": "PowerGovernorDoc",
             "clock_ceiling": "ClockCeilingDoc"}
    extra = []
    for key, spec in parts.items():
        template = next(gpu[key] for gpu in gpus if gpu.get(key))
        for i, mode in enumerate(decode.CHOICES[spec]["mode"]):
            gpu = copy.deepcopy(gpus[i % len(gpus)])
            gpu[key] = {**template, "mode": mode, "card_floor_mhz": 1400.0 if i % 2 else None,
                        "not_in_force": i == 1, "target_ceiling_mhz": 2000.0}
            if key == "clock_ceiling" and mode == "unavailable":
                gpu["power_governor"] = {**(gpu.get("power_governor") or {}), "mode": "floor"}
            extra.append(gpu)
    nvml = {**copy.deepcopy(gpus[0]), "backend": "nvml", "vram_reserved_bytes": 512 << 20, "fan_duty_ratio": 0.3,
            "name": None}
    failed = {**copy.deepcopy(gpus[-1]), "reset": {"resets_total": 1, "recovering": True, "stuck_pids": [9],
                                                   "stuck_past_deadline": True}, "runtime_status": "suspended"}
    doc["gpus"] = [*doc["gpus"], *extra, nvml, failed, {**nvml, "fan_duty_ratio": None, "unresponsive": True}]
    return doc


def _older(value: Any, spec: Any, parts: bool) -> Any:
    """``value`` as a daemon that knew none of the optional fields wrote it: only REQUIRED keys at every level
    (``parts``: its objects and lists too, each of them so)."""
    if isinstance(spec, tuple):
        spec = spec[1]
    if value is None:
        return None
    if isinstance(spec, list):
        return [_older(item, spec[0], parts) for item in value]
    if isinstance(spec, dict):
        return {key: _older(item, spec["*"], parts) for key, item in value.items()}
    spec = spec.rstrip("?")
    if spec not in decode.SPECS:
        return value
    fields = decode.SPECS[spec]
    return {key: _older(item, fields[key], parts) for key, item in value.items()
            if key in decode.REQUIRED.get(spec, ()) or (parts and not isinstance(fields.get(key, "str"), str))
            or (parts and fields.get(key, "str").rstrip("?") in decode.SPECS)}


@pytest.fixture(scope="module")
def documents(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("light-view")
    example = to_document(with_rungs(example_state(tmp / "example")), "daemon")
    eight = json.loads((REPO / "benchmarks" / "state-8gpus.json").read_text())
    found = {"example": example, "captures": _captures(tmp / "captures"), "8 gpus": eight,
             "every state": _every_state(example), "no daemon": {**example, "daemon": None, "source": "sysfs"}}
    found |= {f"{name}, redacted": redact(doc) for name, doc in list(found.items())}
    found |= {f"{name}, older{', its parts kept' if parts else ''}": _older(doc, "StatusDocument", parts)
              for name, doc in list(found.items()) for parts in (False, True)}
    return {name: decode.document(json.loads(json.dumps(doc))) for name, doc in found.items()}


def _cases(documents: dict[str, dict[str, Any]]) -> Iterator[tuple[str, dict[str, Any]]]:
    for name, doc in documents.items():
        yield name, doc
        for gpu in doc.get("gpus", [])[:3]:  # --gpu SLOT
            yield f"{name}, --gpu {gpu['gpu_id']}", select_gpus(doc, [gpu["gpu_id"]])


def test_every_document_renders_the_same_through_both_views(documents: dict[str, dict[str, Any]]) -> None:
    compared = 0
    for name, doc in _cases(documents):
        shown = safe_strings(doc)
        old, new = status_view(shown), light_view(shown)
        assert processes_text(new) == processes_text(old), name
        for leftovers in ((), ("a trainer left stopped",)):
            assert view_exit_code(new, leftovers) == view_exit_code(old, leftovers), name
        for color in (False, True):
            for width in (None, 80, 120):
                text = render_view(new, NOW_UNIX + 5, color, "a note", (), "gpuwatch logs -c x.toml", width)
                assert text == render_view(old, NOW_UNIX + 5, color, "a note", (), "gpuwatch logs -c x.toml", width), \
                    (name, color, width)
                compared += 1
    assert compared >= 6 * 2 * len(documents)


def test_every_document_renders_the_same_in_the_fleet_table_through_both_views(
        documents: dict[str, dict[str, Any]], monkeypatch: pytest.MonkeyPatch) -> None:
    """`status --remote` reads each host's document through the light view too (cli/fleet.py)."""
    results = [HostResult(f"http://{i}", safe_strings(doc), stale="no tick for 60 s" if i % 3 == 0 else None)
               for i, doc in enumerate(documents.values())]
    shown = {color: fleet.render(results, NOW_UNIX + 5, color) for color in (False, True)}
    monkeypatch.setattr(fleet, "light_view", status_view)
    assert {color: fleet.render(results, NOW_UNIX + 5, color) for color in (False, True)} == shown
    assert len(shown[False].splitlines()) > len(results)


def test_the_view_holds_every_field_as_the_dataclass_does(documents: dict[str, dict[str, Any]]) -> None:
    """Field by field, at every level: what the renderers read and what they do not yet."""
    for name, doc in documents.items():
        assert _plain(light_view(doc)) == _plain(status_view(doc)), name


def _plain(value: Any) -> Any:
    """Either view as plain data: each part's fields its dataclass has (a GPU's derived ones too), an enum as its
    value."""
    if isinstance(value, Part) or dataclasses.is_dataclass(value):
        spec = value._spec if isinstance(value, Part) else NAMES[type(value)]
        derived = ("suspended", "pwm_ratio", "fan_duty") if spec == "GpuDoc" else ()  # model's properties
        names = [name for name in decode.SPECS[spec] if name not in ADDED.get(spec, {})]
        return {name: _plain(getattr(value, name)) for name in (*names, *derived)}
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, tuple):
        return tuple(_plain(item) for item in value)
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    return value


@pytest.mark.parametrize(("where", "says"), [
    (("gpus", 0, "fan_controller", "mode"), "the document.gpus[0].fan_controller.mode is 'spinning', not one of"),
    (("gpus", 1, "clock_ceiling", "backend"), "the document.gpus[1].clock_ceiling.backend is 'spinning', not one of"),
    (("trainers", 0, "phase"), "the document.trainers[0].phase is 'spinning', not one of"),
    (("gpus", 0, "backend"), "the document.gpus[0].backend is 'spinning', not one of"),
    (("source",), "the document.source is 'spinning', not one of"),
])
def test_a_state_neither_view_can_hold_is_the_same_line(documents: dict[str, dict[str, Any]],
                                                        where: tuple[str | int, ...], says: str) -> None:
    raw = copy.deepcopy(documents["example"])
    part: Any = raw
    for key in where[:-1]:
        part = part[key]
    part[where[-1]] = "spinning"
    said = []
    for view in (status_view, light_view):
        with pytest.raises(decode.Invalid) as refused:
            view(raw)
        said.append(str(refused.value))
    assert said[0] == said[1] and said[0].startswith(says) and "\n" not in said[0]


def test_a_pair_of_the_wrong_length_is_refused_by_both_views(documents: dict[str, dict[str, Any]]) -> None:
    """restarts_by_reason's pairs: the dataclass view refuses them when built, the light view when read."""
    raw = copy.deepcopy(documents["example"])
    raw["trainers"][0]["restarts_by_reason"] = [["crash", 1], ["hang", 2, 3]]
    with pytest.raises(decode.Invalid, match=r"restarts_by_reason\[1\] is not 2 values"):
        status_view(raw)
    view: Any = light_view(raw)
    with pytest.raises(decode.Invalid, match=r"^TrainerDoc.restarts_by_reason\[1\] is not 2 values$"):
        _ = view.trainers[0].restarts_by_reason
    raw["trainers"][0]["restarts_by_reason"] = [["crash", 1]]
    assert light_view(raw).trainers[0].restarts_by_reason == status_view(raw).trainers[0].restarts_by_reason


def test_a_field_the_document_has_not_is_an_attribute_error(documents: dict[str, dict[str, Any]]) -> None:
    """A name no spec has (a renderer's typo mypy would catch) fails loudly, never reads as None."""
    view: Any = light_view(documents["example"])
    with pytest.raises(AttributeError, match="GpuDoc has no field 'fan_speed'"):
        _ = view.gpus[0].fan_speed


RENDERERS = ("status.py", "gpu_block.py", "trainer_rows.py", "health_lines.py", "process_table.py")


def test_the_renderers_compare_states_with_their_published_values() -> None:
    """A mode or a phase is compared with plain strings (model's enums are ``str`` ones, the light view holds their
    values): each of those strings must be one of decode.CHOICES (kept equal to model's enums), so a renamed state
    fails here instead of never matching."""
    known = {value for fields in decode.CHOICES.values() for values in fields.values() for value in values}
    compared: set[str] = set()
    for name in RENDERERS:
        tree = ast.parse((REPO / "gpuwatch" / "cli" / name).read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Compare) and _is_state(node.left):
                for right in node.comparators:
                    compared |= {c.value for c in ast.walk(right) if isinstance(c, ast.Constant)
                                 and isinstance(c.value, str)}
            if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "PHASE_COLOURS"
                                                    for t in node.targets):
                assert isinstance(node.value, ast.Dict)
                compared |= {k.value for k in node.value.keys if isinstance(k, ast.Constant)}
    assert {"failsafe", "unavailable", "limiting", "failed", "paused"} <= compared  # the walk finds them
    assert compared <= known, compared - known


def _is_state(node: ast.expr) -> bool:
    name = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else ""
    return name in ("mode", "phase")
