"""The on-disk history ring (publish/history_store.py) on real files: kept across a restart with a gap, a torn
tail dropped, unknown and hostile files moved aside (never followed, never blocking), an untrusted directory
refused, a full file system said once, every size bounded."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import pytest

from gpuwatch.publish.history_format import EVENTS_MAX, encode_line, parse_segment_name
from gpuwatch.publish.history_store import QUEUE_MAX, HistoryStore, read_local
from tests.support.tmpfs import fill, tmpfs
from tests.support.users import needs_root, unprivileged_user

T0 = 1_800_000_000.0


def pt(t: float, temp: float = 70.0) -> dict[str, Any]:
    return {"t": t, "g": {"0000:28:00.0": [temp, 50, 100, 100, 150, 2000]}, "r": {"demo": 5.0}}


def run(directory: Path, first: float, ticks: int, events: list[dict[str, Any]] | None = None) -> HistoryStore:
    """A daemon's life: the store started, ``ticks`` points a second apart, stopped (everything written)."""
    store = HistoryStore(directory)
    store.start()
    for i in range(ticks):
        store.add(pt(first + i, 60 + i % 10), events if i == 0 and events else [], 1.0)
    store.stop()
    return store


def test_points_and_events_are_kept_across_a_restart_with_a_gap_between(tmp_path: Path) -> None:
    directory = tmp_path / "history"
    start = {"unix": T0, "kind": "start", "text": "daemon started (version 1)", "gpu": None, "run": None}
    run(directory, T0, 30, [start])
    run(directory, T0 + 40, 20, [start | {"unix": T0 + 40}])
    doc = HistoryStore(directory).document("1h", T0 + 100, redacted=False)
    t = doc["t"]
    assert t[:30] == [T0 + i for i in range(30)] and t[-20:] == [T0 + 40 + i for i in range(20)]
    assert len(t) == 51 and T0 + 29 < t[30] < T0 + 40  # one null point between the two runs
    temps = doc["gpus"]["0000:28:00.0"]["hottest_c"]
    assert temps[30] is None and None not in temps[:30] + temps[31:] and len(temps) == 51
    assert [e["unix"] for e in doc["events"]] == [T0, T0 + 40]
    # The coarser tiers hold the same hour as buckets: a minute, each the hottest of its points.
    day = HistoryStore(directory).document("24h", T0 + 100, redacted=False)
    assert day["step_s"] == 60.0 and max(v for v in day["gpus"]["0000:28:00.0"]["hottest_c"] if v) == 69
    assert {p.stat().st_mode & 0o777 for p in directory.iterdir()} == {0o644}
    assert directory.stat().st_mode & 0o777 == 0o755


def test_a_torn_tail_is_dropped_and_the_next_start_goes_on(tmp_path: Path) -> None:
    directory = tmp_path / "history"
    run(directory, T0, 10)
    segment = next(p for p in directory.iterdir() if p.name.startswith("1s-"))
    with segment.open("ab") as f:
        f.write(b'0badc0de {"t":' + b"\0" * 300)  # a half line, then blocks a power loss left as zeros
    run(directory, T0 + 20, 5)
    doc = HistoryStore(directory).document("15m", T0 + 60, redacted=False)
    assert [t for t, v in zip(doc["t"], doc["gpus"]["0000:28:00.0"]["fan_pct"], strict=True) if v is not None] == [
        T0 + i for i in range(10)] + [T0 + 20 + i for i in range(5)]


