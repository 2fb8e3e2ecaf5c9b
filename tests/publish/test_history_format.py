"""The on-disk history's format (publish/history_format.py), pure: lines and their checksums, the buckets of
each tier, which segments a range reads and which the ring removes, the /history document and its gaps."""

from __future__ import annotations

from typing import Any

import pytest

from gpuwatch.publish.history_format import (
    EVENTS_MAX_BYTES,
    MAX_GPUS,
    MAX_SEGMENTS,
    RANGES,
    TIER_BY_NAME,
    TIERS,
    TOTAL_BYTES,
    Bucket,
    Columns,
    Segment,
    bounded_point,
    decode_line,
    encode_line,
    header,
    header_problem,
    merge,
    parse_range,
    parse_segment_name,
    plan_prune,
    segment_name,
    segments_for,
    single,
)

T0 = 1_800_000_000.0
ONE = TIER_BY_NAME["1s"]


def pt(t: float, temp: float = 70.0, power: float | None = 100.0, run: float | None = 5.0) -> dict[str, Any]:
    return {"t": t, "g": {"a": [temp, 50.0, power, 100.0, 150.0, 2000.0]}, "r": {"demo": run}}


def test_a_line_round_trips_and_a_damaged_one_is_none() -> None:
    line = encode_line(pt(T0))
    assert line.endswith(b"\n") and decode_line(line) == pt(T0)
    assert decode_line(line[:-10]) is None  # a torn tail
    assert decode_line(b"\0" * len(line)) is None  # the zeros a file system leaves after a power loss
    assert decode_line(line.replace(b"70.0", b"71.0")) is None  # a changed byte: the checksum
    assert decode_line(b"") is None and decode_line(b"zzzzzzzz {}") is None


@pytest.mark.parametrize(("value", "problem"), [
    (header(ONE, 1.0, True), None),
    ({"schema": 2, "tier": "1s"}, "schema 2, this version reads 1"),
    ({"schema": 1, "tier": "10s"}, "a '10s' header in a 1s file"),
    (None, "no valid header line"),
    ([1], "no valid header line"),
])
def test_a_header_of_another_schema_or_tier_is_unknown(value: Any, problem: str | None) -> None:
    assert header_problem(value, ONE) == problem


def test_buckets_keep_the_hottest_and_the_mean() -> None:
    bucket = Bucket(10.0)
    assert bucket.add(pt(T0 + 1, 70, 100, 4.0), 1.0) == []
    assert bucket.add(pt(T0 + 2, 80, None, None), 1.0) == []
    assert bucket.add(pt(T0 + 3, 75, 200, 6.0), 1.0) == []
    closed = bucket.add(pt(T0 + 11), 1.0)  # the next bucket closes the first
    assert closed == [{"t": T0 + 3, "g": {"a": [80, 50, 150, 100, 150, 2000]}, "r": {"demo": 5.0}}]
    assert bucket.flush() == [merge([pt(T0 + 11)])] and bucket.flush() == []


def test_a_tick_as_long_as_the_step_is_written_at_once_after_any_open_bucket() -> None:
    bucket = Bucket(1.0)
    assert bucket.add(pt(T0 + 0.25), 0.25) == []
    assert [p["t"] for p in bucket.add(pt(T0 + 2.0), 2.0)] == [T0 + 0.25, T0 + 2.0]
    assert merge([pt(T0, temp=float("nan"))])["g"]["a"][0] is None  # never a NaN on disk


NAN, INF = float("nan"), float("inf")


@pytest.mark.parametrize("values, run", [
    ([70.04, 50, 212.0, 97, 300.0, 2400], 3.217),
    ([70.05, 50.0, None, 100, 150.0, 2000.0], None),  # a value not known, a run with no rate yet
    ([NAN, -INF, INF, True, "72", 1.0], NAN),  # never a NaN or a bool or a string on disk
    ([80.0, 55.5], 1),  # an older (shorter) point: the missing values null
    ([80.0, 55.5, 1, 2, 3, 4, 5, 6], 2.0),  # a longer one: the values this version knows
    ([10**20, -0.0, 0, 99.95, 99.94999, 1e-9], -0.0),
])
def test_a_bucket_of_one_point_is_its_merge(values: list[Any], run: Any) -> None:
    """The 1 s tier at a 1 s interval writes each tick's point alone (``single``): what ``merge`` makes of it."""
    point = {"t": T0, "g": {"a": values, "b": []}, "r": {"demo": run}}
    assert single(point) == merge([point])
    assert encode_line(single(point)) == encode_line(merge([point]))
    assert Bucket(1.0).add(point, 1.0) == [merge([point])]


def test_a_point_is_bounded_for_the_line_bound() -> None:
    many = {"t": T0, "g": {f"gpu{i}": [1] for i in range(40)}, "r": {"x" * 500: 1.0}}
    bounded = bounded_point(many)
    assert len(bounded["g"]) == MAX_GPUS and [len(name) for name in bounded["r"]] == [64]


def test_segment_names() -> None:
    assert parse_segment_name(segment_name(ONE, 123)) == Segment("1s", 123, "1s-123.log")
    for name in ("1s-12.txt", "2s-12.log", "10s-12.log", "1s-x.log", "events.log", "aside-1s-12.log", "1s-.log"):
        assert parse_segment_name(name) is None


def seg(first_s: float, tier: str = "1s") -> Segment:
    ms = int((T0 + first_s) * 1000)
    return Segment(tier, ms, f"{tier}-{ms}.log")


