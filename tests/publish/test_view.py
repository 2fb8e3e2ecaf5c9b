"""The one tolerant decoder (publish/view.py): a document decodes back into the very dataclasses it was encoded
from; unknown keys are ignored, missing ones take None or their default, a value a dataclass cannot hold is one
line naming it."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from gpuwatch.publish.decode import Invalid, document
from gpuwatch.publish.document import to_document
from gpuwatch.publish.view import status_view
from tests.support.published import example_state


def test_a_document_decodes_into_the_states_it_was_built_from(tmp_path: Path) -> None:
    state = example_state(tmp_path / "sys")
    view = status_view(document(json.loads(json.dumps(to_document(state, "daemon")))))
    assert view.daemon == state.daemon and view.trainers == state.trainers and view.jobs == state.jobs
    assert view.processes == state.snapshot.processes and view.health is not None and state.health is not None
    assert view.health.faults == state.health.faults
    for gpu in view.gpus:
        assert gpu.fan_controller == next((f for f in state.fans if f.gpu_id == gpu.gpu_id), None)
        assert gpu.power_governor == next((p for p in state.powers if p.gpu_id == gpu.gpu_id), None)
        assert gpu.clock_ceiling == next((c for c in state.clocks if c.gpu_id == gpu.gpu_id), None)
        assert gpu.reset == next((r for r in state.snapshot.resets if r.gpu_id == gpu.gpu_id), None)
        reading = state.snapshot.gpu(gpu.gpu_id)
        assert reading is not None and (gpu.throttled_s, gpu.errors) == (reading.throttled_s, reading.errors)
        assert {label: t.limit_c for label, t in gpu.temperatures.items()} == {
            t.label: state.limit_c(gpu.gpu_id, t.label) for t in reading.temps}


def test_unknown_keys_are_ignored_and_missing_ones_are_none_or_their_default(tmp_path: Path) -> None:
    raw = to_document(example_state(tmp_path / "sys"), "daemon")
    raw["from_a_newer_daemon"] = 1
    gpu = raw["gpus"][0]
    gpu["new_reading"] = {"x": 1}
    del gpu["power_w"], gpu["up"]
    trainer = raw["trainers"][0]
    del trainer["restarts_total"], trainer["phase"]
    view = status_view(raw)
    assert view.gpus[0].power_w is None and view.gpus[0].up is True
    assert view.trainers[0].restarts_total == 0 and view.trainers[0].phase is None


@pytest.mark.parametrize(("where", "says"), [
    (("gpus", 0, "fan_controller", "mode"), "the document.gpus[0].fan_controller.mode is 'spinning', not one of"),
    (("trainers", 0, "phase"), "the document.trainers[0].phase is 'spinning', not one of"),
    (("gpus", 0, "backend"), "the document.gpus[0].backend is 'spinning', not one of"),
])
def test_a_value_its_dataclass_cannot_hold_is_one_line(tmp_path: Path, where: tuple[str | int, ...],
                                                       says: str) -> None:
    raw = copy.deepcopy(to_document(example_state(tmp_path / "sys"), "daemon"))
    part = raw
    for key in where[:-1]:
        part = part[key]
    assert part is not None
    part[where[-1]] = "spinning"
    with pytest.raises(Invalid) as refused:
        status_view(raw)
    assert str(refused.value).startswith(says) and "\n" not in str(refused.value)
