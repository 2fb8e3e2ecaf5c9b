"""Receipts across a daemon restart (publish/receipt_resume.py, gpus/accounting.counter_grew), pure: the previous
daemon's document taken back only from this boot and well-formed, the gap said on each job that ran through it,
its energy from the GPU's firmware counter only when that counter is continuous."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest

from gpuwatch.gpus.accounting import ACCUMULATOR_WRAP_J, counter_grew
from gpuwatch.model import (
    DaemonInfo,
    GpuProcess,
    GpuReading,
    JobGpuReceipt,
    JobReceipt,
    JobStart,
    PublishedState,
    Snapshot,
    TempReading,
)
from gpuwatch.publish.document import to_document
from gpuwatch.publish.receipt_resume import GAPS_LISTED, Carried, GapCounter, Untrusted, carried, resume
from gpuwatch.publish.receipts import find, step

A = "0000:03:00.0"
BOOT = "0f4c1b8e-6a51-4c1e-9d0e-5a7d3c2b1a00"


def tick(t: float, jobs: dict[str, str | None], energy_j: float, counter_j: float | None = None,
         temp_c: float = 60.0, source: str = "accumulator", unique_id: str | None = "0x1234") -> PublishedState:
    """GPU A at ``t``: the daemon's own energy counter, the firmware's (``counter_j``), the processes (pid -> job)."""
    reading = GpuReading(gpu_id=A, card="card0", backend="amdgpu", temps=(TempReading("junction", temp_c),),
                         energy_joules=energy_j, energy_source=source,  # type: ignore[arg-type]
                         energy_accumulator_j=counter_j, unique_id=unique_id)
    rows = tuple(GpuProcess(pid=int(pid), gpu_id=A, command="python3", user="alice", job_id=job)
                 for pid, job in jobs.items())
    snap = Snapshot(taken_unix=t, taken_monotonic=t, gpus=(reading,), processes=rows)
    return PublishedState(snapshot=snap, daemon=DaemonInfo(pid=1, version="x", started_unix=0.0, boot_id=BOOT))


def run(ticks: list[PublishedState], receipts: tuple[JobReceipt, ...] = ()) -> tuple[JobReceipt, ...]:
    previous = None
    for state in ticks:
        receipts = step(receipts, previous, state, 8)
        previous = state
    return receipts


def published(state: PublishedState, receipts: tuple[JobReceipt, ...]) -> Any:
    """What the state file holds after ``state``: the document as JSON, read back."""
    return json.loads(json.dumps(to_document(replace(state, jobs=receipts), "daemon")))


def test_a_job_killed_through_keeps_both_halves_and_its_gap_with_the_counters_energy() -> None:
    before = [tick(100, {}, 0.0, 5000.0), tick(101, {"7": "42"}, 100.0, 5100.0, temp_c=91.0),
              tick(102, {"7": "42"}, 250.0, 5250.0, temp_c=80.0)]
    first = run(before)
    taken = carried(published(before[-1], first), BOOT, kept=8)
    assert taken.jobs == first and taken.on == {("42", A)} and taken.counters == (GapCounter(A, "0x1234", 5250.0),)
    # The new daemon: its own counter starts at 0; the firmware's went on (5250 -> 6250 in the 10 s gap).
    after = [tick(112, {"7": "42"}, 0.0, 6250.0, temp_c=70.0), tick(113, {"7": "42"}, 120.0, 6370.0, temp_c=85.0)]
    receipts = run(after, resume(taken, after[0], counter_grew))
    receipt = find(receipts, "42")
    assert receipt is not None and receipt.active
    (gpu,) = receipt.gpus
    assert gpu.energy_j == 250.0 + 1000.0 + 120.0  # the first half, the gap (the counter), the second half
    assert (gpu.gap_energy_j, gpu.energy_unseen_s) == (1000.0, 0.0)
    assert dict(gpu.max_temps_c) == {"junction": 91.0}  # the first half's maximum is kept
    assert (receipt.unobserved_s, receipt.gaps) == (10.0, ((102.0, 112.0),))
    assert (receipt.first_seen_unix, receipt.last_seen_unix) == (101.0, 113.0)


GAP_CASES = {
    # name: (the carried GPU counter, the first tick after the gap, the gap's energy counted or None: left out)
    "continuous": (GapCounter(A, "0x1234", 5000.0), tick(110, {"7": "42"}, 0.0, 6000.0), 1000.0),
    "the counter went back (a GPU reset, a wrap)": (GapCounter(A, "0x1234", 5000.0),
                                                    tick(110, {"7": "42"}, 0.0, 30.0), None),
    "the job is gone from the GPU after the gap": (GapCounter(A, "0x1234", 5000.0), tick(110, {}, 0.0, 6000.0), None),
    "another GPU in the slot": (GapCounter(A, "0x1234", 5000.0),
                                tick(110, {"7": "42"}, 0.0, 6000.0, unique_id="0x9999"), None),
    "no counter read now": (GapCounter(A, "0x1234", 5000.0), tick(110, {"7": "42"}, 0.0, None), None),
    "more than 2 kW on average": (GapCounter(A, "0x1234", 5000.0), tick(110, {"7": "42"}, 0.0, 40_000.0), None),
}


@pytest.mark.parametrize("name", GAP_CASES)
def test_the_gaps_energy_is_counted_only_from_a_continuous_counter(name: str) -> None:
    counter, after, expected_j = GAP_CASES[name]
    job = JobReceipt(job_id="42", first_seen_unix=50.0, last_seen_unix=100.0,
                     gpus=(JobGpuReceipt(A, energy_j=300.0, max_temps_c=(("junction", 80.0),)),))
    taken = Carried(taken_unix=100.0, jobs=(job,), on=frozenset({("42", A)}), counters=(counter,))
    ((receipt,),) = (resume(taken, after, counter_grew),)
    (gpu,) = receipt.gpus
    assert receipt.unobserved_s == 10.0 and receipt.gaps == ((100.0, 110.0),)
    if expected_j is None:
        assert (gpu.energy_j, gpu.gap_energy_j, gpu.energy_unseen_s) == (300.0, 0.0, 10.0)
    else:
        assert (gpu.energy_j, gpu.gap_energy_j, gpu.energy_unseen_s) == (300.0 + expected_j, expected_j, 0.0)


def test_an_integrated_energy_counter_leaves_the_gaps_energy_out_and_says_so() -> None:
    before = [tick(100, {"7": "42"}, 0.0, source="integrated"), tick(101, {"7": "42"}, 200.0, source="integrated")]
    taken = carried(published(before[-1], run(before)), BOOT, kept=8)
    assert taken.counters == ()  # the daemon's own integral starts again at 0 with the next daemon
    after = tick(131, {"7": "42"}, 0.0, source="integrated")
    (gpu,) = resume(taken, after, counter_grew)[0].gpus
    assert (gpu.energy_j, gpu.energy_unseen_s) == (200.0, 30.0)


def test_jobs_over_before_the_restart_get_no_gap_and_the_gaps_stay_bounded() -> None:
    over = JobReceipt(job_id="1", active=False, last_seen_unix=90.0)
    running = JobReceipt(job_id="2", last_seen_unix=100.0, unobserved_s=5.0,
                         gaps=tuple((float(i), float(i) + 0.5) for i in range(GAPS_LISTED)), gpus=(JobGpuReceipt(A),))
    taken = Carried(taken_unix=100.0, jobs=(over, running), on=frozenset({("2", A)}))
    done, resumed = resume(taken, tick(103, {"7": "2"}, 0.0), counter_grew)
    assert done == over
    assert resumed.unobserved_s == 8.0 and len(resumed.gaps) == GAPS_LISTED and resumed.gaps[-1] == (100.0, 103.0)


def test_the_newest_kept_receipts_are_taken_back() -> None:
    ticks = [tick(float(t), {"1": str(t)}, 10.0 * t) for t in range(5)]
    document = published(ticks[-1], run(ticks))
    assert [job.job_id for job in carried(document, BOOT, kept=2).jobs] == ["4", "3"]


def valid() -> Any:
    state = tick(101, {"7": "42"}, 100.0, 5100.0)
    return published(state, run([tick(100, {"7": "42"}, 0.0, 5000.0), state]))


UNTRUSTED: dict[str, tuple[Callable[[Any], object], str]] = {
    # name: (how the document is spoiled, what the one line says)
    "another boot": (lambda d: d["daemon"].update(boot_id="another"), "written in another boot"),
    "a daemon that recorded no boot": (lambda d: d["daemon"].pop("boot_id"), "records no boot id"),
    "no daemon": (lambda d: d.update(daemon=None), "daemon is not an object"),
    "jobs not a list": (lambda d: d.update(jobs={"42": {}}), "jobs is not a list"),
    "an energy that is text": (lambda d: d["jobs"][0]["gpus"][0].update(energy_j="9"), "jobs[0].gpus[0].energy_j"),
    "a negative energy": (lambda d: d["jobs"][0]["gpus"][0].update(energy_j=-1.0), "jobs[0].gpus[0].energy_j"),
    "resets a bool": (lambda d: d["jobs"][0]["gpus"][0].update(resets=True), "jobs[0].gpus[0].resets"),
    "active missing": (lambda d: d["jobs"][0].pop("active"), "jobs[0].active"),
    "an empty job id": (lambda d: d["jobs"][0].update(job_id=""), "jobs[0].job_id"),
    "temperatures a list": (lambda d: d["jobs"][0]["gpus"][0].update(max_temps_c=[60]), "max_temps_c"),
    "a gap not a pair": (lambda d: d["jobs"][0].update(gaps=[[1.0]]), "jobs[0].gaps"),
    "a counter that is text": (lambda d: d["gpus"][0].update(energy_accumulator_j="x"), "gpus[0].energy_accumulator_j"),
    "no taken_unix": (lambda d: d.pop("taken_unix"), "taken_unix"),
}


@pytest.mark.parametrize("name", UNTRUSTED)
def test_a_document_from_another_boot_or_malformed_is_not_taken_back(name: str) -> None:
    spoil, says = UNTRUSTED[name]
    document = valid()
    assert carried(document, BOOT, kept=8).jobs  # the unspoiled one is taken back
    spoil(document)
    with pytest.raises(Untrusted, match=says.replace("[", r"\[").replace("]", r"\]")):
        carried(document, BOOT, kept=8)


@pytest.mark.parametrize("document", [None, [], "state", 3])
def test_a_document_that_is_no_object_is_not_taken_back(document: object) -> None:
    with pytest.raises(Untrusted, match="the document is not an object"):
        carried(document, BOOT, kept=8)


def test_without_this_boots_id_nothing_is_taken_back() -> None:
    with pytest.raises(Untrusted, match="this boot's id is unknown"):
        carried(valid(), None, kept=8)


WRAP = ACCUMULATOR_WRAP_J
COUNTER_CASES = [
    # before_j, after_j, seconds, grew (None: not known)
    (1000.0, 1600.0, 2.0, 600.0),
    (1000.0, 1000.0, 2.0, 0.0),  # an idle GPU
    (1000.0, 900.0, 2.0, None),  # went back: a reset or a wrap
    (1000.0, 6000.0, 2.0, None),  # 2.5 kW: more than any card draws
    (1000.0, 1600.0, 40.0, None),  # a 32-bit counter in 40 s may have turned once and come past 1000 again
    (WRAP + 1000.0, WRAP + 9000.0, 40.0, 8000.0),  # a wider counter does not wrap
]


@pytest.mark.parametrize(("before_j", "after_j", "seconds", "grew"), COUNTER_CASES)
def test_a_firmware_counter_tells_a_gaps_energy_only_when_continuous(before_j: float, after_j: float, seconds: float,
                                                                      grew: float | None) -> None:
    assert counter_grew(before_j, after_j, seconds) == grew


@pytest.mark.parametrize(("started", "daemon_started", "gap", "source"), [
    # running since 40 (its Slurm cgroup made then), this daemon from 90, first tick 100: 60 s unseen
    ({"42": JobStart(40.0, "scheduler")}, 90.0, (40.0, 100.0), "scheduler"),
    ({"42": JobStart(55.0, "processes")}, 90.0, (55.0, 100.0), "processes"),  # no cgroup: its processes' start
    ({"42": JobStart(95.0, "scheduler")}, 90.0, None, None),  # started after this daemon: seen (near enough) whole
    ({}, 90.0, None, None),  # its start not known: nothing to say but the journal's line
    ({"42": JobStart(-1.0, "processes")}, 90.0, None, None),  # nonsense from the process table
    ({"7": JobStart(40.0, "scheduler")}, 90.0, None, None),  # another job's start
])
def test_receipts_not_taken_back_say_the_jobs_time_before_the_daemon(
        started: dict[str, JobStart], daemon_started: float, gap: tuple[float, float] | None,
        source: str | None) -> None:
    """Issue 46: with no receipts taken back, a job already running at the first tick is not a whole job; the
    receipt says where its start came from (the scheduler's cgroup, else its processes)."""
    from gpuwatch.publish.receipt_resume import unseen_before

    first = step((), None, tick(100, {"7": "42"}, 0.0), 8)
    said = unseen_before(first, started, daemon_started, 100.0)
    job = find(said, "42")
    assert job is not None and job.unseen_from == source
    if gap is None:
        assert said == first
        return
    assert job.gaps == (gap,) and job.unobserved_s == gap[1] - gap[0]
    assert job.gpus[0].energy_unseen_s == gap[1] - gap[0]  # its energy then is not in the receipt, and said so
    later = step(said, tick(100, {"7": "42"}, 0.0), tick(101, {"7": "42"}, 50.0), 8)  # kept at the next tick
    assert find(later, "42").gaps == (gap,)  # type: ignore[union-attr]
    assert find(later, "42").unseen_from == source  # type: ignore[union-attr]
    # A restarted daemon takes it back with the receipt, and the one decoder reads it
    again = carried(published(tick(101, {"7": "42"}, 50.0), later), BOOT, 8)
    assert find(again.jobs, "42").unseen_from == source  # type: ignore[union-attr]
