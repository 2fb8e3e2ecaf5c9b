"""A small HTTP/1.1 server on one asyncio event loop, with keep-alive, bounded per client.

Why not http.server's threads: a handler thread held its slot while its client sent nothing or
trickled a byte a second (issue 24). Here a waiting connection costs a few KiB and no thread, and has a
whole-request deadline (``request_deadline_s`` for line and headers, not per read), a write deadline,
and caps: ``MAX_CONNECTIONS`` open, ``MAX_PER_CLIENT`` per address; at a cap the oldest connection
still waiting for its request is cut to make room, and the cut-offs are summarised in one warning at
most every 10 s. Which connections are open, the cutting and those warnings are publish/connections.py's;
the sockets, the TLS handshake, the request, the response and its stream, the deadlines and the caps'
values are here.

The caps count descriptors (issue 31): the server accepts by itself, only while fewer than the cap
are open, and a connection counts until its socket is closed, so a burst waits in the kernel's backlog
(asyncio's accept loop took a backlog at once and a cut connection kept its descriptor: 1000 idle
connections held 977). ``RESERVED_FDS`` of the open-file limit stay the daemon's; a failed accept
(EMFILE) is logged and retried.

With TLS (``tls`` gives the context for each new connection, publish/tls.py), the handshake happens
after the connection is admitted, so it counts against the same caps, and inside the same whole-request
deadline: a client that opens TLS and never finishes the handshake is cut like one that never sends its
request (issue 35). A failed handshake (plain HTTP to the TLS port, an untrusted client certificate) is
counted with the cut-offs. ``admit`` (authentication, publish/http.py) may answer a request itself (401)
before ``respond`` sees it.

Keep-alive (issue 47): Prometheus keeps its connection between scrapes, so a TLS scrape pays no handshake.
After an answer, an HTTP/1.1 client's connection stays open for its next request (unless it said
``Connection: close``, the answer was a stream or a 400, or its body was not read) at most ``KEEPALIVE_IDLE_S``
idle and for at most ``MAX_REQUESTS_PER_CONNECTION`` requests; the next request's whole-request deadline
starts at its first byte. An idle keep-alive connection counts against the caps like any other and is the
first closed when a cap is reached (publish/connections.py).

The loop runs on its own thread: one thread, so scrapes never compete with the control loop's
tick through a crowd of handler threads (docs/performance.md).
"""

from __future__ import annotations

import asyncio
import logging
import resource
import socket
import ssl
import threading
import time
from collections.abc import Awaitable, Callable

from gpuwatch.publish.connections import Connection, Connections
from gpuwatch.publish.wire import (
    MAX_BODY_BYTES,
    MAX_HEAD_BYTES,
    Head,
    Request,
    Respond,
    Response,
    Stream,
    encode,
    parse_head,
)

log = logging.getLogger("gpuwatch.http")

REQUEST_DEADLINE_S = 5.0  # the whole request (line, headers, any body) must arrive within this
WRITE_DEADLINE_S = 10.0  # a client that does not read its response is cut after this
MAX_CONNECTIONS = 512  # open at once, all clients together (LimitNOFILE is 65536)
MAX_PER_CLIENT = 128  # open at once from one address
RESERVED_FDS = 256  # of the open-file limit, kept for the daemon's own files (the cap is lowered to keep them)
MIN_CONNECTIONS = 8  # the cap however low the open-file limit (a scrape must still get in)
ACCEPT_RETRY_S = 0.5  # after an accept that failed (out of descriptors)
# An idle keep-alive connection is closed after this: longer than Prometheus's default scrape interval
# (1 min), so a scrape every minute keeps one connection; Prometheus itself drops idle ones after 5 min.
KEEPALIVE_IDLE_S = 90.0
MAX_REQUESTS_PER_CONNECTION = 1000  # then the connection is closed after its answer (a day of 90 s scrapes)

# A request -> the request with who sent it (authenticated), or the answer that ends it (401).
Admit = Callable[[Request], Awaitable[Request | Response]]
# Every answer, errors included (400, 500, 401), passes through it: the configured response headers.
Finish = Callable[[Response], Response]


def connection_cap(open_files_limit: int) -> int:
    """The connections served at once under an open-file limit: ``MAX_CONNECTIONS``, lowered to leave
    ``RESERVED_FDS`` descriptors to the daemon (pure)."""
    return max(MIN_CONNECTIONS, min(MAX_CONNECTIONS, open_files_limit - RESERVED_FDS))


class _Protocol(asyncio.StreamReaderProtocol):
    """asyncio's stream protocol, telling the server when the connection's socket is closed."""

    def __init__(self, reader: asyncio.StreamReader, closed: Callable[[], None]) -> None:
        super().__init__(reader)
        self._on_closed = closed

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        self._on_closed()  # the transport closes the socket right after this, before the loop runs anything else


