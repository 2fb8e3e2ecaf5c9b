"""One GPU's reset count and recovery (pure), and what the dump says, as tables."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpuwatch.model import GpuReading, TempReading
from gpuwatch.resets.coredump import DumpSummary, summarize
from gpuwatch.resets.recovery import STUCK_REPORT_S, Recovery, ResetEvent, answers, step
from gpuwatch.sim.resets import dump_text

GPU = "0000:28:00.0"
OK = GpuReading(gpu_id=GPU, card="card0", backend="amdgpu", temps=(TempReading("junction", 60.0),))
MUTE = replace(OK, temps=(TempReading("junction", None),))  # readable card, temperature refused (in reset)
DUMP = ResetEvent(GPU, "devcoredump", "ring gfx_0.0.0 timed out", "/keep/devcd1.txt")
WEDGED = ResetEvent(GPU, "wedged uevent", "WEDGED=none")


def run(r: Recovery, ticks: list[tuple[float, list[ResetEvent], GpuReading | None, tuple[int, ...]]],
        answer_ticks: int = 3) -> tuple[Recovery, list[tuple[str, str]]]:
    logs: list[tuple[str, str]] = []
    for now, events, reading, stuck in ticks:
        r, got = step(r, events, reading, stuck, now, 1000.0 + now, answer_ticks)
        logs += got
    return r, logs


def test_a_reset_is_counted_then_the_gpu_is_usable_after_answering_three_ticks() -> None:
    r, logs = run(Recovery(GPU), [(0, [DUMP], MUTE, ()), (1, [], MUTE, ()), (2, [], OK, ()), (3, [], OK, ())])
    assert (r.resets_total, r.recovering, r.last_source, r.dump_path) == (1, True, "devcoredump", "/keep/devcd1.txt")
    assert logs == [
        ("warning", f"GPU {GPU} was reset (devcoredump): ring gfx_0.0.0 timed out; dump kept at /keep/devcd1.txt")
    ]
    r, logs = run(r, [(4, [], OK, ())])
    assert not r.recovering and r.resets_total == 1
    assert logs == [("info", f"GPU {GPU} answers again 4s after its reset")]
    published = r.published()
    assert (published.resets_total, published.recovering, published.last_reset_unix) == (1, False, 1000.0)


@pytest.mark.parametrize(("second_at", "total"), [(5.0, 1), (10.0, 1), (10.5, 2)])
def test_events_within_ten_seconds_are_one_incident(second_at: float, total: int) -> None:
    r, _ = run(Recovery(GPU), [(0, [WEDGED], OK, ()), (second_at, [DUMP], OK, ())])
    assert r.resets_total == total
    assert r.dump_path == "/keep/devcd1.txt" and r.last_summary == "ring gfx_0.0.0 timed out"  # the dump's details


def test_a_new_event_restarts_the_answer_count() -> None:
    r, _ = run(Recovery(GPU), [(0, [DUMP], OK, ()), (1, [], OK, ()), (2, [WEDGED], OK, ()), (3, [], OK, ())])
    assert r.recovering and r.answered_ticks == 2


def test_a_process_stuck_in_d_state_keeps_the_gpu_unusable_and_is_reported_once() -> None:
    r, logs = run(Recovery(GPU), [(0, [DUMP], OK, (4242,)), (1, [], OK, (4242,)), (2, [], OK, (4242,))])
    # A few seconds in D are every recovery's (issue 50 item 10): published, but not as a failed one.
    assert r.published().stuck_pids == (4242,) and not r.published().stuck_past_deadline and not logs[1:]
    r, logs = run(r, [(STUCK_REPORT_S, [], OK, (4242,)), (STUCK_REPORT_S + 1, [], OK, (4242,))])
    assert r.recovering and r.stuck_pids == (4242,) and r.published().stuck_past_deadline
    errors = [m for level, m in logs if level == "error"]
    assert len(errors) == 1 and "pid 4242 stuck" in errors[0] and "reboot" in errors[0]
    r, logs = run(r, [(20, [], OK, ())])  # it finally exited; the GPU has been answering all along
    assert not r.recovering and r.stuck_pids == () and logs[-1][1].startswith(f"GPU {GPU} answers again")


@pytest.mark.parametrize(("reading", "ok"), [
    (OK, True), (MUTE, False), (None, False), (OK.gone("no longer present"), False), (replace(OK, temps=()), False),
])
def test_answers(reading: GpuReading | None, ok: bool) -> None:
    assert answers(reading) is ok


def test_nothing_happens_without_a_reset() -> None:
    assert run(Recovery(GPU), [(0, [], None, (1,)), (1, [], OK, ())]) == (Recovery(GPU), [])


def test_what_the_dump_says() -> None:
    summary = summarize(dump_text(4242, "pt_main_thread"))
    assert summary.pid == 4242 and summary.process == "pt_main_thread" and summary.ring == "gfx_0.0.0"
    assert summary.page_fault == "gfxhub at 0x0000000000001000" and summary.vram_lost and summary.monotonic_s
    assert summary.line() == ("ring gfx_0.0.0 timed out; gfxhub page fault at 0x0000000000001000; VRAM lost; "
                              "process pt_main_thread (pid 4242)")
    # The 6.0-6.9 form, and a 6.7-era page-fault line without the colon after "address".
    old = summarize("**** AMDGPU Device Coredump ****\nkernel: 6.1.0\nmodule: amdgpu\ntime: 29.725011811\n"
                    "process_name: soft_recovery_p PID: 1720\n\n[gfxhub] Page fault observed\n"
                    "Faulty page starting at address 0x0000000000000000\n")
    assert (old.kernel, old.monotonic_s, old.pid, old.page_fault, old.vram_lost) == (
        "6.1.0", 29.725011811, 1720, "gfxhub at 0x0000000000000000", False)
    assert summarize("garbage") == DumpSummary() and DumpSummary().line() == "no details in the dump"
