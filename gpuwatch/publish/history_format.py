"""The on-disk history's format and the /history document (docs/page.md "History on disk"), pure: no file, no clock.

The ring (publish/history_store.py) keeps the chart points (publish/history.py ``point``) at three
resolutions, each a tier of segment files: ``1s`` for an hour, ``60s`` for a day, ``600s`` for a week. A
tier's point is its bucket's aggregate (``Bucket``: the hottest temperature's maximum, the mean of the
others), so a reload to another interval changes nothing downstream.

A segment is lines, each ``<crc32 of the JSON, 8 hex digits> <compact JSON>\\n``; its first line is the
header (``{"schema": 1, "tier": ..., "interval_s": ..., "start": ...}``, ``start`` true for the first
segment of a daemon's run: the reader leaves a gap there). A line whose checksum or JSON is wrong (a torn
tail after a crash or a power loss: a half line, or the zeros a file system leaves in blocks it had not
written) is dropped alone; a header of another schema makes the whole segment unknown (the store moves it
aside). Readers ignore keys and items they do not know, so a newer daemon can add some without a new schema.
"""

from __future__ import annotations

import json
import math
import zlib
from array import array
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from gpuwatch.publish.history import GPU_SERIES, Event, Point
from gpuwatch.publish.redact import reason_class

SCHEMA = 1


@dataclass(frozen=True)
class Tier:
    name: str
    step_s: float  # one point per bucket of this length
    span_s: float  # what the tier keeps
    segment_s: float  # a new segment file at least this often
    budget_bytes: int  # all its segments together: the oldest are removed past it (``plan_prune``)

    @property
    def segment_max_bytes(self) -> int:
        """A segment is closed at this size too (16 GPUs fill a segment before its time is up)."""
        return self.budget_bytes // 8


MIB = 1 << 20
# At most 3600 points a range: a chart is not wider, and /history's cost grows with the points it serves
# (docs/performance.md, benchmarks/history_cost.py: a day at 10 s, 8640 points of 8 GPUs, was 0.35 s of the
# HTTP thread and 2.5 MB).
TIERS = (
    Tier("1s", 1.0, 3600.0, 600.0, 4 * MIB),
    Tier("60s", 60.0, 86400.0, 4 * 3600.0, 2 * MIB),
    Tier("600s", 600.0, 7 * 86400.0, 86400.0, 2 * MIB),
)
TIER_BY_NAME = {tier.name: tier for tier in TIERS}
MAX_SEGMENTS = 40  # per tier, whatever their sizes (a daemon restarting in a loop starts one per run)
EVENTS_MAX = 1000  # events kept on disk; past it the file is rewritten with the newest EVENTS_KEEP
EVENTS_KEEP = 500
EVENTS_MAX_BYTES = MIB  # EVENTS_MAX lines of under 1 KiB each (``bounded_event``)
TOTAL_BYTES = sum(tier.budget_bytes for tier in TIERS) + EVENTS_MAX_BYTES  # the stated size (docs/page.md)

# The line size bound: a point carries at most this many GPUs and runs, names and texts this long.
MAX_GPUS = 16
MAX_RUNS = 16
MAX_NAME_CHARS = 64
MAX_TEXT_CHARS = 300

# /history?range= -> (seconds, the tier served)
RANGES: dict[str, tuple[float, Tier]] = {
    "15m": (900.0, TIERS[0]),
    "1h": (3600.0, TIERS[0]),
    "24h": (86400.0, TIERS[1]),
    "7d": (7 * 86400.0, TIERS[2]),
}
DEFAULT_RANGE = "1h"
GAP_STEPS = 3.0  # points further apart than this many steps (or tick intervals) have a gap between them


def encode_line(value: object) -> bytes:
    body = json.dumps(value, separators=(",", ":"), allow_nan=False).encode()
    return b"%08x %s\n" % (zlib.crc32(body), body)


def decode_line(line: bytes) -> Any:
    """The line's value, or None when it is torn or damaged (its checksum or JSON wrong)."""
    crc, _, body = line.rstrip(b"\n").partition(b" ")
    try:
        if len(crc) != 8 or int(crc, 16) != zlib.crc32(body):
            return None
        return json.loads(body)
    except (ValueError, RecursionError):
        return None


def header(tier: Tier, interval_s: float, start: bool) -> dict[str, Any]:
    return {"schema": SCHEMA, "tier": tier.name, "interval_s": interval_s, "start": start}