class Server:
    """Serves ``respond`` on a bound listening socket from its own thread until ``stop()``."""

    def __init__(self, sock: socket.socket, respond: Respond, request_deadline_s: float = REQUEST_DEADLINE_S,
                 monotonic: Callable[[], float] = time.monotonic, max_connections: int | None = None,
                 tls: Callable[[], ssl.SSLContext | None] | None = None, admit: Admit | None = None,
                 finish: Finish | None = None, keepalive_idle_s: float = KEEPALIVE_IDLE_S,
                 max_requests: int = MAX_REQUESTS_PER_CONNECTION) -> None:
        self._sock = sock
        self._respond = respond
        self._tls = tls
        self._admit_request = admit
        self._finish = finish or (lambda response: response)
        self.request_deadline_s = request_deadline_s
        self.keepalive_idle_s = keepalive_idle_s
        self.max_requests = max_requests
        self.max_connections = max_connections or connection_cap(resource.getrlimit(resource.RLIMIT_NOFILE)[0])
        self.max_per_client = min(MAX_PER_CLIENT, self.max_connections)
        self._connections = Connections(self.max_connections, self.max_per_client, monotonic, held=self._cut_held)
        self._tasks: set[asyncio.Task[None]] = set()
        self._loop = asyncio.new_event_loop()
        self._stopping: asyncio.Event | None = None
        self._room: asyncio.Event | None = None
        self._held: asyncio.Event | None = None  # a cut-off held back for a later warning (``_report_held``)
        self._thread = threading.Thread(target=self._loop.run_until_complete, args=(self._main(),),
                                        name="gpuwatch-http", daemon=True)

    def start(self) -> None:
        if self.max_connections < MAX_CONNECTIONS:
            log.warning("HTTP: at most %d connections at once (the open-file limit %d less %d kept for the "
                        "daemon's own files)", self.max_connections,
                        resource.getrlimit(resource.RLIMIT_NOFILE)[0], RESERVED_FDS)
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
        self._stopping, self._room, self._held = asyncio.Event(), asyncio.Event(), asyncio.Event()
        self._sock.setblocking(False)
        accepting = asyncio.create_task(self._accept_loop())
        reporter = asyncio.create_task(self._report_held())
        await self._stopping.wait()
        accepting.cancel()
        reporter.cancel()
        for connection in self._connections:
            if connection.transport is not None:
                connection.transport.abort()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(accepting, reporter, *tasks, return_exceptions=True)
        await asyncio.sleep(0)  # the aborted transports close their sockets on this turn
        self._connections.report()

    # ---- connections ----
    async def _accept_loop(self) -> None:
        assert self._room is not None
        loop = asyncio.get_running_loop()
        while True:
            await self._readable(loop)
            while self._connections.full:
                # Someone is waiting in the backlog: the oldest connection still waiting for its request
                # makes room; the next is accepted only once its descriptor is closed.
                self._connections.cut_oldest(lambda c: True, "over the connection limit")
                self._room.clear()
                await self._room.wait()
            try:
                conn, address = self._sock.accept()
            except BlockingIOError:
                continue  # another waiter took it, or the client gave up
            except OSError as exc:
                self._connections.accept_failed(exc, ACCEPT_RETRY_S)
                await asyncio.sleep(ACCEPT_RETRY_S)
                continue
            self._admit(conn, str(address[0]) if address else "?")

    async def _readable(self, loop: asyncio.AbstractEventLoop) -> None:
        """Until a connection waits to be accepted."""
        ready: asyncio.Future[None] = loop.create_future()

        def wake() -> None:
            if not ready.done():
                ready.set_result(None)

        loop.add_reader(self._sock.fileno(), wake)
        try:
            await ready
        finally:
            loop.remove_reader(self._sock.fileno())

    def _admit(self, conn: socket.socket, client: str) -> None:
        connection = self._connections.add(client)
        if connection is None:  # every one of this client's connections is being answered: this one is refused
            conn.close()
            return
        task = asyncio.create_task(self._connection(connection, conn))
        connection.task = task
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _closed(self, connection: Connection) -> None:
        """The connection's socket is closed: its descriptor is free again."""
        self._connections.closed(connection)
        if self._room is not None:
            self._room.set()

    async def _connection(self, connection: Connection, conn: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.request_deadline_s  # the handshake and the request, together
        reader = asyncio.StreamReader(limit=MAX_HEAD_BYTES, loop=loop)
        protocol = _Protocol(reader, lambda: self._closed(connection))
        context = self._tls() if self._tls is not None else None
        try:
            async with asyncio.timeout_at(deadline):
                # asyncio's own handshake timeout is a backstop: the deadline above cuts first.
                transport, _ = await loop.connect_accepted_socket(
                    lambda: protocol, conn, ssl=context,
                    ssl_handshake_timeout=2 * self.request_deadline_s if context is not None else None)
        except (OSError, asyncio.CancelledError, TimeoutError) as exc:
            if isinstance(exc, TimeoutError):
                self._connections.note_cut(connection.client,
                                           f"no TLS handshake within {self.request_deadline_s:g} s")
            elif isinstance(exc, ssl.SSLError):  # one that went away by itself (a port probe) was not cut
                self._connections.note_cut(connection.client, "TLS handshake failed")
            conn.close()
            self._closed(connection)
            return
        connection.transport = transport
        writer = asyncio.StreamWriter(transport, protocol, reader, loop)
        try:
            if not connection.cut:
                await self._serve(connection, reader, writer, deadline)
        except asyncio.CancelledError:
            pass  # the server stops
        except (ConnectionError, OSError):
            pass  # the client went away; nothing to answer
        finally:
            if connection.cut or connection.waiting:
                transport.abort()
            else:
                transport.close()

    async def _serve(self, connection: Connection, reader: asyncio.StreamReader,
                     writer: asyncio.StreamWriter, deadline: float) -> None:
        """The connection's requests one after the other, while the client keeps it alive."""
        first = b""
        for served in range(1, self.max_requests + 1):
            if not await self._exchange(connection, reader, writer, deadline, first, last=served == self.max_requests):
                return
            connection.waiting = connection.idle = True  # the first to close when a cap is reached
            try:
                async with asyncio.timeout(self.keepalive_idle_s):
                    first = await reader.read(1)  # the next request's first byte starts its deadline
            except TimeoutError:
                first = b""
            if not first or connection.cut:
                connection.waiting = False  # an idle connection ends with a clean close, not a reset
                return
            connection.idle = False
            deadline = asyncio.get_running_loop().time() + self.request_deadline_s

    async def _exchange(self, connection: Connection, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                        deadline: float, first: bytes, last: bool) -> bool:
        """One request read (``first``: its first byte, already read) and answered; whether the connection
        stays open for another."""
        head: Head | None = None
        try:
            async with asyncio.timeout_at(deadline):
                head = parse_head(first + await reader.readuntil(b"\r\n\r\n"))
                if 0 < head.length <= MAX_BODY_BYTES:
                    await reader.readexactly(head.length)
        except TimeoutError:
            self._connections.note_cut(connection.client,
                                       f"no complete request within {self.request_deadline_s:g} s")
            return False
        except asyncio.LimitOverrunError:
            self._connections.note_cut(connection.client, f"request head over {MAX_HEAD_BYTES} bytes")
            return False
        except asyncio.IncompleteReadError:
            return False  # closed before finishing its request (or cut to make room)
        except ValueError as exc:
            bad = str(exc)
        if connection.cut:
            return False
        connection.waiting = False
        if head is None:
            method, target, keep_alive = "", "", False
            response = Response(400, "text/plain; charset=utf-8", f"bad request: {bad}\n".encode())
        else:
            method, target = head.method, head.target
            peer_cert = writer.get_extra_info("peercert")  # None without TLS, {} without a verified certificate
            response = await self._answer(Request(method, target, connection.client, head.headers, peer_cert or None))
            keep_alive = head.keeps_alive and not last and response.stream is None
        response = self._finish(response)
        log.debug("%s %s %s %d", connection.client, method or "-", target or "-", response.status)
        try:
            writer.write(encode(response, with_body=method != "HEAD", keep_alive=keep_alive))
            if response.stream is not None and method != "HEAD":
                await self._stream(response.stream, reader, writer)
            if writer.transport.get_write_buffer_size():  # all in the kernel's buffer already: nothing to wait for
                async with asyncio.timeout(WRITE_DEADLINE_S):
                    await writer.drain()
        except TimeoutError:
            self._connections.note_cut(connection.client, f"response not read within {WRITE_DEADLINE_S:g} s")
            connection.cut = True
            return False
        finally:
            if response.stream is not None:
                response.stream.close()
        return keep_alive

    async def _stream(self, stream: Stream, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Write a streamed body (the live page's /events) until it ends or the client goes: each chunk
        under the write deadline, and the client's end of the connection (EOF: it sends nothing after its
        request) ends the stream at its next chunk. Through ``writer``, so the same under TLS."""
        gone = asyncio.ensure_future(reader.read(1))
        try:
            async for chunk in stream.chunks():
                if gone.done():
                    return
                writer.write(chunk)
                async with asyncio.timeout(WRITE_DEADLINE_S):
                    await writer.drain()
        finally:
            gone.cancel()
            if gone.done() and not gone.cancelled():
                gone.exception()  # a reset connection: retrieved, so asyncio does not log it as unhandled

    async def _answer(self, request: Request) -> Response:
        try:
            if self._admit_request is not None:
                admitted = await self._admit_request(request)
                if isinstance(admitted, Response):
                    return admitted
                request = admitted
            return self._respond(request)
        except Exception:  # a rendering bug answers 500, never takes the server down
            log.exception("answering %s %s failed", request.method, request.target)
            return Response(500, "text/plain; charset=utf-8", b"internal error (see the daemon's log)\n")

    # ---- cut-off warnings ----
    def _cut_held(self) -> None:
        if self._held is not None:
            self._held.set()

    async def _report_held(self) -> None:
        """The cut-offs held back, said when due. Woken only when one is held: a wake-up every second to look
        cost the idle server 0.18 ms of CPU a second, a quarter of what one scrape a second costs (round 6)."""
        assert self._held is not None
        while True:
            await self._held.wait()
            self._held.clear()
            while (wait_s := self._connections.held_for_s()) is not None:
                await asyncio.sleep(max(0.0, wait_s))
                self._connections.report_if_due()
