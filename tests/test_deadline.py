"""gpuwatch.deadline: per-key workers waited on with a deadline; a stuck key never blocks the caller twice."""

from __future__ import annotations

import threading
import time

import pytest

from gpuwatch import deadline
from gpuwatch.deadline import Late, Workers
from tests.support.waiting import wait_for


def test_calls_return_their_values_per_key() -> None:
    assert Workers("t").run_all({"a": lambda: 1, "b": lambda: "two"}, 5.0) == {"a": 1, "b": "two"}


def test_the_calls_of_a_run_take_turns() -> None:
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


def test_a_late_call_that_returns_during_a_later_run_lets_only_its_own_run_go() -> None:
    """Each run_all waits for its own calls: the late one of an earlier run, returning while a later run waits,
    does not end that wait (the later run's call is not reported Late while it still runs)."""
    release, started = threading.Event(), threading.Event()

    def stuck() -> str:
        release.wait(30)
        return "late answer"

    def slow() -> str:
        started.set()
        wait_for(lambda: not workers.busy("a"), "the earlier run's late call to return")
        return "b"

    workers = Workers("t")
    try:
        assert isinstance(workers.run_all({"a": stuck}, 0.1)["a"], Late)
        threading.Thread(target=lambda: (started.wait(30), release.set()), daemon=True).start()
        assert workers.run_all({"b": slow}, 60.0) == {"b": "b"}
    finally:
        release.set()


def test_a_call_that_raises_raises_in_the_caller() -> None:
    def broken() -> None:
        raise ValueError("bug")

    with pytest.raises(ValueError, match="bug"):
        Workers("t").run_all({"a": broken}, 5.0)


def test_idle_workers_end_and_come_back(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(deadline, "IDLE_EXIT_S", 0.05)
    workers = Workers("gpuwatch-idle-test")
    assert workers.run_all({"a": lambda: 1}, 5.0) == {"a": 1}
    wait_for(lambda: not any(t.name == "gpuwatch-idle-test-a" for t in threading.enumerate()), "the idle worker to end")
    assert workers.run_all({"a": lambda: 2}, 5.0) == {"a": 2}
