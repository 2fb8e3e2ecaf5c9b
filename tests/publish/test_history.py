"""The live page's memory (publish/history.py): the ring of chart points, bounded whatever the interval, and
the events derived from consecutive summaries, each rule by a table."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from gpuwatch.publish.history import MAX_EVENTS, MAX_POINTS, EventLog, History, capacity, clocks, events, point


def tick_summary(tick: int, interval_s: float = 1.0) -> dict[str, Any]:
    """A summary as publish/live.py makes it: one GPU, one run."""
    return {
        "tick": tick, "taken_unix": 1_800_000_000.0 + tick * interval_s, "interval_s": interval_s,
        "version": "0.1.0", "started_unix": 1_800_000_000.0, "failures": [],
        "gpus": [{"id": "0000:28:00.0", "name": "Navi 10", "state": "up",
                  "temps": [{"label": "edge", "temp_c": 60.0, "limit_c": 90.0, "crit_c": 100.0},
                            {"label": "junction", "temp_c": 70.0 + tick % 5, "limit_c": 100.0, "crit_c": 110.0}],
                  "fan": {"mode": "curve", "duty_pct": 60.0, "target_pct": 60.0, "rpm": 2000, "sensor": "junction",
                          "sensor_temp_c": 70.0, "stalled": False, "message": None, "curve": [[64.0, 50.0]]},
                  "power": {"w": 140.0, "cap_w": 150.0, "original_cap_w": 150.0, "floor_cap_w": 90.0,
                            "mode": "idle", "reason": None},
                  "rung": "fan", "busy_pct": 100.0, "vram_used_bytes": 1, "vram_total_bytes": 2, "resets_total": 0}],
        "runs": [{"name": "demo", "origin": "configured", "phase": "running", "steps_per_s": 5.0, "steps_total": tick,
                  "gpus": ["0000:28:00.0"], "run_energy_kj": 1.0, "energy_total_kj": 1.0, "steps_per_kj": 1.0,
                  "why": None, "paused_since_unix": None, "restarts_total": 0, "pauses_total": 0}],
    }


@pytest.mark.parametrize(("interval_s", "points"), [
    (1.0, 3600), (2.0, 1800), (7.0, 515), (0.5, MAX_POINTS), (0.1, MAX_POINTS), (3600.0, 1), (1e9, 1),
    (0.0, MAX_POINTS),
])
def test_an_hour_at_the_interval_capped_in_points(interval_s: float, points: int) -> None:
    assert capacity(interval_s) == points


def test_the_ring_keeps_the_newest_and_never_grows_past_its_capacity() -> None:
    history = History(2.0)
    for tick in range(1, 5001):
        history.add(tick_summary(tick, 2.0))
    kept = history.points()
    assert len(kept) == 1800 and kept[-1]["t"] == 1_800_000_000.0 + 5000 * 2.0 and kept[0]["t"] < kept[-1]["t"]
    # A reload to a shorter interval: the ring grows to the new hour, the points kept stay.
    history.add(tick_summary(5001, 0.25))
    assert len(history) == 1801
    for tick in range(5002, 12000):
        history.add(tick_summary(tick, 0.25))
    assert len(history) == MAX_POINTS
    history.add(tick_summary(12000, 60.0))  # and shrinks, keeping the newest
    assert len(history) == 60 and history.points()[-1]["t"] == 1_800_000_000.0 + 12000 * 60.0


def test_a_point_is_the_charts_values() -> None:
    """[hottest °C, fan %, power W, busy %, cap W, sclk MHz] (the interface with the page: docs/page.md)."""
    s = tick_summary(3)
    assert point(s) == {"t": s["taken_unix"], "g": {"0000:28:00.0": [73.0, 60.0, 140.0, 100.0, 150.0, None]},
                        "r": {"demo": 5.0}}
    assert point(s, {"0000:28:00.0": clock(sclk_mhz=2500)})["g"]["0000:28:00.0"][5] == 2500
    s["gpus"][0]["temps"] = [{"label": "edge", "temp_c": None, "limit_c": None, "crit_c": None}]
    assert point(s)["g"]["0000:28:00.0"][0] is None


def clock(sclk_mhz: float | None = 2000, ceiling_mhz: float | None = None, limiting: bool = False) -> dict[str, Any]:
    return {"sclk_mhz": sclk_mhz, "ceiling_mhz": ceiling_mhz, "limiting": limiting}


def test_the_clocks_come_from_the_state() -> None:
    from gpuwatch.model import ClockMode, ClockState, GpuReading, PublishedState, Snapshot

    gpus = (GpuReading(gpu_id="a", card="card0", backend="amdgpu", sclk_hz=2_487_000_000.0),
            GpuReading(gpu_id="b", card="card1", backend="amdgpu"))
    state = PublishedState(snapshot=Snapshot(taken_monotonic=1.0, taken_unix=2.0, gpus=gpus),
                           clocks=(ClockState("a", ClockMode.LIMITING, ceiling_mhz=2100.4),))
    assert clocks(state) == {"a": clock(2487, 2100, True), "b": clock(None)}


def changed(**edits: Any) -> dict[str, Any]:
    """tick 2's summary with edits: ``gpu_<key>``, ``fan_<key>`` and ``run_<key>`` set that field."""
    after = copy.deepcopy(tick_summary(2))
    for key, value in edits.items():
        where, _, name = key.partition("_")
        target = {"gpu": after["gpus"][0], "fan": after["gpus"][0]["fan"], "run": after["runs"][0]}[where]
        target[name] = value
    return after


