"""gpuwatch.deadline: a round of per-key calls on one runner, waited on with a deadline; a stuck key never blocks
the caller twice, nor the round's other keys past its allowance."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from gpuwatch import deadline
from gpuwatch.actuation.actuator import Actuator, ActuatorKind
from gpuwatch.deadline import Late, Workers
from tests.support.waiting import wait_for


def _runners(prefix: str) -> list[threading.Thread]:
    """The threads of a ``Workers`` named ``prefix``: idle (``prefix``) or inside a key's call."""
    return [t for t in threading.enumerate() if t.name == prefix or t.name.startswith(f"{prefix}-")]


class Stuck:
    """Calls that hang until released (a sysfs read the driver never answers), each saying when it started."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.started: dict[str, float] = {}

    def call(self, key: str) -> Callable[[], str]:
        def stuck() -> str:
            self.started[key] = time.monotonic()
            self.release.wait(60)
            return f"late {key}"
        return stuck


@pytest.mark.parametrize("keys", ["a", "ab", "abcdefgh", "hgfedcba"])
def test_a_rounds_calls_run_in_order_on_one_thread_and_return_their_values(keys: str) -> None:
    ran: list[tuple[str, int]] = []

    def call(key: str) -> Callable[[], str]:
        return lambda: ran.append((key, threading.get_ident())) or key.upper()  # type: ignore[func-returns-value]

    workers = Workers("t-order")
    for _ in range(3):
        ran.clear()
        assert workers.run_all({key: call(key) for key in keys}, 30.0) == {key: key.upper() for key in keys}
        assert [key for key, _ in ran] == list(keys)
        assert len({ident for _, ident in ran}) == 1 and ran[0][1] != threading.get_ident()


def test_the_calls_of_a_run_never_overlap() -> None:
    """One call at a time (eight threads reading at once fought over the GIL at every syscall)."""
    guard = threading.Lock()
    running, most = [0], [0]

    def call() -> None:
        with guard:
            running[0] += 1
            most[0] = max(most[0], running[0])
        time.sleep(0.01)
        with guard:
            running[0] -= 1

    Workers("t").run_all(dict.fromkeys("abcdef", call), 60.0)
    assert most == [1]


@pytest.mark.parametrize(("keys", "stuck", "late"), [
    ("abc", "a", "a"),  # the first call hangs: the other two go on on another runner
    ("abc", "b", "b"),
    ("abc", "c", "c"),  # the last hangs: nothing to move, the round ends at the deadline
    ("abcde", "ac", "ac"),  # two hang: each costs the ones after it one allowance
    ("abcdefg", "abcd", "abcdefg"),  # four allowances are the deadline: e, f, g are never started
])
def test_a_hung_call_holds_the_others_up_by_its_allowance_at_most(keys: str, stuck: str, late: str) -> None:
    deadline_s = 2.0
    allowance_s = deadline_s * deadline.CALL_SHARE
    hung = Stuck()
    started: dict[str, float] = {}
    threads: dict[str, str] = {}

    def quick(key: str) -> Callable[[], str]:
        def call() -> str:
            started[key] = time.monotonic()
            threads[key] = threading.current_thread().name
            return key
        return call

    workers = Workers("t-hung")
    calls = {key: hung.call(key) if key in stuck else quick(key) for key in keys}
    try:
        begun = time.monotonic()
        results = workers.run_all(calls, deadline_s)
        assert time.monotonic() - begun < deadline_s + 5.0  # returned by its deadline (plus a loaded machine's slack)
        assert {key for key, result in results.items() if isinstance(result, Late)} == set(late)
        assert all(results[key] == key for key in keys if key not in late)
        assert all(threads[key] == f"t-hung-{key}" for key in started)  # py-spy says whose it is
        for key, at in started.items():  # each waited out the allowance of every hung call before it, no more
            before = [hung.started[s] for s in stuck if keys.index(s) < keys.index(key)]
            assert all(at - s >= allowance_s for s in before)
        assert all(workers.busy(key) for key in stuck)
        assert not any(workers.busy(key) for key in keys if key not in stuck)  # never started: free again
    finally:
        hung.release.set()
    wait_for(lambda: not any(workers.busy(key) for key in keys), "the hung calls to return")
    assert set(started) == set(keys) - set(late)  # a call not started by the deadline never runs later
    assert workers.run_all({key: quick(key) for key in keys}, 30.0) == {key: key for key in keys}


def test_a_stuck_key_is_late_and_not_called_again_until_it_returns() -> None:
    release = threading.Event()
    calls: list[str] = []

    def stuck() -> str:
        calls.append("stuck")
        release.wait(30)
        return "late answer"

    workers = Workers("t")
    try:
        first = workers.run_all({"a": stuck, "b": lambda: "b"}, 0.2)
        assert isinstance(first["a"], Late) and first["b"] == "b"  # the other key is not held up
        second = workers.run_all({"a": stuck, "b": lambda: "b"}, 30.0)  # returns at once: no new call queued
        assert isinstance(second["a"], Late) and second["a"].running_s >= first["a"].running_s
        assert calls == ["stuck"] and workers.busy("a")
    finally:
        release.set()
    wait_for(lambda: not workers.busy("a"), "the stuck call to return")
    assert workers.run_all({"a": lambda: "again"}, 5.0) == {"a": "again"}


def test_a_late_result_never_lands_in_a_later_round() -> None:
    """The late call of an earlier run, returning while a later run waits, neither ends that wait (the later
    run's call is not reported Late while it still runs) nor answers for its key in that run."""
    release = threading.Event()

    def stuck() -> str:
        release.wait(30)
        return "late answer"

    def slow() -> str:
        release.set()
        wait_for(lambda: not workers.busy("a"), "the earlier run's late call to return")
        return "b"

    workers = Workers("t")
    try:
        assert isinstance(workers.run_all({"a": stuck}, 0.1)["a"], Late)
        second = workers.run_all({"a": lambda: "fresh", "b": slow}, 60.0)
        assert isinstance(second["a"], Late) and second["b"] == "b"
        assert workers.run_all({"a": lambda: "fresh"}, 5.0) == {"a": "fresh"}
    finally:
        release.set()


@pytest.mark.parametrize(("raising", "raised"), [("a", "a"), ("b", "b"), ("ac", "a"), ("abc", "a")])
def test_an_exception_is_its_calls_own(raising: str, raised: str) -> None:
    """Every call runs whatever another raised; the first raising key's exception (in the calls' order) reaches
    the caller once all were waited on."""
    ran: list[str] = []

    def call(key: str) -> Callable[[], str]:
        def run() -> str:
            ran.append(key)
            if key in raising:
                raise ValueError(f"bug in {key}")
            return key
        return run

    workers = Workers("t")
    with pytest.raises(ValueError, match=f"bug in {raised}"):
        workers.run_all({key: call(key) for key in "abc"}, 30.0)
    assert ran == list("abc") and not any(workers.busy(key) for key in "abc")
    assert workers.run_all({"a": lambda: "fine"}, 30.0) == {"a": "fine"}


def test_no_thread_is_left_behind_over_a_thousand_rounds() -> None:
    """One runner serves every round; a hang adds one, and the spares are bounded."""
    workers = Workers("t-leak")
    calls = {f"gpu{i}": (lambda i=i: i) for i in range(8)}
    before = threading.active_count()
    for _ in range(1000):
        assert workers.run_all(calls, 30.0) == {f"gpu{i}": i for i in range(8)}
    assert threading.active_count() <= before + 1 and len(_runners("t-leak")) == 1
    hung = Stuck()
    try:
        for round_no in range(20):  # a key hangs every round until released: each is skipped while busy
            workers.run_all({**calls, f"stuck{round_no % 3}": hung.call(str(round_no))}, 0.2)
        assert len(_runners("t-leak")) <= 1 + 3  # one runner per hung call, no more
    finally:
        hung.release.set()
    wait_for(lambda: len(_runners("t-leak")) <= deadline.SPARE_RUNNERS, "the spares beyond the bound to end")
    for _ in range(100):
        workers.run_all(calls, 30.0)
    assert len(_runners("t-leak")) <= deadline.SPARE_RUNNERS


def test_idle_runners_end_and_come_back(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(deadline, "IDLE_EXIT_S", 0.05)
    workers = Workers("gpuwatch-idle-test")
    assert workers.run_all({"a": lambda: 1}, 5.0) == {"a": 1}
    wait_for(lambda: not _runners("gpuwatch-idle-test"), "the idle runner to end")
    assert workers.run_all({"a": lambda: 2}, 5.0) == {"a": 2}


@pytest.mark.parametrize("already_stuck", [False, True])
def test_a_restore_stuck_on_one_gpu_hands_the_others_back(tmp_path: Path, already_stuck: bool) -> None:
    """A give-back that hangs (or a GPU whose step hung before the restore) costs the other GPUs nothing."""
    release = threading.Event()

    def give_back(gpu_id: str, stored: Mapping[str, Any]) -> str:
        if gpu_id == "b":
            release.wait(60)
        return "handed back"

    class Record:
        def to_json(self) -> dict[str, Any]:
            return {"backend": "test"}

    actuator: Actuator[Any] = Actuator(ActuatorKind("clock", give_back), tmp_path, deadline_s=2.0)
    for gpu in "abc":
        actuator.record(gpu, Record())  # type: ignore[arg-type]
    try:
        if already_stuck:
            assert isinstance(actuator.run({"b": lambda: release.wait(60)})["b"], Late)
        result = actuator.restore_all()
        assert result.done == ["a: handed back", "c: handed back"]
        (problem,) = result.problems
        assert problem.startswith("b: clock writes blocked") and set(actuator.recorded()) == {"b"}
    finally:
        release.set()
        wait_for(lambda: not actuator.busy("b"), "the stuck give-back to return")
        actuator.file.clear()
