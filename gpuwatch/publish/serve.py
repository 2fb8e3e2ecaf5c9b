"""A small HTTP/1.1 server on one asyncio event loop: one request per connection, bounded per client.

Why not http.server's threads: every handler thread held its slot while a client sent nothing or
trickled a byte a second, so 16 idle connections delayed a scrape by 19 s and 8 trickling ones
blocked scrapes entirely (issue 24). Here a waiting connection costs a few KiB and no thread, and
it gets a whole-request deadline (the request line and headers in ``request_deadline_s``, not
per read), a write deadline, and caps: at most ``MAX_CONNECTIONS`` open, ``MAX_PER_CLIENT`` per
client address. When a cap is reached the oldest connection still waiting for its request is cut
to make room, so a flood of slow clients delays nobody's scrape. Cut-offs are logged at warning
level, counted and summarised at most once every ``REPORT_EVERY_S``.

The loop runs on its own thread: one thread, so scrapes never compete with the control loop's
tick through a crowd of handler threads (docs/performance.md).
"""

from __future__ import annotations

import asyncio
import email.utils
import http.client
import io
import logging
import socket
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from http import HTTPStatus

log = logging.getLogger("gpuwatch.http")

REQUEST_DEADLINE_S = 5.0  # the whole request (line, headers, any body) must arrive within this
WRITE_DEADLINE_S = 10.0  # a client that does not read its response is cut after this
MAX_CONNECTIONS = 512  # open at once, all clients together (LimitNOFILE is 65536)
MAX_PER_CLIENT = 128  # open at once from one address
MAX_HEAD_BYTES = 16 * 1024  # request line + headers
MAX_BODY_BYTES = 64 * 1024  # a body is read (and ignored) so the close does not reset the response
REPORT_EVERY_S = 10.0


@dataclass(frozen=True)
class Response:
    status: int
    content_type: str
    body: bytes
    headers: tuple[tuple[str, str], ...] = ()


# (method, target) -> the response; HEAD is answered as GET without the body.
Respond = Callable[[str, str], Response]


@dataclass(eq=False)
class _Connection:
    client: str
    writer: asyncio.StreamWriter
    task: asyncio.Task[None] | None = None
    waiting: bool = True  # still reading its request: the one to cut when a cap is reached


@dataclass
class _CutOffs:
    """Cut-off clients since the last warning, by reason and by address."""

    reasons: Counter[str] = field(default_factory=Counter)
    clients: Counter[str] = field(default_factory=Counter)
    reported_at: float = float("-inf")