@pytest.mark.parametrize(("before", "after", "kinds", "text"), [
    (tick_summary(1), changed(), [], None),
    (tick_summary(1), changed(gpu_resets_total=1), ["reset"], "GPU 0000:28:00.0 reset (1 reset since start)"),
    (tick_summary(1), changed(gpu_resets_total=2), ["reset"], "GPU 0000:28:00.0 reset (2 resets since start)"),
    (tick_summary(1), changed(gpu_state="down"), ["gpu"], "GPU 0000:28:00.0 down (was up)"),
    (changed(gpu_state="down"), changed(), ["gpu"], "GPU 0000:28:00.0 up (was down)"),
    (tick_summary(1), changed(gpu_state="asleep"), [], None),  # runtime PM: nothing happened
    (tick_summary(1), changed(fan_mode="failsafe", fan_message="junction unreadable"), ["failsafe"],
     "fan of 0000:28:00.0 at 100 % in failsafe (junction unreadable)"),
    (tick_summary(1), changed(fan_mode="failsafe", fan_message="junction unreadable: failsafe"), ["failsafe"],
     "fan of 0000:28:00.0 at 100 % in failsafe (junction unreadable)"),
    (tick_summary(1), changed(fan_mode="failsafe", fan_message=None), ["failsafe"],
     "fan of 0000:28:00.0 at 100 % in failsafe"),
    (changed(fan_mode="failsafe"), changed(), ["failsafe"], "fan of 0000:28:00.0 back on the curve"),
    (changed(fan_mode="failsafe"), changed(fan_mode="monitor-only"), ["failsafe"],
     "fan of 0000:28:00.0 out of failsafe (monitor-only)"),
    (tick_summary(1), changed(run_phase="paused", run_why="hot: junction 101°C"), ["pause"],
     "run demo paused (hot: junction 101°C)"),
    (tick_summary(1), changed(run_phase="pausing", run_why="manual pause"), ["pause"],
     "run demo paused (manual pause)"),
    (tick_summary(1), changed(run_phase="pausing", run_why=None), ["pause"], "run demo paused"),
    (changed(run_phase="pausing"), changed(run_phase="paused"), [], None),  # one pause, not two
    (changed(run_phase="paused"), changed(), ["resume"], "run demo resumed"),
    (changed(run_phase="backoff"), changed(run_phase="starting", run_restarts_total=1), ["restart"],
     "run demo restarted (1 restart so far)"),
    (changed(run_phase="backoff"), changed(run_phase="starting", run_restarts_total=3), ["restart"],
     "run demo restarted (3 restarts so far)"),
    (tick_summary(1), changed(run_phase="failed", run_why="exit code 1"), ["run"], "run demo failed (exit code 1)"),
    (tick_summary(1), changed(run_phase="backoff", run_why="killed by signal 9"), ["run"],
     "run demo waiting to restart (killed by signal 9)"),
    (tick_summary(1), changed(run_phase="finished"), ["run"], "run demo finished"),
    (None, tick_summary(1), ["start"], "daemon started (version 0.1.0)"),
])
def test_events_from_one_summary_to_the_next(before: dict[str, Any] | None, after: dict[str, Any],
                                             kinds: list[str], text: str | None) -> None:
    found = events(before, after, reloaded=False)
    assert [e["kind"] for e in found] == kinds
    if text is not None:
        assert found[0]["text"] == text and found[0]["tick"] == after["tick"]
        assert found[0]["unix"] == after["taken_unix"]