def test_the_ring_removes_what_is_past_its_span_then_past_its_budget() -> None:
    now = T0 + 10_000
    old, straddling, new = seg(10_000 - 4300), seg(10_000 - 3700), seg(10_000 - 100)
    assert plan_prune(ONE, [(new, 10), (old, 10), (straddling, 10)], now) == [old]  # straddling still has points
    over = ONE.budget_bytes // 2 + 1
    assert plan_prune(ONE, [(straddling, over), (new, over)], now) == [straddling]
    assert plan_prune(ONE, [(new, 10 * ONE.budget_bytes)], now) == []  # never the newest
    crowd = [(seg(10_000 - i), 1) for i in range(MAX_SEGMENTS + 5)]
    assert len(plan_prune(ONE, crowd, now)) == 5


def test_a_range_reads_only_the_segments_that_may_hold_its_points() -> None:
    segments = [seg(0), seg(600), seg(1200), seg(0, "60s")]
    assert segments_for(ONE, segments, T0 + 700) == [seg(600), seg(1200)]
    assert segments_for(ONE, segments, T0 + 5000) == [seg(1200)]
    assert segments_for(ONE, [], T0) == [] and segments_for(ONE, [seg(0, "600s")], T0) == []


def test_the_size_is_fixed() -> None:
    assert TOTAL_BYTES == sum(t.budget_bytes for t in TIERS) + EVENTS_MAX_BYTES == 9 << 20


@pytest.mark.parametrize(("query", "expected"), [
    ({}, ("1h", None)), ({"range": ["15m"]}, ("15m", None)), ({"range": ["7d"]}, ("7d", None)),
    ({"range": ["2h"]}, (None, "range must be one of 15m, 1h, 24h, 7d (default 1h)")),
    ({"range": ["1h", "24h"]}, (None, "range must be one of 15m, 1h, 24h, 7d (default 1h)")),
])
def test_the_range(query: dict[str, list[str]], expected: tuple[str | None, str | None]) -> None:
    assert parse_range(query) == expected


def lines(points: list[dict[str, Any]], start: bool = True, interval_s: float = 1.0) -> list[bytes]:
    return [encode_line(header(ONE, interval_s, start))] + [encode_line(p) for p in points]


def test_every_series_as_long_as_t_with_nulls_where_a_gpu_or_run_had_none() -> None:
    columns = Columns("1h", T0 + 100)
    later = pt(T0 + 3) | {"g": {"a": [71], "b": [60, 30, 90, 0, 100, 900]}, "r": {}}
    columns.add_segment(lines([pt(T0 + 1), pt(T0 + 2), later]))
    doc = columns.document([], redacted=False)
    assert doc["t"] == [T0 + 1, T0 + 2, T0 + 3] and doc["step_s"] == 1.0 and doc["range"] == "1h"
    assert doc["gpus"]["a"]["hottest_c"] == [70, 70, 71] and doc["gpus"]["a"]["power_w"] == [100, 100, None]
    assert doc["gpus"]["b"]["sclk_mhz"] == [None, None, 900]
    assert doc["runs"] == {"demo": {"steps_per_s": [5.0, 5.0, None]}}
    assert all(len(v) == 3 for g in doc["gpus"].values() for v in g.values())
    body = columns.encode([], redacted=False)  # what /history sends: whole numbers without ".0", NaN as null
    assert b'"hottest_c":[70,70,71],' in body and b'"power_w":[100,100,null]' in body and b"NaN" not in body
    assert f'"t":[{T0 + 1:.0f},{T0 + 2:.0f},{T0 + 3:.0f}]'.encode() in body


def test_a_restart_leaves_a_gap_never_a_line_across_it() -> None:
    columns = Columns("15m", T0 + 100)
    columns.add_segment(lines([pt(T0 + 1), pt(T0 + 2)]))
    columns.add_segment(lines([pt(T0 + 3), pt(T0 + 4)], start=True))  # the next daemon, a second later
    columns.add_segment(lines([pt(T0 + 5)], start=False))  # the same daemon's next segment: no gap
    doc = columns.document([], redacted=False)
    assert doc["t"] == [T0 + 1, T0 + 2, T0 + 2.5, T0 + 3, T0 + 4, T0 + 5]
    assert doc["gpus"]["a"]["hottest_c"] == [70, 70, None, 70, 70, 70]


def test_a_hole_in_time_is_a_gap_and_old_damaged_or_backwards_points_are_dropped() -> None:
    columns = Columns("15m", T0 + 1000)
    torn = encode_line(pt(T0 + 150))[:-9]
    columns.add_segment(lines([pt(T0 + 50), pt(T0 + 101)]) + [b"\0\0\0", torn, encode_line(pt(T0 + 110)),
                                                                encode_line(pt(T0 + 105))])
    doc = columns.document([], redacted=False)
    assert doc["t"] == [T0 + 101, T0 + 102, T0 + 110]  # 50 is out of the range; 105 went backwards
    assert doc["gpus"]["a"]["hottest_c"] == [70, None, 70]
    unknown = Columns("15m", T0 + 1000)
    unknown.add_segment([encode_line({"schema": 9, "tier": "1s"}), encode_line(pt(T0 + 200))])
    assert unknown.document([], redacted=False)["t"] == []


def test_events_in_the_range_their_text_as_its_class_when_redacted() -> None:
    event = {"unix": T0 + 10, "kind": "pause", "text": "run demo paused (junction 101 °C, /home/alice)", "gpu": None,
             "run": "demo"}
    old = event | {"unix": T0 - 5000}
    columns = Columns("1h", T0 + 100)
    assert columns.document([old, event, None, {"unix": "x"}], redacted=False)["events"] == [event]
    assert columns.document([event], redacted=True)["events"] == [event | {"text": "run demo paused"}]


@pytest.mark.parametrize("name", RANGES)
def test_each_range_has_its_step(name: str) -> None:
    assert Columns(name, T0).document([], False)["step_s"] == {"15m": 1.0, "1h": 1.0, "24h": 60.0, "7d": 600.0}[name]
