"""The live page's feed (docs/page.md): each tick's summary, the history and events, and the
Server-Sent Events stream of /events.

The daemon's tick calls ``publish`` (its thread); each /events client is an async iterator on the
HTTP server's loop (publish/serve.py writes it). A client never has a queue: it is woken after a
tick and sends the latest message, so a slow one skips ticks and costs no memory. At most
``MAX_CLIENTS`` streams at once (each also counts against the server's connection caps); one more
is answered 503 and its page retries.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from collections.abc import AsyncIterator, Callable
from importlib import resources

from gpuwatch.config.file import Config
from gpuwatch.model import PublishedState
from gpuwatch.publish.history import Event, EventLog, History, Point, clocks
from gpuwatch.publish.live import Summary, history_part, redacted, summary

MAX_CLIENTS = 32
RETRY_MS = 1000  # how soon a page's EventSource reconnects after the stream ends (the daemon restarts)
PAGE_MAX_BYTES = 60 * 1024  # the page's budget (issue 37), checked by a test


def page() -> bytes:
    """The live page: one self-contained HTML file shipped as package data."""
    return resources.files("gpuwatch.publish").joinpath("page/index.html").read_bytes()


def sse(data: object, event: str | None = None) -> bytes:
    """One Server-Sent Events message: compact JSON on one ``data:`` line (JSON has no raw newline)."""
    head = f"event: {event}\n" if event else ""
    return (head + "data: " + json.dumps(data, separators=(",", ":")) + "\n\n").encode()


class TooManyClients(Exception):
    pass


class LiveFeed:
    """The latest tick message, the history and events; thread-safe between the tick and the server."""

    def __init__(self, interval_s: float = 1.0, max_clients: int = MAX_CLIENTS, hostname: str | None = None) -> None:
        """``hostname`` None: this machine's (``socket.gethostname()``, read once)."""
        self._hostname = socket.gethostname() if hostname is None else hostname
        self._lock = threading.Lock()
        self._history = History(interval_s)
        self._events = EventLog()
        self._latest: Summary | None = None
        # The last tick's state and configuration while ``_latest`` is not made: no page was open, the history got
        # ``history_part`` alone; the summary is made from them when a page asks (pure: the same dict).
        self._unsummarised: tuple[PublishedState, Config] | None = None
        self._message = b""
        # The same tick for a reader /status redacts for (publish/live.redacted): encoded only while one is open.
        self._message_redacted = b""
        self._seq = 0
        self._config: Config | None = None  # the last tick's, only to recognise a reload by identity; never read
        self._wakers: dict[Callable[[], None], bool] = {}  # each open stream's waker: does it see it all?
        self.max_clients = max_clients
        # Each tick's point and new events, with the tick's interval, handed on (the on-disk ring's ``add``:
        # publish/history_store.py); called on the tick's thread, outside the lock.
        self.record: Callable[[Point, list[Event], float], None] | None = None

    def publish(self, state: PublishedState, config: Config) -> None:
        """The tick's part (the daemon's thread): summary, point, events, then every client woken.

        ``config`` is the tick's: a reload shows as a new object (the loop swaps its Config, never edits one)."""
        # The whole summary only while a page is open (looked at here, again under the lock): the history reads a
        # third of it (``history_part``, the same values), and a page that opens later has it made then.
        whole = bool(self._wakers)
        tick = summary(state, config.fan, self._hostname) if whole else history_part(state)
        clocked = clocks(state)
        with self._lock:
            if self._wakers and not whole:  # a page opened meanwhile: its first message needs the whole one
                tick, whole = summary(state, config.fan, self._hostname), True
            reloaded = self._config is not None and config is not self._config
            self._config = config
            point = self._history.add(tick, clocked)
            new = self._events.add(tick, reloaded, clocked)
            self._latest, self._unsummarised = (tick, None) if whole else (None, (state, config))
            recent = self._events.recent()
            # Encoded only while a stream is open: a stream joins (under this lock) before it reads the sequence
            # number it starts from, so every message it is woken for was encoded for it; none open, none read.
            if any(self._wakers.values()):
                self._message = sse({"summary": tick, "point": point, "events": recent})
            if not all(self._wakers.values()):
                self._message_redacted = sse({"summary": redacted(tick), "point": point, "events": recent})
            self._seq += 1
            wakers = list(self._wakers)
        for wake in wakers:
            wake()
        if self.record is not None:
            self.record(point, new, config.interval_s)

    @property
    def clients(self) -> int:
        with self._lock:
            return len(self._wakers)

    def latest(self) -> Summary | None:
        with self._lock:
            latest, unsummarised = self._latest, self._unsummarised
        return latest if unsummarised is None else self._summarised(unsummarised)

    def _summarised(self, unsummarised: tuple[PublishedState, Config]) -> Summary:
        """The summary of a tick published while no page was open: made now, outside the lock, and kept while it
        is still the latest."""
        state, config = unsummarised
        tick = summary(state, config.fan, self._hostname)
        with self._lock:
            if self._unsummarised is unsummarised:
                self._latest, self._unsummarised = tick, None
        return tick

    def snapshot(self, sensitive: bool = True) -> bytes:
        """The first message of a stream: the summary, the whole history and the events; ``sensitive`` False:
        the summary ``redacted``.

        Encoded outside the lock (an hour of points is a few hundred KB, ~15 ms): the tick never waits on
        a page connecting. Points and summaries are never changed once published."""
        with self._lock:
            latest, unsummarised = self._latest, self._unsummarised
            points, events = self._history.points(), self._events.recent()
        if unsummarised is not None:  # the same tick as the points: its summary made now
            latest = self._summarised(unsummarised)
        document = {"summary": latest if sensitive or latest is None else redacted(latest),
                    "points": points, "events": events}
        return sse(document, event="snapshot")

    def open(self, sensitive: bool = True) -> LiveStream:
        """A stream with its place taken now (TooManyClients over the cap); ``close`` gives it back.
        ``sensitive`` False: a reader /status redacts for, who gets ``redacted`` summaries."""
        return LiveStream(self, sensitive)

    def _join(self, wake: Callable[[], None], sensitive: bool) -> None:
        with self._lock:
            if len(self._wakers) >= self.max_clients:
                raise TooManyClients(f"{self.max_clients} live pages are open already")
            self._wakers[wake] = sensitive

    def _leave(self, wake: Callable[[], None]) -> None:
        with self._lock:
            self._wakers.pop(wake, None)

    def _after(self, seen: int, sensitive: bool) -> tuple[int, bytes]:
        with self._lock:
            if self._seq == seen:
                return self._seq, b""
            return self._seq, self._message if sensitive else self._message_redacted


class LiveStream:
    """One /events client: ``chunks()`` yields the snapshot, then the latest message after each tick."""

    def __init__(self, feed: LiveFeed, sensitive: bool = True) -> None:
        self._feed = feed
        self._sensitive = sensitive
        self._event = asyncio.Event()
        try:  # opened by a route, on the server's loop
            self._loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            self._loop = None
        self._closed = False
        feed._join(self._wake, sensitive)

    def _wake(self) -> None:  # the tick's thread
        loop = self._loop
        if loop is None:
            return
        try:
            loop.call_soon_threadsafe(self._event.set)
        except RuntimeError:
            pass  # the server's loop is closed: the server is stopping

    async def chunks(self) -> AsyncIterator[bytes]:
        self._loop = asyncio.get_running_loop()
        seen, _ = self._feed._after(-1, self._sensitive)
        yield f"retry: {RETRY_MS}\n\n".encode() + self._feed.snapshot(self._sensitive)
        while not self._closed:
            await self._event.wait()
            self._event.clear()
            seen, message = self._feed._after(seen, self._sensitive)
            if message:
                yield message

    def close(self) -> None:
        self._closed = True
        self._feed._leave(self._wake)
