"""One attached run's pure step (supervise/attached.py): what each tick decides and sends, and the names."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpuwatch.attach import Event
from gpuwatch.config.sections import AttachedConfig
from gpuwatch.model import TrainerPhase
from gpuwatch.supervise.actions import Thermal
from gpuwatch.supervise.attached import (
    RunInputs,
    RunState,
    reattached,
    sanitize,
    start,
    step,
    unique_name,
)

CONFIG = AttachedConfig(debounce_s=5.0, min_pause_s=30.0, hang_timeout_s=100.0)
HOT = Thermal(hot=True, cool=False, reason="hot: 0000:28:00.0 junction 101°C >= 100°C")
WARM = Thermal(hot=False, cool=False)  # below the limit, not yet below limit - hysteresis
CRIT = Thermal(hot=True, cool=False, critical=True, reason="emergency: 0000:28:00.0 junction 110°C at crit 110°C")
RUNNING = start(0.0)


def _run(state: RunState, *ticks: RunInputs) -> tuple[RunState, list[list[str]]]:
    sent = []
    for inputs in ticks:
        state, events = step(state, CONFIG, inputs)
        sent.append([e.event for e in events])
    return state, sent


def test_hot_pauses_after_the_debounce_then_acknowledged_then_resumes_once_cool_and_long_enough() -> None:
    state, sent = _run(RUNNING, RunInputs(1.0, HOT), RunInputs(5.0, HOT), RunInputs(6.0, HOT),
                       RunInputs(7.0, HOT, acknowledged=True), RunInputs(20.0, Thermal()),
                       RunInputs(36.0, WARM, acknowledged=True), RunInputs(37.0, Thermal(), acknowledged=True))
    assert sent == [[], [], ["pause"], [], [], [], ["resume"]]
    assert state.phase is TrainerPhase.RUNNING and (state.pauses_total, state.resumes_total) == (1, 1)


def test_the_pause_event_carries_the_verdicts_reason() -> None:
    _, events = step(replace(RUNNING, hot_since=0.0), CONFIG, RunInputs(5.0, HOT))
    assert events == [Event("pause", HOT.reason)]


def test_crit_pauses_at_once() -> None:
    state, events = step(RUNNING, CONFIG, RunInputs(1.0, CRIT))
    assert events == [Event("pause", CRIT.reason)] and state.phase is TrainerPhase.PAUSING


def test_the_governors_backstop_delays_the_pause() -> None:
    governed = replace(HOT, governed_backstop_s=60.0)
    _, sent = _run(RUNNING, RunInputs(1.0, governed), RunInputs(30.0, governed), RunInputs(61.0, governed))
    assert sent == [[], [], ["pause"]]


@pytest.mark.parametrize(("paused", "reason", "manual"), [(True, "hot: x", False), (True, "manual pause", True)])
def test_a_reattach_holding_the_pause_keeps_it_until_cool_and_min_pause(paused: bool, reason: str,
                                                                        manual: bool) -> None:
    state = start(100.0, paused, reason)
    assert state.phase is TrainerPhase.PAUSING and state.manual_pause is manual
    state, sent = _run(state, RunInputs(101.0, HOT, acknowledged=True), RunInputs(110.0, Thermal()),
                       RunInputs(131.0, Thermal()))
    assert state.phase is (TrainerPhase.PAUSED if manual else TrainerPhase.RUNNING)
    assert sent == [[], [], [] if manual else ["resume"]]


def test_manual_pause_is_released_only_by_resume() -> None:
    state, sent = _run(RUNNING, RunInputs(1.0, command="pause"), RunInputs(100.0, Thermal()),
                       RunInputs(101.0, command="resume"))
    assert sent == [["pause"], [], ["resume"]]


def test_hung_once_per_silence_and_only_after_a_heartbeat() -> None:
    never_beat, sent = _run(RUNNING, RunInputs(200.0))
    assert sent == [[]] and never_beat.reason == "attached"
    state, sent = _run(RUNNING, RunInputs(1.0, steps_total=5, heartbeat_seen=True),
                       RunInputs(101.0, steps_total=5, heartbeat_seen=True),
                       RunInputs(150.0, steps_total=5, heartbeat_seen=True),
                       RunInputs(151.0, steps_total=6, heartbeat_seen=True),
                       RunInputs(251.0, steps_total=6, heartbeat_seen=True))
    assert sent == [[], ["hung"], [], [], ["hung"]]
    assert state.phase is TrainerPhase.RUNNING and state.reason == "hung: no step for 100s"


def test_a_held_run_is_never_hung() -> None:
    state, sent = _run(RUNNING, RunInputs(1.0, steps_total=1, heartbeat_seen=True, command="pause"),
                       RunInputs(500.0, steps_total=1, heartbeat_seen=True, acknowledged=True))
    assert sent == [["pause"], []] and state.phase is TrainerPhase.PAUSED


@pytest.mark.parametrize(("before", "code", "signalled", "phase", "reason"), [
    (RUNNING, 0, None, TrainerPhase.FINISHED, "finished"),
    (RUNNING, 3, None, TrainerPhase.FAILED, "failed: exit 3"),
    (RUNNING, -9, None, TrainerPhase.FAILED, "failed: exit -9"),  # killed, not by its wrapper: a failure
    (replace(RUNNING, phase=TrainerPhase.STOPPING), -15, None, TrainerPhase.STOPPED, "stopped (exit -15)"),
    # Its user's Ctrl-C (or a kill of the wrapper), passed on by the wrapper: ended on purpose.
    (RUNNING, -2, 2, TrainerPhase.STOPPED, "stopped by its user: SIGINT (exit -2)"),
    (replace(RUNNING, phase=TrainerPhase.PAUSED), 1, 15, TrainerPhase.STOPPED, "stopped by its user: SIGTERM (exit 1)"),
    (RUNNING, 0, 2, TrainerPhase.STOPPED, "stopped by its user: SIGINT (exit 0)"),
])
def test_exits(before: RunState, code: int, signalled: int | None, phase: TrainerPhase, reason: str) -> None:
    state, events = step(before, CONFIG, RunInputs(9.0, exit_code=code, exit_signal=signalled))
    assert (state.phase, state.reason, state.last_exit_code, state.ended, events) == (phase, reason, code, 9.0, [])


def test_stop_is_sent_and_the_exit_then_ends_it_stopped() -> None:
    state, sent = _run(RUNNING, RunInputs(1.0, command="stop"), RunInputs(2.0, HOT), RunInputs(3.0, exit_code=0))
    assert sent == [["stop"], [], []] and state.phase is TrainerPhase.STOPPED


def test_a_session_gone_while_the_pid_lives_is_detached_then_gone_with_the_pid() -> None:
    state, sent = _run(RUNNING, RunInputs(1.0, HOT, connected=False), RunInputs(10.0, HOT, connected=False))
    assert sent == [[], []] and state.phase is TrainerPhase.RUNNING and state.reason.startswith("detached")
    state, _ = step(state, CONFIG, RunInputs(11.0, connected=False, alive=False))
    assert state.phase is TrainerPhase.FAILED and state.reason.startswith("gone") and state.ended == 11.0


def test_names_sanitized_and_unique() -> None:
    assert sanitize("my job!") == "my-job"
    assert sanitize("../../etc") == "etc"
    assert sanitize("ü" * 10) == "run"
    assert len(sanitize("x" * 500)) == 64
    assert unique_name("train", {"train", "train-2"}) == "train-3"
    assert unique_name("x" * 64, {"x" * 64}) == "x" * 62 + "-2"


PAUSED = replace(RUNNING, phase=TrainerPhase.PAUSED, paused_since=3.0, pauses_total=2, resumes_total=1)


@pytest.mark.parametrize(("before", "paused", "phase", "paused_since"), [
    (RUNNING, False, TrainerPhase.RUNNING, None),  # both agree: the daemon's state stays
    (PAUSED, True, TrainerPhase.PAUSED, 3.0),
    (PAUSED, False, TrainerPhase.RUNNING, None),  # the wrapper let go without a daemon: decided afresh
    (RUNNING, True, TrainerPhase.PAUSING, 50.0),  # the wrapper holds: held until cool and min_pause_s
])
def test_a_known_run_reattached_follows_the_pause_its_wrapper_holds(before: RunState, paused: bool,
                                                                    phase: TrainerPhase,
                                                                    paused_since: float | None) -> None:
    after = reattached(before, 50.0, paused, "hot: x" if paused else None)
    assert (after.phase, after.paused_since) == (phase, paused_since)
    assert (after.pauses_total, after.resumes_total) == (before.pauses_total, before.resumes_total)


def test_a_detached_run_decides_nothing() -> None:
    state, sent = _run(replace(RUNNING, hot_since=0.0), RunInputs(10.0, HOT, connected=False, command="pause"))
    assert sent == [[]] and state.phase is TrainerPhase.RUNNING
