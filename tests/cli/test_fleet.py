"""`status --remote`'s table, exit code and JSON (gpuwatch/cli/fleet.py): pure, from fixed documents."""

from __future__ import annotations

import copy
import re

import pytest

from gpuwatch.cli import fleet
from gpuwatch.cli.remote import HostResult
from gpuwatch.publish.document import StatusDocument, to_document
from tests.support.published import GPU_A, GPU_B, GPU_GONE, NOW_UNIX, example_state


@pytest.fixture(scope="module")
def example(tmp_path_factory: pytest.TempPathFactory) -> StatusDocument:
    return to_document(example_state(tmp_path_factory.mktemp("fleet") / "sys"), "daemon")


@pytest.fixture
def troubled(example: StatusDocument) -> StatusDocument:
    """The example state: a failing daemon part, a fan in failsafe and stalled, a gone GPU, trainers."""
    return copy.deepcopy(example)


@pytest.fixture
def healthy(troubled: StatusDocument) -> StatusDocument:
    doc = copy.deepcopy(troubled)
    assert doc["daemon"]
    doc["daemon"]["failures"] = []
    doc["gpus"] = [g for g in doc["gpus"] if g["gpu_id"] == GPU_A]
    doc["trainers"] = [t for t in doc["trainers"] if t["name"] == "resnet"]
    return doc


def rows(text: str) -> list[list[str]]:
    return [re.split(r"\s{2,}", line.strip()) for line in text.splitlines()[2:]]


def test_one_row_per_gpu_of_every_host_and_one_per_unreadable_host(healthy: StatusDocument,
                                                                   troubled: StatusDocument) -> None:
    results = [HostResult("http://box1:9840", healthy), HostResult("http://box2:9840", troubled),
               HostResult("http://box3:9840", None, "unreachable: connection refused")]
    text = fleet.render(results, NOW_UNIX)
    assert text.splitlines()[0].endswith("3 hosts, 4 GPUs, 1 unreadable")
    assert text.splitlines()[1].split() == list(fleet.HEADER)
    table = rows(text)
    by_host_gpu = {(r[0], r[1]): r for r in table}
    box1 = by_host_gpu[("box1:9840", GPU_A)]
    assert box1[-1] == "ok" and box1[-2] == "resnet running" and box1[2:7] == ["59", "56", "54", "0rpm 0%", "36W"]
    box2_b = by_host_gpu[("box2:9840", GPU_B)]
    assert box2_b[-1] == "fan failsafe; FAN STALLED"
    assert box2_b[-2] == "resnet running, bert paused, vit backoff"
    assert by_host_gpu[("box2:9840", GPU_GONE)][-1] == "DOWN"
    assert ["box2:9840", *["-"] * 7, "FAILURE fan controller: OSError: [Errno 5] EIO"] in table
    assert ["box3:9840", *["-"] * 7, "ERROR unreachable: connection refused"] in table
    assert "\033[" not in text


def test_trainers_without_gpus_are_on_every_gpu(troubled: StatusDocument) -> None:
    vit = next(t for t in troubled["trainers"] if t["name"] == "vit")
    assert vit["gpus"] == []
    assert "vit backoff" in fleet.render([HostResult("http://box2:9840", troubled)], NOW_UNIX).splitlines()[2]


@pytest.mark.parametrize(("case", "expected"), [
    ("healthy", 0),
    ("troubled", 1),  # daemon failure, failsafe, gone GPU
    ("unreadable", 1),  # a machine nobody can see is an alarm
    ("stale", 1),  # /healthz says the loop is stuck
    ("healthy+unreadable", 1),
    ("none", 0),
])
def test_exit_code(case: str, expected: int, healthy: StatusDocument, troubled: StatusDocument) -> None:
    results = {
        "healthy": [HostResult("http://a", healthy)],
        "troubled": [HostResult("http://a", troubled)],
        "unreadable": [HostResult("http://a", None, "timeout after 3s")],
        "stale": [HostResult("http://a", healthy, stale="last sample is 30.0s old: the control loop is stuck")],
        "healthy+unreadable": [HostResult("http://a", healthy), HostResult("http://b", None, "HTTP 404: not found")],
        "none": [],
    }[case]
    assert fleet.fleet_exit_code(results) == expected


def test_staleness_is_a_row_and_only_from_the_host_not_from_our_clock(healthy: StatusDocument) -> None:
    old = copy.deepcopy(healthy)
    old["taken_unix"] = NOW_UNIX - 86400  # a day behind our clock: skew, not staleness
    assert fleet.fleet_exit_code([HostResult("http://a:1", old)]) == 0
    text = fleet.render([HostResult("http://a:1", healthy, stale="last sample is 30.0s old")], NOW_UNIX)
    assert ["a:1", *["-"] * 7, "STALE last sample is 30.0s old"] in rows(text)


def test_held_training_is_yellow_and_problems_red(healthy: StatusDocument, troubled: StatusDocument) -> None:
    paused = copy.deepcopy(healthy)
    paused["trainers"][0]["phase"] = "paused"
    text = fleet.render([HostResult("http://a:1", paused), HostResult("http://b:1", troubled)], NOW_UNIX, color=True)
    assert f"{fleet.YELLOW}ok, training paused{fleet.RESET}" in text
    assert f"{fleet.RED}DOWN{fleet.RESET}" in text


def test_json_has_every_host_with_its_document_or_error(healthy: StatusDocument) -> None:
    doc = fleet.to_json([HostResult("http://box1:9840", healthy),
                         HostResult("http://box3:9840", None, "timeout after 3s")], NOW_UNIX)
    assert doc["schema"] == 1 and doc["exit_code"] == 1 and doc["taken_unix"] == NOW_UNIX
    one, three = doc["hosts"]
    assert one == {"host": "box1:9840", "url": "http://box1:9840", "exit_code": 0, "error": None, "stale": None,
                   "status": healthy}
    assert three["status"] is None and three["error"] == "timeout after 3s" and three["exit_code"] == 1
