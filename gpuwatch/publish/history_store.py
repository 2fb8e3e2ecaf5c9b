"""The on-disk history ring (docs/page.md "History"): the chart points and the events, kept in the daemon's
state directory across restarts and upgrades, written by a thread of its own; and read back for /history and
`gpuwatch status --history` (the format and the document: publish/history_format.py).

The tick only appends to a bounded queue (``add``: no file, no lock held against the disk); the writer
thread takes what is queued, aggregates it into each tier's buckets and appends the lines to each tier's
open segment with one write(2) per file per batch. A disk that hangs costs the oldest queued points
(``QUEUE_MAX``), never a tick. There is no fsync per line: a crash or a power loss leaves at worst a torn
tail, which readers drop line by line (its checksum); ``fdatasync`` runs every ``SYNC_EVERY_S``.

Root writes here, so the directory follows safefs's rules: created 0755, refused (history off, one log
line) when another user could write it or a directory above it; every file is opened with ``O_NOFOLLOW``
and ``O_EXCL`` at creation (safefs.open_regular: never a link, a FIFO or another user's file). At start,
a file of ours with an unknown schema, a damaged header or that is not a plain file of ours is moved
aside (``aside-<name>``, the newest ``MAX_ASIDE`` kept) with one log line: the daemon always starts.
"""

from __future__ import annotations

import errno
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from gpuwatch.publish.history import Event, Point
from gpuwatch.publish.history_format import (
    EVENTS_KEEP,
    EVENTS_MAX,
    EVENTS_MAX_BYTES,
    RANGES,
    TIERS,
    Bucket,
    Columns,
    Segment,
    Tier,
    bounded_event,
    bounded_point,
    decode_line,
    encode_line,
    header,
    header_problem,
    parse_segment_name,
    plan_prune,
    segment_name,
    segments_for,
)
from gpuwatch.safefs import (
    Unsafe,
    client_refusal,
    dir_problem,
    open_regular,
    read_bounded,
    write_all,
    write_atomic,
)

log = logging.getLogger("gpuwatch.history")

HISTORY_DIR_NAME = "history"
EVENTS_FILE = "events.log"
ASIDE_PREFIX = "aside-"
MAX_ASIDE = 4
QUEUE_MAX = 600  # ticks queued for the writer (10 minutes at 1 Hz) before the oldest are dropped
SYNC_EVERY_S = 60.0
WARN_EVERY_S = 60.0  # a failing disk is said at most this often
_HEAD_BYTES = 4096  # a header line is far shorter


