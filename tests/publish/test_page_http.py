"""The live page over real HTTP: / and /events of a daemon ticking on a fake tree (loopback, ephemeral port)."""

from __future__ import annotations

import asyncio
import json
import re
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpuwatch.config.cooling import FanConfig
from gpuwatch.config.file import Config
from gpuwatch.config.sections import HttpConfig
from gpuwatch.daemon.loop import Daemon
from gpuwatch.model import PublishedState
from gpuwatch.publish import live_feed
from gpuwatch.publish.live import summary
from gpuwatch.publish.live_feed import PAGE_MAX_BYTES, LiveFeed, page
from tests.publish.test_http import fetch
from tests.support.published import example_state, two_gpu_tree
from tests.support.waiting import wait_for


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Daemon]:
    tree = two_gpu_tree(tmp_path / "sys")
    config = Config(sysfs_root=tree.root, runtime_dir=tmp_path / "run", interval_s=0.1, fan=FanConfig(mode="off"),
                    http=HttpConfig(listen="127.0.0.1", port=0))
    d = Daemon(config)
    d.start_http()
    yield d
    d.shutdown()


class SseClient:
    """A raw socket reading /events: the response head, then one message at a time."""

    def __init__(self, port: int, path: str = "/events") -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.sock.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n\r\n".encode())
        self.buffer = b""
        self.head = self._until(b"\r\n\r\n").decode("latin-1")

    def _until(self, end: bytes) -> bytes:
        while end not in self.buffer:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise EOFError(self.buffer[:200])
            self.buffer += chunk
        part, _, self.buffer = self.buffer.partition(end)
        return part

    def message(self) -> tuple[str | None, Any]:
        """The next message with data: (its event name, the JSON of its data line)."""
        while True:
            lines = self._until(b"\n\n").decode().split("\n")
            fields = dict(line.split(": ", 1) for line in lines if ": " in line)
            if "data" in fields:
                return fields.get("event"), json.loads(fields["data"])

    def close(self) -> None:
        self.sock.close()


def test_the_page_is_one_small_self_contained_file(daemon: Daemon) -> None:
    code, headers, body = fetch(daemon.http_port, "/")
    assert code == 200 and headers["Content-Type"] == "text/html; charset=utf-8" and body == page()
    assert len(body) <= PAGE_MAX_BYTES
    assert "default-src 'none'" in headers["Content-Security-Policy"] and "connect-src 'self'" in \
        headers["Content-Security-Policy"]
    # Nothing from elsewhere: no URL with a scheme or a protocol-relative one, no src= or @import at all.
    text = body.decode()
    assert not re.search(r"(https?:)?//[a-z0-9.-]+\.[a-z]{2,}", text, re.I)
    assert not re.search(r"\bsrc=|@import|url\(", text)
    # Issue 50 item 15: fetched without JavaScript (curl, w3m) it said only "Waiting for the daemon's first tick".
    assert re.search(r'<noscript>.*href="status".*href="metrics".*</noscript>', text, re.S)
    assert fetch(daemon.http_port, "/", method="HEAD")[2] == b""
    assert fetch(daemon.http_port, "/metrics")[0] == 200 and fetch(daemon.http_port, "/nothing")[0] == 404
    assert fetch(daemon.http_port, "/events", method="POST")[0] == 405


def test_events_sends_a_snapshot_then_each_tick(daemon: Daemon) -> None:
    daemon.tick()
    daemon.tick()
    client = SseClient(daemon.http_port)
    try:
        assert client.head.startswith("HTTP/1.1 200") and "text/event-stream" in client.head
        assert "Content-Length" not in client.head
        assert client._until(b"\n\n") == b"retry: 1000"  # a restarted daemon's page is back within a second
        event, snapshot = client.message()
        assert event == "snapshot" and snapshot["summary"]["tick"] == 2 and len(snapshot["points"]) == 2
        assert [e["kind"] for e in snapshot["events"]] == ["start"]
        state = daemon.tick()
        event, tick = client.message()
        assert event is None and tick["summary"]["tick"] == 3
        assert tick["summary"]["gpus"][0]["id"] == state.snapshot.gpus[0].gpu_id
        assert tick["point"]["t"] == round(state.snapshot.taken_unix, 3)
        assert daemon.live.clients == 1
    finally:
        client.close()
    # The server notices the client is gone at its next tick's write and gives its place back.
    wait_for(lambda: daemon.tick() and daemon.live.clients == 0, "the closed stream to be let go", timeout_s=30)


