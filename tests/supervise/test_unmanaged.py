"""The last rung for GPU processes not run under gpuwatch (pure): which are stopped past crit, which continue."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpuwatch.config.cooling import ThermalConfig
from gpuwatch.config.sections import UnmanagedConfig
from gpuwatch.model import (
    Acted,
    ClockMode,
    ClockState,
    FanMode,
    FanState,
    GpuProcess,
    GpuReading,
    PowerMode,
    PowerState,
    Snapshot,
    TempReading,
)
from gpuwatch.supervise.actions import TIMEOUT_SHARE, UNKNOWN_JOB_TIMEOUT_S
from gpuwatch.supervise.unmanaged import (
    Book,
    Decision,
    GpuVerdict,
    Identity,
    Resting,
    Stopped,
    at_rest,
    candidates,
    decide,
    published,
    verdicts,
)

A, B = "0000:03:00.0", "0000:0c:00.0"
STOP = UnmanagedConfig(on_hot="stop")
REPORT = UnmanagedConfig()
OWN = 999
LIMIT_S = TIMEOUT_SHARE * UNKNOWN_JOB_TIMEOUT_S  # a SIGSTOP of a program that never said which job it is
CRIT = GpuVerdict(A, critical=True, exhausted=True, cool=False, reason="junction 110°C at crit 110°C")
HOT = GpuVerdict(A, critical=False, exhausted=True, cool=False)
COOL = GpuVerdict(A, critical=False, exhausted=True, cool=True)


def row(pid: int, gpu: str = A, trainer: str | None = None) -> GpuProcess:
    return GpuProcess(pid=pid, gpu_id=gpu, command=f"python3 job{pid}.py", user="alice", trainer=trainer)


def ident(pid: int, start: int = 5000, state: str = "S", uid: int | None = 1000, kthread: bool = False) -> Identity:
    return Identity(pid=pid, start_ticks=start, state=state, uid=uid, kernel_thread=kthread)


def stopped(pid: int, since: float = 0.0, gpus: tuple[str, ...] = (A,), start: int = 5000) -> Stopped:
    return Stopped(pid=pid, start_ticks=start, gpu_ids=gpus, since=since, since_unix=1e9 + since, reason="crit")


def test_stop_past_crit_when_the_other_rungs_are_spent() -> None:
    d = decide(Book(), STOP, (CRIT,), [row(10), row(11)], {10: ident(10), 11: ident(11)}, OWN, now=5, now_unix=1e9)
    assert [s.pid for s in d.stop] == [10, 11] and d.resume == () and d.forget == ()
    assert d.stop[0].gpu_ids == (A,) and "junction 110°C at crit" in d.stop[0].reason
    assert d.book.stops_total == ((A, 2),)
    assert [s.pid for s in d.book.stopped] == [10, 11]


@pytest.mark.parametrize("verdict", [
    HOT,  # hot, not at crit: the trainers' rungs, not this one
    replace(CRIT, exhausted=False),  # the fan can still rise, or the governor holds it above the floor
])
def test_no_stop_before_the_last_rung(verdict: GpuVerdict) -> None:
    d = decide(Book(), STOP, (verdict,), [row(10)], {10: ident(10)}, OWN, now=5, now_unix=1e9)
    assert d.stop == () and d.book.stopped == ()


def test_report_never_stops() -> None:
    d = decide(Book(), REPORT, (CRIT,), [row(10)], {10: ident(10)}, OWN, now=5, now_unix=1e9)
    assert d.stop == () and candidates([row(10)], (CRIT,), REPORT) == set()


@pytest.mark.parametrize(("process", "identity"), [
    (row(10, trainer="resnet"), ident(10)),  # a configured trainer's or an attached run's
    (row(OWN), ident(OWN)),  # the daemon itself
    (row(1), ident(1)),  # init
    (row(10), ident(10, kthread=True)),  # a kernel thread
    (row(10), ident(10, uid=0)),  # root's, without stop_root
    (row(10), ident(10, state="T")),  # stopped by someone else (its SIGCONT is not ours)
    (row(10), ident(10, state="t")),  # traced
    (row(10), ident(10, state="Z")),  # a zombie
])
def test_never_stopped(process: GpuProcess, identity: Identity) -> None:
    d = decide(Book(), STOP, (CRIT,), [process], {process.pid: identity}, OWN, now=5, now_unix=1e9)
    assert d.stop == ()


def test_root_is_stopped_with_stop_root() -> None:
    d = decide(Book(), STOP.model_copy(update={"stop_root": True}), (CRIT,), [row(10)], {10: ident(10, uid=0)}, OWN,
               now=5, now_unix=1e9)
    assert [s.pid for s in d.stop] == [10]


def test_a_pid_without_identity_is_gone_and_not_stopped() -> None:
    d = decide(Book(), STOP, (CRIT,), [row(10)], {}, OWN, now=5, now_unix=1e9)
    assert d.stop == ()


def test_kept_while_hot_resumed_when_cool() -> None:
    book = Book(stopped=(stopped(10),), stops_total=((A, 1),))
    d = decide(book, STOP, (HOT,), [row(10)], {10: ident(10, state="T")}, OWN, now=60, now_unix=1e9)
    assert d.stop == () and d.resume == () and d.book.stopped == book.stopped
    d = decide(book, STOP, (COOL,), [row(10)], {10: ident(10, state="T")}, OWN, now=61, now_unix=1e9)
    assert [(s.pid, why) for s, why in d.resume] == [(10, "its GPU is cool again")] and d.book.stopped == ()
    assert d.book.stops_total == ((A, 1),)


def test_a_process_on_two_gpus_resumes_when_both_are_cool() -> None:
    book = Book(stopped=(stopped(10, gpus=(A, B)),))
    half = decide(book, STOP, (COOL, replace(HOT, gpu_id=B)), [], {10: ident(10)}, OWN, now=5, now_unix=1e9)
    assert half.resume == ()
    both = decide(book, STOP, (COOL, replace(COOL, gpu_id=B)), [], {10: ident(10)}, OWN, now=5, now_unix=1e9)
    assert [s.pid for s, _ in both.resume] == [10]


def test_a_gpu_that_is_not_read_keeps_them_stopped_until_the_bound() -> None:
    unread = GpuVerdict(A, critical=False, exhausted=True, cool=False)
    d = decide(Book(stopped=(stopped(10),)), STOP, (unread,), [], {10: ident(10)}, OWN, now=LIMIT_S - 1, now_unix=0)
    assert d.resume == ()


def test_bound_resumes_then_rests_before_another_stop() -> None:
    book = Book(stopped=(stopped(10),), stops_total=((A, 1),))
    d = decide(book, STOP, (CRIT,), [row(10)], {10: ident(10, state="T")}, OWN, now=LIMIT_S, now_unix=1e9)
    assert [s.pid for s, _ in d.resume] == [10] and "the bound" in d.resume[0][1]
    assert d.book.resting == (Resting(10, 5000, LIMIT_S + STOP.restop_after_s),)
    # Still at crit next tick: not stopped again while it rests...
    d = decide(d.book, STOP, (CRIT,), [row(10)], {10: ident(10)}, OWN, now=LIMIT_S + 1, now_unix=1e9)
    assert d.stop == ()
    # ...and stopped again once the rest is over.
    d = decide(d.book, STOP, (CRIT,), [row(10)], {10: ident(10)}, OWN, now=LIMIT_S + STOP.restop_after_s, now_unix=1e9)
    assert [s.pid for s in d.stop] == [10] and d.book.resting == () and d.book.stops_total == ((A, 2),)


def test_max_pause_s_shortens_the_bound() -> None:
    config = STOP.model_copy(update={"max_pause_s": 30.0})
    d = decide(Book(stopped=(stopped(10),)), config, (CRIT,), [], {10: ident(10)}, OWN, now=30, now_unix=0)
    assert [s.pid for s, _ in d.resume] == [10]


def test_a_rest_is_for_that_process_only() -> None:
    book = Book(resting=(Resting(10, 4000, 500.0),))  # pid 10 reused by another process since
    d = decide(book, STOP, (CRIT,), [row(10)], {10: ident(10, start=5000)}, OWN, now=5, now_unix=0)
    assert [s.pid for s in d.stop] == [10]


def test_report_after_a_reload_resumes_every_stop() -> None:
    book = Book(stopped=(stopped(10), stopped(11)))
    d = decide(book, REPORT, (CRIT,), [row(10), row(11)], {10: ident(10), 11: ident(11)}, OWN, now=5, now_unix=0)
    assert sorted(s.pid for s, _ in d.resume) == [10, 11] and d.stop == () and d.book.stopped == ()


@pytest.mark.parametrize("book, identities", [
    (Book(), {10: ident(10)}),
    (Book(stopped=(stopped(10), stopped(11, gpus=(A, B)))), {10: ident(10), 11: ident(11)}),
    (Book(stopped=(stopped(10),), resting=(Resting(12, 5000, 3.0), Resting(13, 5000, 9.0)),
          stops_total=((A, 4),)), {}),
])
@pytest.mark.parametrize("verdicts", [(CRIT,), (COOL, replace(HOT, gpu_id=B)), (replace(CRIT, exhausted=False),)])
def test_report_decides_the_same_without_any_verdict(book: Book, identities: dict[int, Identity],
                                                     verdicts: tuple[GpuVerdict, ...]) -> None:
    """Under "report" the daemon makes no verdict (unmanaged_stops.tick): the policy must not need one."""
    rows = [row(10), row(11, gpu=B), row(12)]
    assert decide(book, REPORT, verdicts, rows, identities, OWN, now=5, now_unix=0) == decide(
        book, REPORT, (), rows, identities, OWN, now=5, now_unix=0)
    assert candidates(rows, verdicts, REPORT) == candidates(rows, (), REPORT) == set()


@pytest.mark.parametrize("book, config, rest", [
    (Book(), REPORT, True),
    (Book(stops_total=((A, 4), (B, 1))), REPORT, True),
    (Book(), STOP, False),  # a stop may be due
    (Book(stopped=(stopped(10),)), REPORT, False),  # resumed under "report"
    (Book(resting=(Resting(12, 5000, 9.0),)), REPORT, False),  # a rest ends
])
@pytest.mark.parametrize("verdicts", [(), (CRIT,), (COOL, replace(HOT, gpu_id=B))])
def test_a_book_at_rest_is_decided_unchanged_and_published_of_the_gpus_alone(
        book: Book, config: UnmanagedConfig, rest: bool, verdicts: tuple[GpuVerdict, ...]) -> None:
    """unmanaged_stops.tick skips decide and keeps its states while at_rest: decide must hand the book back."""
    assert at_rest(book, config) is rest
    if rest:
        rows = [row(10), row(11, gpu=B), row(12, trainer="bert")]
        assert candidates(rows, verdicts, config) == set()  # so no identity is read
        for now in (5.0, 1e6):
            assert decide(book, config, verdicts, rows, {}, OWN, now=now, now_unix=now) == Decision(book=book)
        assert published(book, [A, B], config.on_hot) == published(Book(stops_total=book.stops_total), [A, B],
                                                                   config.on_hot)


@pytest.mark.parametrize("identities", [{}, {10: ident(10, start=7777)}], ids=["gone", "pid reused"])
def test_gone_or_reused_is_forgotten_never_signalled(identities: dict[int, Identity]) -> None:
    d = decide(Book(stopped=(stopped(10),)), STOP, (COOL,), [], identities, OWN, now=5, now_unix=0)
    assert [s.pid for s in d.forget] == [10] and d.resume == () and d.book.stopped == ()


def test_candidates_are_unmanaged_rows_on_last_rung_gpus() -> None:
    rows = [row(10), row(11, trainer="bert"), row(12, gpu=B)]
    assert candidates(rows, (CRIT, replace(HOT, gpu_id=B)), STOP) == {10}


def test_published_per_gpu() -> None:
    book = Book(stopped=(stopped(10, since=3), stopped(11, since=1, gpus=(A, B))), stops_total=((A, 4), (B, 1)))
    a, b, c = published(book, [A, B, "0000:43:00.0"], "stop")
    assert a.stopped_pids == (10, 11) and a.stops_total == 4 and a.stopped_since_unix == 1e9 + 1
    assert b.stopped_pids == (11,) and b.stops_total == 1
    assert c.stopped_pids == () and c.stops_total == 0 and c.reason is None and c.on_hot == "stop"


def _gpu(temp_c: float | None, gpu_id: str = A, up: bool = True) -> GpuReading:
    return GpuReading(gpu_id=gpu_id, card="card0", backend="amdgpu", up=up,
                      temps=(TempReading("junction", temp_c, crit_c=110.0),))


def _snapshot(*gpus: GpuReading) -> Snapshot:
    return Snapshot(taken_unix=0.0, taken_monotonic=0.0, gpus=gpus)


FULL = FanState(gpu_id=A, backend="pwm1", mode=FanMode.CURVE, can_rise=False)
RISING = replace(FULL, can_rise=True)
FLOOR = PowerState(gpu_id=A, mode=PowerMode.FLOOR, pause_allowed=True)
HOLDING = PowerState(gpu_id=A, mode=PowerMode.GOVERNING, pause_allowed=False)


CLOCK_HOLDING = ClockState(gpu_id=A, mode=ClockMode.LIMITING, pause_allowed=False)
CLOCK_FLOOR = ClockState(gpu_id=A, mode=ClockMode.FLOOR, pause_allowed=True)


@pytest.mark.parametrize(("temp_c", "fans", "powers", "clocks", "critical", "exhausted", "cool"), [
    (111.0, (FULL,), (FLOOR,), (), True, True, False),
    (110.0, (FULL,), (), (), True, True, False),  # at crit counts (model.at_crit); no governor: nothing holds it
    (111.0, (RISING,), (FLOOR,), (), True, False, False),  # the fan can still rise
    (111.0, (FULL,), (HOLDING,), (), True, False, False),  # the governor holds it above its floor
    (111.0, (), (), (), True, True, False),  # no fan gpuwatch drives: nothing to raise
    (60.0, (FULL,), (FLOOR,), (), False, True, True),
    (None, (FULL,), (FLOOR,), (), False, True, False),  # unreadable: never "cool"
    # The clock rung above the cap's floor (issue 48): it holds the card as the trainers wait for it
    # (actions.thermal_verdict); at its own floor it is spent.
    (111.0, (FULL,), (FLOOR,), (CLOCK_HOLDING,), True, False, False),
    (111.0, (FULL,), (FLOOR,), (CLOCK_FLOOR,), True, True, False),
])
def test_verdicts(temp_c: float | None, fans: tuple[FanState, ...], powers: tuple[PowerState, ...],
                  clocks: tuple[ClockState, ...], critical: bool, exhausted: bool, cool: bool) -> None:
    (v,) = verdicts(_snapshot(_gpu(temp_c)), Acted(fans, powers, clocks), ThermalConfig())
    assert (v.critical, v.exhausted, v.cool) == (critical, exhausted, cool)
    assert (v.reason is not None) == critical


def test_a_gpu_that_is_down_is_neither_critical_nor_cool() -> None:
    (v,) = verdicts(_snapshot(_gpu(120.0, up=False)), Acted(), ThermalConfig())
    assert not v.critical and not v.cool
