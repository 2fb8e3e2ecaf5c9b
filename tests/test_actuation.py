"""The one actuation layer (gpuwatch/actuation.py): records before writes, the restore-all every exit path
uses, its outcomes per GPU, and the registry of actuator kinds in the composition root."""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from gpuwatch.actuation.actuator import Actuator, ActuatorKind, Gone, Handback, NotHandedBack, Stuck, restore_file_path
from gpuwatch.config.file import parse_config
from gpuwatch.daemon.compose import actuator_kinds, restore_all
from gpuwatch.deadline import Late
from gpuwatch.fan.pwm1 import Pwm1Restore
from gpuwatch.sim.tree import FakeSysfsTree
from tests.support.trees import capture


class Kind:
    """An actuator kind whose give-back answers what ``outcomes`` says per GPU."""

    def __init__(self, outcomes: dict[str, str | Exception]) -> None:
        self.outcomes = outcomes
        self.fallbacks: list[set[str] | None] = []

    def give_back(self, gpu_id: str, stored: Mapping[str, Any]) -> str:
        outcome = self.outcomes[gpu_id]
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    def without_records(self, result: Handback, only: set[str] | None) -> None:
        self.fallbacks.append(only)

    def kind(self) -> ActuatorKind:
        return ActuatorKind("clock", self.give_back, self.without_records)


def _record(backend: str = "test") -> Any:
    class Record:
        def to_json(self) -> dict[str, Any]:
            return {"backend": backend, "value": 1}

        def handed_back(self) -> str:
            return "as found"

    return Record()


def test_restore_all_outcomes_per_gpu(tmp_path: Path) -> None:
    kind = Kind({"a": "handed back", "b": NotHandedBack("EIO"), "c": Gone("ENOENT")})
    actuator = Actuator(kind.kind(), tmp_path, deadline_s=5.0)
    for gpu in "abc":
        actuator.record(gpu, _record())
    assert actuator.file.path == tmp_path / "clock-restore.json"
    result = actuator.restore_all(without_records=True)
    assert result.done == ["a: handed back"] and result.problems == ["b: EIO"]
    assert set(actuator.recorded()) == {"b"}  # kept for gpuwatch restore to try again
    assert kind.fallbacks == [{"c"}]  # the gone GPU may be back at a new place
    actuator.file.clear()  # nothing left for the restore at exit


def test_no_record_runs_the_fallback_for_every_gpu_in_gpuwatch_restore_only(tmp_path: Path) -> None:
    """`gpuwatch restore` after a crash hands back what no record covers; the daemon's own shutdown and its
    restore at exit give back only what it recorded (a fan another tool drives stays that tool's)."""
    kind = Kind({})
    actuator = Actuator(kind.kind(), tmp_path, deadline_s=5.0)
    assert actuator.restore_all() == Handback() and kind.fallbacks == []
    assert actuator.restore_all(without_records=True) == Handback() and kind.fallbacks == [None]


def test_an_unknown_record_is_a_problem_and_kept(tmp_path: Path) -> None:
    actuator = Actuator(Kind({}).kind(), tmp_path, deadline_s=5.0)
    actuator.file.add("a", {"no": "backend"})
    (problem,) = actuator.restore_all().problems
    assert problem.startswith("a: unknown clock restore record") and "a" in actuator.recorded()
    actuator.file.clear()


def test_a_stuck_give_back_costs_one_deadline(tmp_path: Path) -> None:
    release = threading.Event()

    def stuck(gpu_id: str, stored: Mapping[str, Any]) -> str:
        release.wait(30)
        return "late"

    actuator = Actuator(ActuatorKind("clock", stuck), tmp_path, deadline_s=0.2)
    actuator.record("a", _record())
    try:
        (problem,) = actuator.restore_all().problems
        assert "clock writes blocked" in problem and "a" in actuator.recorded()
    finally:
        release.set()
        actuator.file.clear()


def test_the_first_record_wins_unless_adopted(tmp_path: Path) -> None:
    actuator = Actuator(Kind({}).kind(), tmp_path, deadline_s=5.0)
    first = actuator.record("a", _record())
    assert actuator.record("a", _record()) == first
    merged = actuator.record("a", _record(), adopt=lambda old: {**old, "value": 2})
    assert merged["value"] == 2 and actuator.recorded()["a"]["value"] == 2
    actuator.file.clear()