def test_a_reload_and_a_new_gpu_or_run() -> None:
    after = tick_summary(2)
    after["runs"][0]["name"] = "other"  # a new run: nothing to compare with yet
    assert [e["kind"] for e in events(tick_summary(1), after, reloaded=True)] == ["reload"]


def test_the_event_log_is_bounded_newest_first() -> None:
    log = EventLog()
    log.add(tick_summary(0), reloaded=False)
    for tick in range(1, 100):
        log.add(changed(gpu_resets_total=tick) | {"tick": tick}, reloaded=False)
    recent = log.recent()
    assert len(recent) == MAX_EVENTS and recent[0]["tick"] == 99 and recent[-1]["tick"] == 100 - MAX_EVENTS


def powered(mode: str, cap_w: float | None) -> dict[str, Any]:
    return changed(gpu_power={"w": 140.0, "cap_w": cap_w, "original_cap_w": 150.0, "floor_cap_w": 90.0,
                              "mode": mode, "reason": None})


@pytest.mark.parametrize(("before", "after", "clocks_before", "clocks_after", "text"), [
    (powered("idle", 150), powered("governing", 140), None, None, "cap of 0000:28:00.0 lowered to 140 W from 150 W"),
    (powered("idle", None), powered("governing", 140), None, None, "cap of 0000:28:00.0 lowered to 140 W"),
    (powered("governing", 140), powered("governing", 130), None, None, None),  # the cap series shows each step
    (powered("governing", 100), powered("floor", 90), None, None, "cap of 0000:28:00.0 held at its floor, 90 W"),
    (powered("floor", 90), powered("governing", 100), None, None, "cap of 0000:28:00.0 above its floor again, 100 W"),
    (powered("floor", 90), powered("idle", 150), None, None, "cap of 0000:28:00.0 given back to 150 W"),
    (powered("floor", 90), powered("idle", None), None, None, "cap of 0000:28:00.0 given back"),  # never "? W"
    (powered("idle", 150), powered("unavailable", 150), None, None, None),
    (tick_summary(1), changed(), {"0000:28:00.0": clock()}, {"0000:28:00.0": clock(1800, 1800, True)},
     "clock ceiling of 0000:28:00.0 set to 1800 MHz"),
    (tick_summary(1), changed(), {"0000:28:00.0": clock(1800, 1800, True)}, {"0000:28:00.0": clock(1700, 1700, True)},
     None),
    (tick_summary(1), changed(), {"0000:28:00.0": clock(1800, 1800, True)}, {"0000:28:00.0": clock()},
     "clock ceiling of 0000:28:00.0 released"),
])
def test_the_moments_gpuwatch_acted(before: dict[str, Any], after: dict[str, Any], clocks_before: Any,
                                    clocks_after: Any, text: str | None) -> None:
    found = events(before, after, False, clocks_before, clocks_after)
    assert [e["text"] for e in found] == ([text] if text else [])
    assert all(e["kind"] in ("cap", "ceiling") and e["gpu"] == "0000:28:00.0" for e in found)