def test_unknown_and_hostile_files_are_moved_aside_with_one_line_each(tmp_path: Path,
                                                                     caplog: pytest.LogCaptureFixture) -> None:
    directory = tmp_path / "history"
    directory.mkdir(mode=0o755)
    secret = tmp_path / "secret"
    secret.write_text("root only\n")
    (directory / "1s-1000.log").write_bytes(encode_line({"schema": 7, "tier": "1s"}))  # a newer version's
    (directory / "600s-1000.log").write_bytes(b"\0" * 64)  # a header a crash left as zeros
    (directory / "60s-1000.log").symlink_to(secret)  # a link where a segment was: moved, never followed
    os.mkfifo(directory / "events.log")  # a FIFO: opening it must not block the writer
    (directory / "notes.txt").write_text("someone's")  # not ours: left alone
    with caplog.at_level(logging.WARNING, logger="gpuwatch.history"):
        run(directory, T0, 3, [{"unix": T0, "kind": "start", "text": "started", "gpu": None, "run": None}])
    names = sorted(p.name for p in directory.iterdir())
    assert {"aside-1s-1000.log", "aside-60s-1000.log", "aside-600s-1000.log", "aside-events.log", "notes.txt",
            "events.log"} <= set(names)
    assert secret.read_text() == "root only\n" and (directory / "aside-60s-1000.log").is_symlink()
    moved = [r.getMessage() for r in caplog.records]
    assert len(moved) == 4 and all(m.startswith("history: moved ") for m in moved), moved
    assert "schema 7, this version reads 1" in moved[0]
    assert HistoryStore(directory).document("15m", T0 + 10, redacted=False)["t"] == [T0, T0 + 1, T0 + 2]


def test_a_directory_others_can_write_is_refused_and_the_daemon_goes_on(tmp_path: Path,
                                                                       caplog: pytest.LogCaptureFixture) -> None:
    directory = tmp_path / "history"
    directory.mkdir()
    directory.chmod(0o777)
    with caplog.at_level(logging.WARNING, logger="gpuwatch.history"):
        store = run(directory, T0, 3)
    assert list(directory.iterdir()) == [] and store.problem is not None and "writable by other users" in store.problem
    assert [r.getMessage() for r in caplog.records] == [f"history not kept on disk: {store.problem}"]
    document, why = read_local(directory, "1h", T0)
    assert document is None and why is not None and why.startswith(f"not trusting {directory}")


@needs_root
def test_a_directory_another_user_owns_is_refused(tmp_path: Path) -> None:
    directory = tmp_path / "history"
    directory.mkdir(mode=0o755)
    with unprivileged_user() as user:
        import pwd

        os.chown(directory, pwd.getpwnam(user).pw_uid, -1)
        store = run(directory, T0, 3)
        assert store.problem is not None and "owned by uid" in store.problem and list(directory.iterdir()) == []


def test_a_full_file_system_is_said_once_and_loses_nothing_else(tmp_path: Path,
                                                               caplog: pytest.LogCaptureFixture) -> None:
    with tmpfs(tmp_path / "state", size="256k") as mount:
        directory = mount / "history"
        store = HistoryStore(directory)
        store.start()
        store.add(pt(T0), [], 1.0)
        fill(mount)
        with caplog.at_level(logging.WARNING, logger="gpuwatch.history"):
            for i in range(1, 30):
                store.add(pt(T0 + i), [], 1.0)
            store.stop()
        assert store._thread.is_alive() is False
        said = [r.getMessage() for r in caplog.records]
        assert 1 <= len(said) <= 2 and all("No space left on device" in m for m in said), said


def test_every_size_is_bounded(tmp_path: Path) -> None:
    directory = tmp_path / "history"
    store = HistoryStore(directory)  # never started: a stuck writer
    for i in range(QUEUE_MAX + 50):
        store.add(pt(T0 + i), [], 1.0)
    assert len(store._queue) == QUEUE_MAX
    event = {"unix": T0, "kind": "reset", "text": "x" * 5000, "gpu": "g" * 500, "run": None}
    store = HistoryStore(directory)
    store.start()
    for i in range(3 * EVENTS_MAX):
        store.add(pt(T0 + i), [event | {"unix": T0 + i}], 1.0)
    store.stop()
    events = (directory / "events.log").read_bytes().splitlines()
    assert len(events) <= EVENTS_MAX + 1 and max(len(line) for line in events) < 1024
    doc = HistoryStore(directory).document("1h", T0 + 3 * EVENTS_MAX, redacted=False)
    assert doc["events"][-1]["unix"] == T0 + 3 * EVENTS_MAX - 1
    assert all(parse_segment_name(p.name) or p.name == "events.log" for p in directory.iterdir())