def header_problem(value: Any, tier: Tier) -> str | None:
    """Why a segment's first line makes it unknown (one line), None when it is ours."""
    if not isinstance(value, dict):
        return "no valid header line"
    if value.get("schema") != SCHEMA:
        return f"schema {value.get('schema')!r}, this version reads {SCHEMA}"
    if value.get("tier") != tier.name:
        return f"a {value.get('tier')!r} header in a {tier.name} file"
    return None


def _finite(value: Any) -> float | None:
    kind = type(value)
    if kind is float:  # nearly every value: the exact type first, the general rule below for the rest
        return value if math.isfinite(value) else None
    if kind is int:
        return float(value) if math.isfinite(value) else None
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(
        value) else None


def bounded_point(point: Point) -> Point:
    """``point`` within the line bound: ``MAX_GPUS`` GPUs, ``MAX_RUNS`` runs, names cut to ``MAX_NAME_CHARS``."""
    gpus = dict(list(point["g"].items())[:MAX_GPUS])
    runs = {str(name)[:MAX_NAME_CHARS]: value for name, value in list(point["r"].items())[:MAX_RUNS]}
    return {"t": point["t"], "g": {str(k)[:MAX_NAME_CHARS]: v for k, v in gpus.items()}, "r": runs}


def bounded_event(event: Event) -> Event:
    """The event as stored: its time, kind, text, GPU and run, each bounded."""
    def cut(value: Any, chars: int) -> str | None:
        return None if value is None else str(value)[:chars]

    return {"unix": event["unix"], "kind": cut(event["kind"], MAX_NAME_CHARS),
            "text": cut(event["text"], MAX_TEXT_CHARS), "gpu": cut(event.get("gpu"), MAX_NAME_CHARS),
            "run": cut(event.get("run"), MAX_NAME_CHARS)}


class Bucket:
    """One tier's aggregation: points in, one point out per ``step_s`` bucket (``add`` returns the buckets it
    closed). A tick as long as the step or longer is its own bucket, written at once."""

    def __init__(self, step_s: float) -> None:
        self.step_s = step_s
        self._index: int | None = None
        self._points: list[Point] = []

    def add(self, point: Point, interval_s: float) -> list[Point]:
        if interval_s >= self.step_s:
            return [*self.flush(), single(point)]  # a bucket left open by a shorter interval first
        index = math.floor(point["t"] / self.step_s)
        closed = self.flush() if index != self._index else []
        self._index = index
        self._points.append(point)
        return closed

    def flush(self) -> list[Point]:
        """The open bucket's point (none when empty), the bucket closed."""
        points, self._points, self._index = self._points, [], None
        return [merge(points)] if points else []


def merge(points: list[Point]) -> Point:
    """Points of one bucket as one: at the last one's time, per GPU the hottest temperature's maximum and the
    mean of each other value, per run the mean steps/s (each over the points that had a value)."""
    gpus: dict[str, list[list[float]]] = {}
    runs: dict[str, list[float]] = {}
    isfinite = math.isfinite
    for point in points:
        for gpu, values in point["g"].items():
            columns = gpus.get(gpu)
            if columns is None:
                columns = gpus[gpu] = [[] for _ in GPU_SERIES]
            for column, value in zip(columns, values, strict=False):
                kind = type(value)
                if kind is float or kind is int:  # ``_finite`` inlined for its common types (every value, every tick)
                    if isfinite(value):
                        column.append(float(value))
                elif (number := _finite(value)) is not None:
                    column.append(number)
        for run, value in point["r"].items():
            if (number := _finite(value)) is not None:
                runs.setdefault(run, []).append(number)
            else:
                runs.setdefault(run, [])
    merged_gpus = {gpu: [_round(max(columns[0]) if columns[0] else None)]
                   + [_round(sum(c) / len(c) if c else None) for c in columns[1:]] for gpu, columns in gpus.items()}
    merged_runs = {run: (round(sum(v) / len(v), 2) if v else None) for run, v in runs.items()}
    return {"t": points[-1]["t"], "g": merged_gpus, "r": merged_runs}


def single(point: Point) -> Point:
    """``merge([point])`` (the 1 s tier, each tick at a 1 s interval), without the columns a bucket of several needs."""
    width = len(GPU_SERIES)
    gpus = {}
    for gpu, values in point["g"].items():
        merged = [_round(_finite(value)) for value in values[:width]]
        gpus[gpu] = merged + [None] * (width - len(merged))
    # ``+ 0.0`` as merge's ``sum`` does it: a rate of -0.0 is written 0.0, the same line.
    runs = {run: (None if (number := _finite(value)) is None else round(number + 0.0, 2))
            for run, value in point["r"].items()}
    return {"t": point["t"], "g": gpus, "r": runs}