class HistoryStore:
    """The writer of ``directory`` (``start``, ``add`` each tick, ``stop``) and its reader for /history."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._queue: deque[tuple[Point, list[Event], float]] = deque(maxlen=QUEUE_MAX)
        self._wake = threading.Event()
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="gpuwatch-history", daemon=True)
        self._buckets = {tier.name: Bucket(tier.step_s) for tier in TIERS}
        self._open: dict[str, tuple[int, Segment, int]] = {}  # tier -> (fd, segment, bytes written)
        self._started = {tier.name: False for tier in TIERS}  # a segment written in this run already
        self._interval_s: float | None = None
        self._events = 0  # lines in the events file
        self._synced = time.monotonic()
        self._warned = float("-inf")
        self.problem: str | None = None  # why nothing is kept (an untrusted directory), once known
        self._reading = threading.Lock()  # one /history built at a time

    # ---- the tick's side ----
    def add(self, point: Point, events: list[Event], interval_s: float) -> None:
        """One tick's point and new events: queued, the writer woken (the tick's thread; never blocks)."""
        self._queue.append((point, events, interval_s))
        self._wake.set()

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        """What is queued and every open bucket written, the files closed."""
        self._stopping = True
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(timeout_s)

    # ---- the writer thread ----
    def _run(self) -> None:
        self.problem = self._prepare()
        if self.problem is not None:
            log.warning("history not kept on disk: %s", self.problem)
            return
        while True:
            self._wake.wait()
            self._wake.clear()
            final = self._stopping  # read once: a stop during this batch wakes the loop for the final one
            try:
                self._write_queued(final=final)
            except Exception:  # a bug here must not end the history for the daemon's life without a word
                log.exception("writing the history failed")
            if final:
                break
        for fd, _, _ in self._open.values():
            os.close(fd)
        self._open.clear()

    def _prepare(self) -> str | None:
        """The directory made and checked, unknown files moved aside; why it cannot be used, or None."""
        try:
            self.directory.mkdir(mode=0o755, parents=True, exist_ok=True)
        except OSError as exc:
            return f"cannot create {self.directory}: {exc.strerror or exc}"
        problem = dir_problem(self.directory, (os.geteuid(),))
        if problem is not None:
            return f"refusing {self.directory}: {problem}"
        for name in sorted(os.listdir(self.directory)):
            segment = parse_segment_name(name)
            if segment is not None or name == EVENTS_FILE:
                why = self._unknown(name, segment)
                if why is not None:
                    self._move_aside(name, why)
            elif name.startswith(f".{EVENTS_FILE}.") and name.endswith(".tmp"):
                _unlink(self.directory / name)  # a rewrite of the events cut short
        self._events = sum(1 for _ in self._lines(self.directory / EVENTS_FILE, EVENTS_MAX_BYTES)) - 1
        return None

    def _unknown(self, name: str, segment: Segment | None) -> str | None:
        try:
            fd = open_regular(self.directory / name, owners=(os.geteuid(),))
        except Unsafe as exc:
            return str(exc)
        except OSError as exc:
            return exc.strerror or str(exc)
        try:
            first = os.read(fd, _HEAD_BYTES).split(b"\n", 1)[0]
        finally:
            os.close(fd)
        value = decode_line(first)
        if segment is None:  # the events file
            return None if isinstance(value, dict) and value.get("schema") == 1 and value.get("events") else \
                "no valid events header"
        return header_problem(value, next(t for t in TIERS if t.name == segment.tier))

    def _move_aside(self, name: str, why: str) -> None:
        aside = f"{ASIDE_PREFIX}{name}"
        try:
            os.replace(self.directory / name, self.directory / aside)  # rename(2): a link is moved, never followed
        except OSError as exc:
            log.warning("history: cannot move %s aside (%s): %s", name, why, exc.strerror or exc)
            return
        log.warning("history: moved %s aside to %s: %s", name, aside, why)
        asides = sorted((p for p in self.directory.iterdir() if p.name.startswith(ASIDE_PREFIX)),
                        key=lambda p: p.lstat().st_mtime)
        for old in asides[:-MAX_ASIDE]:
            _unlink(old)

    def _write_queued(self, final: bool) -> None:
        lines: dict[str, list[bytes]] = {tier.name: [] for tier in TIERS}
        events: list[bytes] = []
        newest = None
        while self._queue:
            point, new, interval_s = self._queue.popleft()
            if interval_s != self._interval_s and self._interval_s is not None:
                self._flush_into(lines)  # the buckets of the old interval
                self._close_all()  # the readers' gap threshold follows the interval in the header
            self._interval_s = interval_s
            newest = point["t"]
            bounded = bounded_point(point)
            for tier in TIERS:
                lines[tier.name] += [encode_line(p) for p in self._buckets[tier.name].add(bounded, interval_s)]
            events += [encode_line(bounded_event(event)) for event in new]
        if final:
            self._flush_into(lines)
        for tier in TIERS:
            if lines[tier.name]:
                self._append(tier, lines[tier.name], newest or time.time())
        if events:
            self._append_events(events)
        if final or time.monotonic() - self._synced >= SYNC_EVERY_S:
            self._synced = time.monotonic()
            for fd, _, _ in self._open.values():
                _quietly(os.fdatasync, fd)

    def _flush_into(self, lines: dict[str, list[bytes]]) -> None:
        for tier in TIERS:
            lines[tier.name] += [encode_line(p) for p in self._buckets[tier.name].flush()]

    def _append(self, tier: Tier, lines: list[bytes], now_unix: float) -> None:
        data = b"".join(lines)
        current = self._open.get(tier.name)
        if current is not None:
            fd, segment, size = current
            if size + len(data) > tier.segment_max_bytes or now_unix * 1000 - segment.first_ms >= tier.segment_s * 1000:
                self._close(tier.name)
                current = None
        try:
            if current is None:
                current = self._new_segment(tier, now_unix)
            fd, segment, size = current
            write_all(fd, data)
            self._open[tier.name] = (fd, segment, size + len(data))
        except OSError as exc:
            self._warn(f"cannot write the {tier.name} history in {self.directory}: {exc.strerror or exc}")
            self._close(tier.name)  # the next batch starts a new segment: no line glued to a torn one

    def _new_segment(self, tier: Tier, now_unix: float) -> tuple[int, Segment, int]:
        first_ms = int(now_unix * 1000)
        while True:
            segment = Segment(tier.name, first_ms, segment_name(tier, first_ms))
            try:
                fd = open_regular(self.directory / segment.name, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_EXCL,
                                  0o644, owners=(os.geteuid(),))
                break
            except FileExistsError:
                first_ms += 1
        data = encode_line(header(tier, self._interval_s or tier.step_s, start=not self._started[tier.name]))
        try:
            write_all(fd, data)
        except OSError:
            os.close(fd)
            raise
        self._started[tier.name] = True
        self._prune(tier, now_unix)
        return fd, segment, len(data)

    def _prune(self, tier: Tier, now_unix: float) -> None:
        found = []
        for name in os.listdir(self.directory):
            segment = parse_segment_name(name)
            if segment is not None and segment.tier == tier.name:
                try:
                    found.append((segment, os.lstat(self.directory / name).st_size))
                except FileNotFoundError:
                    pass
        for segment in plan_prune(tier, found, now_unix):
            _unlink(self.directory / segment.name)

    def _close(self, tier_name: str) -> None:
        current = self._open.pop(tier_name, None)
        if current is not None:
            _quietly(os.fdatasync, current[0])
            os.close(current[0])

    def _close_all(self) -> None:
        for tier in TIERS:
            self._close(tier.name)

    def _append_events(self, lines: list[bytes]) -> None:
        path = self.directory / EVENTS_FILE
        try:
            if self._events < 0 or self._events + len(lines) > EVENTS_MAX:
                old = list(self._lines(path, EVENTS_MAX_BYTES))[1:]
                kept = [line + b"\n" for line in old if decode_line(line) is not None] + lines
                body = encode_line({"schema": 1, "events": True}) + b"".join(kept[-EVENTS_KEEP:])
                write_atomic(path, body)
                self._events = min(len(kept), EVENTS_KEEP)
                return
            fd = open_regular(path, os.O_WRONLY | os.O_APPEND, owners=(os.geteuid(),))
            try:
                write_all(fd, b"".join(lines))
            finally:
                os.close(fd)
            self._events += len(lines)
        except OSError as exc:
            self._warn(f"cannot write the history's events in {self.directory}: {exc.strerror or exc}")
            self._events = -1  # rewritten whole next time

    def _lines(self, path: Path, max_bytes: int) -> Iterator[bytes]:
        yield from _file_lines(path, max_bytes, (os.geteuid(),))

    def _warn(self, text: str) -> None:
        if time.monotonic() - self._warned >= WARN_EVERY_S:
            self._warned = time.monotonic()
            log.warning("%s (said at most every %g s)", text, WARN_EVERY_S)

    # ---- the reader (the HTTP server's thread) ----
    def chunks(self, range_name: str, now_unix: float, redacted: bool) -> list[bytes]:
        """/history's body in pieces (one at a time: their memory never adds up)."""
        with self._reading:
            columns = read_columns(self.directory, range_name, now_unix, (os.geteuid(),))
            return columns.chunks(_events(self.directory, (os.geteuid(),)), redacted)

    def document(self, range_name: str, now_unix: float, redacted: bool) -> dict[str, Any]:
        return read_columns(self.directory, range_name, now_unix, (os.geteuid(),)).document(
            _events(self.directory, (os.geteuid(),)), redacted)