def test_more_live_pages_than_the_cap_are_told_to_retry(daemon: Daemon) -> None:
    daemon.live.max_clients = 2
    daemon.tick()
    first, second = SseClient(daemon.http_port), SseClient(daemon.http_port)
    try:
        code, headers, body = fetch(daemon.http_port, "/events")
        assert code == 503 and headers["Retry-After"] == "5" and b"2 live pages are open already" in body
        assert fetch(daemon.http_port, "/")[0] == 200  # the page itself is always served
        first.close()
        wait_for(lambda: daemon.tick() and daemon.live.clients == 1, "a place to be free", timeout_s=30)
        third = SseClient(daemon.http_port)
        assert third.head.startswith("HTTP/1.1 200")
        third.close()
        wait_for(lambda: daemon.tick() and daemon.live.clients == 1, "the third's place to be free", timeout_s=30)
        # A HEAD asks for the head only: its place is given back at once.
        assert fetch(daemon.http_port, "/events", method="HEAD")[0] == 200
        wait_for(lambda: daemon.live.clients == 1, "the HEAD's place to be given back", timeout_s=30)
    finally:
        first.close()
        second.close()


def test_stopping_the_server_ends_open_streams(daemon: Daemon) -> None:
    daemon.tick()
    clients = [SseClient(daemon.http_port) for _ in range(3)]
    wait_for(lambda: daemon.live.clients == 3, "three streams")
    assert daemon.http is not None
    daemon.http.stop()
    assert daemon.live.clients == 0
    for client in clients:
        client.sock.settimeout(10)
        with pytest.raises((EOFError, ConnectionError)):
            while True:
                client.message()
        client.close()
    daemon.http = None


def test_a_slow_client_gets_the_latest_tick_never_a_queue(tmp_path: Path) -> None:
    """Ten ticks while the client writes nothing out: its next message is the tenth, and nothing is kept
    per client in between."""
    feed = LiveFeed(interval_s=1.0)
    state = example_state(tmp_path / "sys")
    config = Config(runtime_dir=tmp_path / "run")

    async def scenario() -> list[Any]:
        stream = feed.open()
        chunks = stream.chunks()
        got = [await anext(chunks)]
        for n in range(10):
            feed.publish(state, config)
            assert n or feed.latest() is not None
        await asyncio.sleep(0)  # the wakers' call_soon_threadsafe run
        got.append(await anext(chunks))
        stream.close()
        return got

    first, second = asyncio.run(scenario())
    assert first.startswith(b"retry: 1000\n\nevent: snapshot\ndata: ")
    assert json.loads(first.split(b"data: ", 1)[1])["summary"] is None  # before the first tick
    message = json.loads(second.removeprefix(b"data: "))
    assert len(feed._history) == 10 and message["summary"] == feed.latest()
    assert feed.clients == 0


def test_without_a_page_the_summary_is_made_when_one_asks(tmp_path: Path) -> None:
    """No page open: the tick keeps the history's part of the summary alone (live.history_part); the latest
    summary, a stream's snapshot and its messages after are the whole one, as a feed with a page open all along
    has them."""
    state = example_state(tmp_path / "sys")
    config = Config(runtime_dir=tmp_path / "run")
    idle, watched = LiveFeed(hostname="box"), LiveFeed(hostname="box")
    watched._join(lambda: None, True)
    for feed in (idle, watched):
        feed.publish(state, config)
        feed.publish(state, config)
    assert idle._latest is None and idle.latest() == watched.latest() == summary(state, config.fan, "box")
    assert idle._latest is not None  # made once, kept for the next asker
    idle.publish(state, config.model_copy())
    watched.publish(state, config.model_copy())
    assert idle.snapshot() == watched.snapshot() and idle.snapshot(False) == watched.snapshot(False)
    idle._join(lambda: None, True)
    idle.publish(state, config)
    watched.publish(state, config)
    assert idle._after(-1, True)[1] == watched._after(-1, True)[1] != b""


def test_a_page_opening_during_the_tick_gets_the_whole_summary(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The tick looks for a page before the lock: one that joins in between is found under it."""
    state = example_state(tmp_path / "sys")
    config = Config(runtime_dir=tmp_path / "run")
    feed = LiveFeed(hostname="box")
    history_part = live_feed.history_part

    def joining(published: PublishedState) -> dict[str, Any]:
        feed._join(lambda: None, True)
        return history_part(published)

    monkeypatch.setattr(live_feed, "history_part", joining)
    feed.publish(state, config)
    message = json.loads(feed._after(-1, True)[1].removeprefix(b"data: "))
    assert message["summary"] == feed._latest == summary(state, config.fan, "box")


def test_a_reload_is_an_event_of_the_feed(tmp_path: Path) -> None:
    """The loop swaps its whole Config at a reload: a new object is the reload, the same one every tick is not."""
    feed = LiveFeed()
    state = example_state(tmp_path / "sys")
    config = Config(runtime_dir=tmp_path / "run")

    def kinds() -> list[str]:
        return [e["kind"] for e in json.loads(feed.snapshot().split(b"data: ", 1)[1])["events"]]

    feed.publish(state, config)
    feed.publish(state, config)
    assert kinds() == ["start"]
    feed.publish(state, config.model_copy())
    assert kinds() == ["reload", "start"]