def _round(value: float | None) -> float | None:
    """To the tenth; a whole number written without its ``.0`` (a sixth of a line)."""
    if value is None:
        return None
    tenth = round(value, 1)
    return int(tenth) if tenth.is_integer() else tenth


@dataclass(frozen=True)
class Segment:
    """A segment file's name as the store lists it: its tier and first point's time (ms, in the name)."""

    tier: str
    first_ms: int
    name: str


def segment_name(tier: Tier, first_ms: int) -> str:
    return f"{tier.name}-{first_ms}.log"


def parse_segment_name(name: str) -> Segment | None:
    tier, dash, rest = name.partition("-")
    if not dash or tier not in TIER_BY_NAME or not rest.endswith(".log") or not rest[:-4].isdigit():
        return None
    return Segment(tier, int(rest[:-4]), name)


def plan_prune(tier: Tier, segments: list[tuple[Segment, int]], now_unix: float) -> list[Segment]:
    """Which of a tier's segments (with their sizes, any order) to remove: those whose successor starts before
    the span (every point in them is older), then the oldest while over ``budget_bytes`` or ``MAX_SEGMENTS``.
    The newest is never removed (it is being written)."""
    ordered = sorted(segments, key=lambda item: item[0].first_ms)
    horizon_ms = (now_unix - tier.span_s) * 1000
    drop = [seg for (seg, _), (nxt, _) in zip(ordered, ordered[1:], strict=False) if nxt.first_ms <= horizon_ms]
    kept = [(seg, size) for seg, size in ordered if seg not in drop]
    total = sum(size for _, size in kept)
    while len(kept) > 1 and (total > tier.budget_bytes or len(kept) > MAX_SEGMENTS):
        seg, size = kept.pop(0)
        drop.append(seg)
        total -= size
    return drop


def segments_for(tier: Tier, segments: Iterable[Segment], since_unix: float) -> list[Segment]:
    """A tier's segments that may hold points at or after ``since_unix``, oldest first."""
    ordered = sorted((seg for seg in segments if seg.tier == tier.name), key=lambda seg: seg.first_ms)
    since_ms = since_unix * 1000
    following: list[Segment | None] = [*ordered[1:], None] if ordered else []
    return [seg for seg, nxt in zip(ordered, following, strict=True) if nxt is None or nxt.first_ms > since_ms]


def parse_range(query: Mapping[str, list[str]]) -> tuple[str | None, str | None]:
    """(the range, None) from a parsed query string, or (None, the one-line reason for the 400)."""
    given = query.get("range", [DEFAULT_RANGE])
    if len(given) != 1 or given[0] not in RANGES:
        return None, f"range must be one of {', '.join(RANGES)} (default {DEFAULT_RANGE})"
    return given[0], None


