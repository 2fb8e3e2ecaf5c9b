"""The live page's memory (publish/history.py): the ring of chart points, bounded whatever the interval, and
the events derived from consecutive summaries, each rule by a table."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from gpuwatch.publish.history import MAX_EVENTS, MAX_POINTS, EventLog, History, capacity, events, point


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
    s = tick_summary(3)
    assert point(s) == {"t": s["taken_unix"], "g": {"0000:28:00.0": [73.0, 60.0, 140.0, 100.0]}, "r": {"demo": 5.0}}
    s["gpus"][0]["temps"] = [{"label": "edge", "temp_c": None, "limit_c": None, "crit_c": None}]
    assert point(s)["g"]["0000:28:00.0"][0] is None


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
    (tick_summary(1), changed(gpu_resets_total=1), ["reset"], "GPU 0000:28:00.0 reset (reset 1 since start)"),
    (tick_summary(1), changed(gpu_state="down"), ["gpu"], "GPU 0000:28:00.0 down (was up)"),
    (changed(gpu_state="down"), changed(), ["gpu"], "GPU 0000:28:00.0 up (was down)"),
    (tick_summary(1), changed(gpu_state="asleep"), [], None),  # runtime PM: nothing happened
    (tick_summary(1), changed(fan_mode="failsafe", fan_message="junction unreadable"), ["failsafe"],
     "fan of 0000:28:00.0 in failsafe (100 %): junction unreadable"),
    (changed(fan_mode="failsafe"), changed(), ["failsafe"], "fan of 0000:28:00.0 back on the curve (curve)"),
    (tick_summary(1), changed(run_phase="paused", run_why="hot: junction 101°C"), ["pause"],
     "run demo paused: hot: junction 101°C"),
    (changed(run_phase="pausing"), changed(run_phase="paused"), [], None),  # one pause, not two
    (changed(run_phase="paused"), changed(), ["resume"], "run demo resumed"),
    (changed(run_phase="backoff"), changed(run_phase="starting", run_restarts_total=1), ["restart"],
     "run demo restarted (1 restarts)"),
    (tick_summary(1), changed(run_phase="failed", run_why="exit code 1"), ["run"], "run demo failed: exit code 1"),
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