class Server:
    """Serves ``respond`` on a bound listening socket from its own thread until ``stop()``."""

    def __init__(self, sock: socket.socket, respond: Respond, request_deadline_s: float = REQUEST_DEADLINE_S,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self._sock = sock
        self._respond = respond
        self.request_deadline_s = request_deadline_s
        self._mono = monotonic
        self._open: OrderedDict[_Connection, None] = OrderedDict()  # oldest first
        self._per_client: Counter[str] = Counter()
        self._cut = _CutOffs()
        self._loop = asyncio.new_event_loop()
        self._stopping: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._loop.run_until_complete, args=(self._main(),),
                                        name="gpuwatch-http", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._stop_soon)
            self._thread.join(timeout_s)
        if not self._thread.is_alive():
            self._loop.close()
        self._sock.close()

    def _stop_soon(self) -> None:
        if self._stopping is not None:
            self._stopping.set()

    async def _main(self) -> None:
        self._stopping = asyncio.Event()
        server = await asyncio.start_server(self._accepted, sock=self._sock, limit=MAX_HEAD_BYTES)
        reporter = asyncio.create_task(self._report_every())
        async with server:
            await self._stopping.wait()
        reporter.cancel()
        tasks = [c.task for c in self._open if c.task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(reporter, *tasks, return_exceptions=True)
        self._report()

    # ---- connections ----
    async def _accepted(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        connection = _Connection(str(peer[0]) if peer else "?", writer, asyncio.current_task())
        self._make_room(connection.client)
        self._open[connection] = None
        self._per_client[connection.client] += 1
        try:
            await self._serve(connection, reader)
        except asyncio.CancelledError:
            pass  # cut to make room, or the server stops
        except (ConnectionError, OSError):
            pass  # the client went away; nothing to answer
        finally:
            del self._open[connection]
            self._per_client[connection.client] -= 1
            if not self._per_client[connection.client]:
                del self._per_client[connection.client]
            writer.close()

    def _make_room(self, client: str) -> None:
        """Before admitting one more: cut the oldest waiting connection of a full client, or of a full server."""
        if self._per_client[client] >= MAX_PER_CLIENT:
            self._cut_oldest(lambda c: c.client == client, "over the per-client connection limit")
        if len(self._open) >= MAX_CONNECTIONS:
            self._cut_oldest(lambda c: True, "over the connection limit")

    def _cut_oldest(self, which: Callable[[_Connection], bool], reason: str) -> None:
        for connection in self._open:
            if connection.waiting and which(connection) and connection.task is not None:
                self._note_cut(connection.client, reason)
                connection.task.cancel()
                return

    async def _serve(self, connection: _Connection, reader: asyncio.StreamReader) -> None:
        try:
            async with asyncio.timeout(self.request_deadline_s):
                method, target, length = _parse_head(await reader.readuntil(b"\r\n\r\n"))
                if 0 < length <= MAX_BODY_BYTES:
                    await reader.readexactly(length)
        except TimeoutError:
            self._note_cut(connection.client, f"no complete request within {self.request_deadline_s:g} s")
            return
        except asyncio.LimitOverrunError:
            self._note_cut(connection.client, f"request head over {MAX_HEAD_BYTES} bytes")
            return
        except asyncio.IncompleteReadError:
            return  # closed before finishing its request
        except ValueError:
            method, target = "", ""
        connection.waiting = False
        response = self._answer(method, target)
        log.debug("%s %s %s %d", connection.client, method or "-", target or "-", response.status)
        connection.writer.write(_encode(response, with_body=method != "HEAD"))
        try:
            async with asyncio.timeout(WRITE_DEADLINE_S):
                await connection.writer.drain()
        except TimeoutError:
            self._note_cut(connection.client, f"response not read within {WRITE_DEADLINE_S:g} s")

    def _answer(self, method: str, target: str) -> Response:
        if not method:
            return Response(400, "text/plain; charset=utf-8", b"bad request\n")
        try:
            return self._respond(method, target)
        except Exception:  # a rendering bug answers 500, never takes the server down
            log.exception("answering %s %s failed", method, target)
            return Response(500, "text/plain; charset=utf-8", b"internal error (see the daemon's log)\n")

    # ---- cut-off warnings ----
    def _note_cut(self, client: str, reason: str) -> None:
        self._cut.reasons[reason] += 1
        self._cut.clients[client] += 1
        if self._mono() - self._cut.reported_at >= REPORT_EVERY_S:
            self._report()

    async def _report_every(self) -> None:
        while True:
            await asyncio.sleep(1.0)
            if self._cut.reasons and self._mono() - self._cut.reported_at >= REPORT_EVERY_S:
                self._report()

    def _report(self) -> None:
        cut = self._cut
        if not cut.reasons:
            return
        total = sum(cut.reasons.values())
        reasons = ", ".join(f"{n} {why}" for why, n in cut.reasons.most_common())
        clients = ", ".join(f"{address} ({n})" for address, n in cut.clients.most_common(5))
        more = f" and {len(cut.clients) - 5} more" if len(cut.clients) > 5 else ""
        log.warning("cut off %d slow HTTP client connection(s): %s; from %s%s", total, reasons, clients, more)
        self._cut = _CutOffs(reported_at=self._mono())


def bind(listen: str, port: int) -> socket.socket:
    """The listening socket (IPv4 or IPv6 by the address); raises OSError (port in use, bad address)."""
    family = socket.AF_INET6 if ":" in listen else socket.AF_INET
    # A deep backlog: connections are accepted at once by the loop, but a burst of SYNs must not be
    # dropped (the clients would retry after 1 s, 3 s...).
    return socket.create_server((listen, port), family=family, backlog=128)


def _parse_head(head: bytes) -> tuple[str, str, int]:
    """(method, target, content length) of a request head; ValueError when it is not HTTP/1.x."""
    line, _, rest = head.partition(b"\r\n")
    parts = line.decode("latin-1").split()
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise ValueError("not an HTTP/1.x request line")
    headers = http.client.parse_headers(io.BytesIO(rest))
    try:
        length = int(headers.get("Content-Length") or 0)
    except ValueError:
        raise ValueError("bad Content-Length") from None
    return parts[0], parts[1], length


def _encode(response: Response, with_body: bool) -> bytes:
    reason = HTTPStatus(response.status).phrase
    headers = [
        ("Server", "gpuwatch"),
        ("Date", email.utils.formatdate(usegmt=True)),
        ("Content-Type", response.content_type),
        ("Content-Length", str(len(response.body))),
        ("Connection", "close"),
        *response.headers,
    ]
    head = f"HTTP/1.1 {response.status} {reason}\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers) + "\r\n"
    return head.encode("latin-1") + (response.body if with_body else b"")