class Columns:
    """The /history document built point by point from the segments' lines (``add_segment``), oldest first:
    every series as long as ``t``, null where a GPU or a run had no value and at each gap.

    The values are kept in ``array('d')`` (NaN for null) and the JSON is written here (``encode``): an hour of
    8 GPUs is 170,000 values, which as Python floats in lists, then json.dumps's copy, cost the daemon 10-40
    MiB of RSS per request (benchmarks/history_cost.py); as doubles they are 1.4 MiB."""

    def __init__(self, range_name: str, now_unix: float) -> None:
        self.range = range_name
        self.range_s, self.tier = RANGES[range_name]
        self.now = now_unix
        self.since = now_unix - self.range_s
        self.t = array("d")
        self.gpus: dict[str, array[float]] = {}  # per GPU its rows, GPU_SERIES after GPU_SERIES
        self.runs: dict[str, array[float]] = {}
        self._gap_after = math.inf  # a point later than this follows a gap

    def add_segment(self, lines: Iterable[bytes]) -> None:
        """One segment's lines (its header first); a damaged line is dropped, an unknown segment ignored."""
        it = iter(lines)
        first = decode_line(next(it, b""))
        if header_problem(first, self.tier) is not None:
            return
        interval_s = _finite(first.get("interval_s")) or self.tier.step_s
        if first.get("start") and self.t:
            self._gap_after = self.t[-1]  # a daemon restarted here: never a line across it
        gap_s = GAP_STEPS * max(self.tier.step_s, interval_s)
        for line in it:
            value = decode_line(line)
            if not isinstance(value, dict) or (t := _finite(value.get("t"))) is None or t < self.since:
                continue
            if self.t and t <= self.t[-1]:
                continue  # the clock went back: keep the series in order
            if self.t and (t > self._gap_after or t - self.t[-1] > gap_s):
                last = self.t[-1]
                self.t.append(last + min(self.tier.step_s, (t - last) / 2))  # a null point strictly between
            self._gap_after = math.inf
            self._row(t, value.get("g"), value.get("r"))

    def _row(self, t: float, gpus: Any, runs: Any) -> None:
        n = len(self.t)
        self.t.append(t)
        for gpu, values in gpus.items() if isinstance(gpus, dict) else ():
            if not isinstance(values, list):
                continue
            rows = self.gpus.get(gpu)
            if rows is None:
                rows = self.gpus[gpu] = array("d")
            _pad(rows, n * _WIDTH)
            try:  # the common case in one call: six numbers
                rows.extend(values[:_WIDTH] if len(values) >= _WIDTH else values + [NAN] * (_WIDTH - len(values)))
            except TypeError:  # a null (or garbage) among them
                rows.extend([v if type(v) in _NUMBERS else NAN for v in (values + _NULLS)[:_WIDTH]])
        for run, value in runs.items() if isinstance(runs, dict) else ():
            rate = self.runs.get(run)
            if rate is None:
                rate = self.runs[run] = array("d")
            _pad(rate, n)
            rate.append(value if type(value) in _NUMBERS else NAN)

    def chunks(self, events: Iterable[Any], redacted: bool) -> list[bytes]:
        """The JSON of /history (docs/page.md) in pieces, one per GPU besides the head and the tail: the server
        writes them one after the other, never a copy of the whole. ``redacted``: each event's text as its class
        (publish/redact.py)."""
        n = len(self.t)
        kept = []
        for event in events:
            if not isinstance(event, dict) or (unix := _finite(event.get("unix"))) is None or unix < self.since:
                continue
            text = event.get("text") if isinstance(event.get("text"), str) else ""
            kept.append({"unix": unix, "kind": str(event.get("kind")), "text": reason_class(text) if redacted else text,
                         "gpu": event.get("gpu"), "run": event.get("run")})
        head = json.dumps({"schema": SCHEMA, "range": self.range, "step_s": self.tier.step_s,
                           "now_unix": round(self.now, 3)}, separators=(",", ":"))
        pieces = [f'{head[:-1]},"t":{_series(self.t, n)},"gpus":{{'.encode()]
        for number, (gpu, rows) in enumerate(self.gpus.items()):
            _pad(rows, n * _WIDTH)
            series = ",".join(f'"{name}":{_series(rows[i::_WIDTH], n)}' for i, name in enumerate(GPU_SERIES))
            pieces.append(f'{"," if number else ""}{json.dumps(gpu)}:{{{series}}}'.encode())
        runs = ",".join(json.dumps(run) + ':{"steps_per_s":' + _series(column, n) + "}"
                        for run, column in self.runs.items())
        pieces.append(f'}},"runs":{{{runs}}},"events":{json.dumps(kept[-EVENTS_MAX:], separators=(",", ":"))}}}'
                      .encode())
        return pieces

    def encode(self, events: Iterable[Any], redacted: bool) -> bytes:
        return b"".join(self.chunks(events, redacted))

    def document(self, events: Iterable[Any], redacted: bool) -> dict[str, Any]:
        """``encode``'s document as Python values (the CLI on the box, the tests)."""
        value: dict[str, Any] = json.loads(self.encode(events, redacted))
        return value


NAN = float("nan")
_NUMBERS = (int, float)  # exact types: a bool is neither
_WIDTH = len(GPU_SERIES)
_NULLS = [None] * _WIDTH


def _pad(column: array[float], length: int) -> None:
    """``column`` to ``length`` values with nulls (a GPU or run absent from the points before)."""
    if len(column) < length:
        column.extend(array("d", [NAN]) * (length - len(column)))


def _series(column: array[float], length: int) -> str:
    """A JSON array of ``length`` numbers: NaN (and what a column lacks at its end) as null, whole numbers without
    ``.0``, the rest as Python's shortest repr."""
    _pad(column, length)
    # json's C encoder writes a double as Python's shortest repr; NaN (and an infinity, which no writer makes)
    # become null: the text holds numbers only, so the replacements cannot touch anything else.
    # A whole number loses its ".0" (a sixth of the bytes): values are tenths or times, never in exponent form.
    text = json.dumps(column.tolist(), separators=(",", ":"))
    text = text.replace("-Infinity", "null").replace("Infinity", "null").replace("NaN", "null")
    return text.replace(".0,", ",").replace(".0]", "]")
