"""An attached run its user suspended (Ctrl-Z on `gpuwatch train`): supervise/attached.py's SUSPENDED, as a table."""

from __future__ import annotations

import signal

import pytest

from gpuwatch.model import TrainerPhase
from gpuwatch.supervise.attached import RunInputs, start, step
from tests.supervise.test_attached import CONFIG, HOT, _run

TSTP = int(signal.SIGTSTP)
STEPPED = step(start(0.0), CONFIG, RunInputs(1.0, steps_total=5, heartbeat_seen=True))[0]  # a run that made steps


def test_a_suspended_run_is_suspended_never_hung_however_long_then_running_with_a_fresh_hang_timer() -> None:
    state, sent = _run(STEPPED, RunInputs(2.0, steps_total=5, suspended=TSTP), RunInputs(500.0, steps_total=5,
                       suspended=TSTP), RunInputs(5000.0, steps_total=5, suspended=TSTP))
    assert sent == [[], [], []] and state.phase is TrainerPhase.SUSPENDED and not state.hung
    assert state.reason == "suspended by its user: SIGTSTP (fg, bg or kill -CONT of its wrapper continue it)"
    state, sent = _run(state, RunInputs(5001.0, steps_total=5), RunInputs(5050.0, steps_total=5),
                       RunInputs(5101.0, steps_total=5))
    assert state.reason == "hung: no step for 100s" and sent == [[], [], ["hung"]]  # judged from the continue


def test_without_the_suspension_the_same_silence_is_a_hang() -> None:
    _, sent = _run(STEPPED, RunInputs(2.0, steps_total=5), RunInputs(500.0, steps_total=5))
    assert sent == [[], ["hung"]]


def test_continued_it_is_running_again() -> None:
    state, _ = _run(STEPPED, RunInputs(2.0, steps_total=5, suspended=TSTP), RunInputs(3.0, steps_total=5))
    assert (state.phase, state.reason, state.last_progress) == (TrainerPhase.RUNNING, "continued by its user", 3.0)


@pytest.mark.parametrize("signum, name", [(signal.SIGTTIN, "SIGTTIN"), (signal.SIGTTOU, "SIGTTOU")])
def test_the_reason_names_the_signal(signum: int, name: str) -> None:
    state, _ = _run(STEPPED, RunInputs(2.0, suspended=signum))
    assert state.reason is not None and state.reason.startswith(f"suspended by its user: {name} ")


def test_a_pause_asked_while_suspended_is_sent_and_held_after_the_continue() -> None:
    state, sent = _run(STEPPED, RunInputs(2.0, suspended=TSTP), RunInputs(3.0, suspended=TSTP, command="pause"),
                       RunInputs(4.0, suspended=TSTP), RunInputs(5.0), RunInputs(6.0, acknowledged=True))
    assert sent == [[], ["pause"], [], [], []] and state.phase is TrainerPhase.PAUSED and state.manual_pause


def test_a_hot_card_pauses_a_suspended_run_after_the_debounce() -> None:
    _, sent = _run(STEPPED, RunInputs(2.0, HOT, suspended=TSTP), RunInputs(7.0, HOT, suspended=TSTP))
    assert sent == [[], ["pause"]]


def test_a_held_run_its_user_suspends_stays_held() -> None:
    held, _ = _run(STEPPED, RunInputs(2.0, command="pause"), RunInputs(3.0, acknowledged=True))
    state, sent = _run(held, RunInputs(4.0, suspended=TSTP, acknowledged=True), RunInputs(900.0, suspended=TSTP))
    assert state.phase is TrainerPhase.PAUSED and sent == [[], []]


def test_a_stop_while_suspended_is_sent_and_the_exit_ends_it() -> None:
    state, sent = _run(STEPPED, RunInputs(2.0, suspended=TSTP), RunInputs(3.0, suspended=TSTP, command="stop"),
                       RunInputs(4.0, exit_code=-15))
    assert sent == [[], ["stop"], []] and state.phase is TrainerPhase.STOPPED


def test_a_suspended_run_whose_wrapper_is_gone_is_detached_then_failed() -> None:
    state, _ = _run(STEPPED, RunInputs(2.0, suspended=TSTP), RunInputs(3.0, suspended=TSTP, connected=False))
    assert state.reason is not None and state.reason.startswith("detached")
    state, _ = _run(state, RunInputs(4.0, suspended=TSTP, connected=False, alive=False))
    assert state.phase is TrainerPhase.FAILED