def test_a_surprise_in_one_give_back_costs_the_others_nothing(tmp_path: Path) -> None:
    kind = Kind({"a": "handed back", "b": KeyError("bug")})
    actuator = Actuator(kind.kind(), tmp_path, deadline_s=5.0)
    actuator.record("a", _record())
    actuator.record("b", _record())
    result = actuator.restore_all()
    assert result.done == ["a: handed back"] and result.problems == ["b: KeyError: 'bug'"]
    actuator.file.clear()


def test_restore_all_gives_back_every_actuators_records(tmp_path: Path) -> None:
    """`gpuwatch restore` (compose.restore_all): the fan's and the cap's records in one call, by slot."""
    tree = FakeSysfsTree(tmp_path / "sys")
    card = tree.add_capture(capture("navi21-rx6900xt-sapphire-nitro"))
    assert card.hwmon_dir
    tree.write(f"{card.hwmon_dir}/pwm1_enable", "1\n")
    tree.write(f"{card.hwmon_dir}/power1_cap", "200000000\n")
    config = parse_config({"sysfs_root": str(tree.root), "runtime_dir": str(tmp_path / "run")})
    run = config.resolved_runtime_dir
    fan = Actuator(actuator_kinds(config)[0], run, 1.0)
    fan.record(card.pci_slot, Pwm1Restore(f"{card.hwmon_dir}/pwm1_enable", 2))
    Actuator(actuator_kinds(config)[1], run, 1.0).file.add(card.pci_slot, {"backend": "hwmon", "cap_uw": 289_000_000})
    result = restore_all(config)
    assert result.problems == []
    assert result.done == [f"{card.pci_slot}: fan handed back to the firmware (pwm1_enable 2, automatic)",
                           f"{card.pci_slot}: power cap back to its original 289 W"]
    assert (tree.root / card.hwmon_dir / "pwm1_enable").read_text().strip() == "2"
    assert (tree.root / card.hwmon_dir / "power1_cap").read_text().strip() == "289000000"
    assert not list(run.glob("*-restore.json"))


def test_every_kind_has_its_own_file() -> None:
    names = [kind.name for kind in actuator_kinds(parse_config({}))]
    assert names == ["fan", "power", "clock"] and len(set(names)) == len(names)


def test_restore_file_path_is_per_actuator(tmp_path: Path) -> None:
    assert restore_file_path(tmp_path, "fan") == tmp_path / "fan-restore.json"


def test_a_stuck_step_is_logged_once_per_episode(caplog: pytest.LogCaptureFixture) -> None:
    """``Stuck`` (the caps' and the clock's controllers): a GPU's step late tick after tick is one episode,
    logged once as it starts and once as the writes answer again; the other GPU's ticks say nothing."""
    stuck = Stuck(logging.getLogger("gpuwatch.clock"), "clock ceiling")
    ticks: list[dict[str, str | Late]] = [
        {"a": "ok", "b": "ok"}, {"a": Late(0.2), "b": "ok"}, {"a": Late(1.4), "b": "ok"}, {"a": "ok", "b": "ok"},
        {"a": Late(0.3), "b": "ok"},
    ]
    with caplog.at_level(logging.INFO, "gpuwatch.clock"):
        results = [stuck.results(ran, lambda gpu_id, reason: f"{gpu_id}: {reason}") for ran in ticks]
    assert [r["a"] for r in results] == ["ok", "a: clock ceiling writes blocked for 0.2 s",
                                         "a: clock ceiling writes blocked for 1.4 s", "ok",
                                         "a: clock ceiling writes blocked for 0.3 s"]
    assert all(r["b"] == "ok" for r in results) and all(list(r) == ["a", "b"] for r in results)
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        ("ERROR", "GPU a: clock ceiling writes blocked for 0.2 s; a hot card is paused instead"),
        ("WARNING", "GPU a: clock ceiling writes answer again"),
        ("ERROR", "GPU a: clock ceiling writes blocked for 0.3 s; a hot card is paused instead"),
    ]