def read_columns(directory: Path, range_name: str, now_unix: float, owners: tuple[int, ...] | None) -> Columns:
    """The points of ``range_name`` from the files in ``directory``; a file that cannot be read is left out (its
    points are a gap). ``owners``: whose files are read (a client passes None after ``client_refusal``)."""
    columns = Columns(range_name, now_unix)
    tier = RANGES[range_name][1]
    try:
        names = os.listdir(directory)
    except OSError:
        names = []
    segments = [seg for name in names if (seg := parse_segment_name(name)) is not None]
    for segment in segments_for(tier, segments, columns.since):
        columns.add_segment(_file_lines(directory / segment.name, tier.budget_bytes, owners))
    return columns


def _events(directory: Path, owners: tuple[int, ...] | None) -> Iterator[Any]:
    return (decode_line(line) for line in _file_lines(directory / EVENTS_FILE, EVENTS_MAX_BYTES, owners))


def read_local(directory: Path, range_name: str, now_unix: float) -> tuple[dict[str, Any] | None, str | None]:
    """`gpuwatch status --history` on the box: the document, or None and why the directory is not trusted."""
    refusal = client_refusal(directory)
    if refusal is not None:
        return None, refusal
    if not directory.is_dir():
        return None, f"no history in {directory} (no daemon has kept one here)"
    return read_columns(directory, range_name, now_unix, None).document(_events(directory, None), redacted=False), None


def _file_lines(path: Path, max_bytes: int, owners: tuple[int, ...] | None) -> Iterator[bytes]:
    try:
        data = read_bounded(path, max_bytes, owners=owners)
    except OSError:
        return
    yield from data.split(b"\n")[:-1] if data.endswith(b"\n") else data.split(b"\n")


def _unlink(path: Path) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    except OSError as exc:
        log.warning("history: cannot remove %s: %s", path, exc.strerror or exc)


def _quietly(call: Any, fd: int) -> None:
    try:
        call(fd)
    except OSError as exc:
        if exc.errno not in (errno.EINVAL, errno.EBADF):
            log.debug("history: %s failed: %s", getattr(call, "__name__", call), exc)
