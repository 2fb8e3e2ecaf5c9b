"""The read-only HTTP endpoint: /metrics, /healthz and /status, and the live page (/, /events and /history,
docs/page.md), served from its own thread.

Every response is rendered from the StateHolder (what the last tick published); nothing here reads
sysfs or changes anything, so a hung GPU read cannot hang a scrape and HTTP cannot control the
machine. Only GET and HEAD are allowed. The connections, their deadlines and limits are serve.py's.

With ``[http] web_config`` (docs/security.md): TLS from the Gate in force (publish/tls.py, re-read when
its files change), every request authenticated when the web config has ``basic_auth_users`` (401 with
``WWW-Authenticate`` otherwise; publish/auth.py), the configured response headers on every answer. /status
gives the full document only to the clients ``[http] expose_sensitive`` names, a redacted one to the
others (publish/redact.py); /history the same way (event texts as their class).
"""

from __future__ import annotations

import asyncio
import dataclasses
import gzip
import json
import logging
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from urllib.parse import parse_qs

from prometheus_client import CollectorRegistry
from prometheus_client.core import Metric

from gpuwatch.config.sections import ExposeSensitive, HttpConfig
from gpuwatch.publish.auth import BasicAuth, credentials
from gpuwatch.publish.exposition import TextRenderer
from gpuwatch.publish.families import gauge
from gpuwatch.publish.history_format import parse_range
from gpuwatch.publish.history_store import HistoryStore
from gpuwatch.publish.live_feed import LiveFeed, TooManyClients, page
from gpuwatch.publish.metrics import GpuwatchCollector
from gpuwatch.publish.redact import is_loopback, redact, sees_sensitive
from gpuwatch.publish.serve import KEEPALIVE_IDLE_S, MAX_REQUESTS_PER_CONNECTION, REQUEST_DEADLINE_S, Server
from gpuwatch.publish.state import StateHolder, is_stale
from gpuwatch.publish.tls import Gate, GateWatch
from gpuwatch.publish.wire import Request, Response, accepts_gzip, bind

log = logging.getLogger("gpuwatch.http")  # the name log lines had before the move

# TextRenderer writes generate_latest's classic text format; newer clients' CONTENT_TYPE_LATEST may name 1.0.0.
METRICS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def health(holder: StateHolder, now_monotonic: float) -> tuple[bool, str]:
    """(fresh, reason) for /healthz; pure apart from reading the holder."""
    state = holder.latest()
    if state is None:
        return False, "no sample published yet"
    interval_s = state.daemon.interval_s if state.daemon else 1.0
    age_s = now_monotonic - state.snapshot.taken_monotonic
    if is_stale(age_s, interval_s):
        return False, f"last sample is {age_s:.1f}s old: the control loop is stuck"
    failures = state.daemon.failures if state.daemon else ()
    return True, "ok" + "".join(f"\nfailing: {f}" for f in failures)


class MetricsCache:
    """The /metrics body rendered once per published state, however many clients scrape it, and its gzip
    compressed once too (Prometheus asks for gzip).

    Everything the collector exports comes from the published state (no scrape-time clock, no settings
    of its own: the thermal limits in force are published too), so a body stays valid until the next
    tick publishes; concurrent scrapes share one render. While someone scrapes (a scrape in the last
    ``PRERENDER_WHILE_SCRAPED_S``), ``prerender`` renders each published state as soon as it is published,
    on its own thread: the render (5-15 ms at 8 GPUs with prometheus_client's formatting, about 1 ms
    with exposition.TextRenderer's over gpuwatch's row families, mostly the collector) is then off the
    scrape's path, where Prometheus's scrape every 15 s (or 1 s) always met a new tick and paid it. Nobody
    scraping, nothing is rendered ahead.
    """

    def __init__(self, holder: StateHolder, registry: CollectorRegistry,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self._holder = holder
        self._registry = registry
        self._mono = monotonic
        self._lock = threading.Lock()
        self._rendered_for: object | None = None
        self._body = b""
        self._gzipped: bytes | None = None
        self._scraped_at = float("-inf")
        self._text = TextRenderer()  # generate_latest's bytes, the unchanging parts formatted once

    def body(self) -> bytes:
        self._scraped_at = self._mono()
        with self._lock:
            return self._render()

    def gzipped(self) -> bytes:
        """The body gzip-compressed (level 1: docs/performance.md measured it)."""
        self._scraped_at = self._mono()
        with self._lock:
            return self._compressed()

    def prerender(self, stopping: threading.Event) -> None:
        """Until ``stopping``: each newly published state rendered (and compressed) ahead of the next scrape."""
        seen: object | None = None
        while not stopping.is_set():
            # Woken by a tick or by the server's stop (HttpServer.stop: ``wake``), never polling in between.
            seen = self._holder.wait_newer(seen, timeout_s=STOP_CHECK_S, stopping=stopping)
            if seen is not None and self._mono() - self._scraped_at < PRERENDER_WHILE_SCRAPED_S:
                try:
                    with self._lock:
                        self._compressed()
                except Exception:  # a rendering bug is the scrape's to answer (500), never this thread's end
                    log.debug("rendering /metrics ahead failed", exc_info=True)

    def _compressed(self) -> bytes:
        body = self._render()
        if self._gzipped is None:
            self._gzipped = gzip.compress(body, compresslevel=GZIP_LEVEL, mtime=0)
        return self._gzipped

    def _render(self) -> bytes:
        state = self._holder.latest()
        if state is None or state is not self._rendered_for:
            self._body = self._text(self._registry)
            self._rendered_for = state
            self._gzipped = None
        return self._body


GZIP_LEVEL = 1
STOP_CHECK_S = 60.0  # the prerender thread's wait when no tick comes (stopping wakes it before)
PRERENDER_WHILE_SCRAPED_S = 600.0  # rendered ahead while a scrape came in the last 10 min (a 5 min interval, twice)


class WebCollector:
    """The web configuration's own series: the server certificate's expiry (absent without TLS)."""

    def __init__(self, watch: GateWatch) -> None:
        self._watch = watch

    def collect(self) -> Iterator[Metric]:
        expiry = self._watch.gate().certificate_expiry_unix
        if expiry is not None:
            family = gauge("web_certificate_expiry_timestamp_seconds", "When the HTTP endpoint's TLS server "
                           "certificate expires (its notAfter), Unix seconds.", labels=())
            family.add_metric([], expiry)
            yield family


class HttpServer:
    """Owns the listening socket and its thread; ``port`` is the bound port (useful with port 0).

    The constructor reads the web config (ConfigError when it cannot be used) and binds (OSError when the
    port is taken); ``start()`` serves, ``reload()`` re-reads the web config's files, ``stop()`` closes.
    """

    def __init__(self, holder: StateHolder, listen: str, port: int,
                 monotonic: Callable[[], float] = time.monotonic,
                 request_deadline_s: float = REQUEST_DEADLINE_S, web_config: Path | None = None,
                 expose_sensitive: ExposeSensitive | None = None, live: LiveFeed | None = None,
                 keepalive_idle_s: float = KEEPALIVE_IDLE_S, max_requests: int = MAX_REQUESTS_PER_CONNECTION,
                 history: HistoryStore | None = None) -> None:
        """``expose_sensitive`` None: ``[http]``'s default (config/sections.py, its one home)."""
        expose = expose_sensitive or HttpConfig().expose_sensitive
        self._watch = GateWatch(web_config)
        self._auth = BasicAuth()
        self._holder = holder
        registry = CollectorRegistry(auto_describe=False)
        registry.register(GpuwatchCollector(holder.latest))
        registry.register(WebCollector(self._watch))
        self._metrics = MetricsCache(holder, registry)
        self._stopping = threading.Event()
        self._prerender = threading.Thread(target=self._metrics.prerender, args=(self._stopping,),
                                           name="gpuwatch-metrics", daemon=True)
        self._sock = bind(listen, port)
        gate = self._watch.gate
        self._server = Server(self._sock, _routes(holder, self._metrics, monotonic, expose, live, history),
                              request_deadline_s, tls=lambda: gate().context, admit=_admission(gate, self._auth),
                              finish=lambda response: _with_headers(response, gate()),
                              keepalive_idle_s=keepalive_idle_s, max_requests=max_requests)
        self.tls = gate().context is not None

    @property
    def port(self) -> int:
        return int(self._sock.getsockname()[1])

    @property
    def address(self) -> str:
        return str(self._sock.getsockname()[0])

    def start(self) -> None:
        self._server.start()
        self._prerender.start()
        log.info("HTTP listening on %s:%d (/metrics, /healthz, /status, /history, the live page /%s)", self.address,
                 self.port,
                 "; TLS" if self.tls else "")

    def reload(self) -> None:
        """SIGHUP: the web config and its certificates read again for new connections."""
        self._watch.reload()

    def stop(self) -> None:
        self._stopping.set()
        self._holder.wake()  # the prerender thread sees it at once
        self._server.stop()
        self._auth.close()
        if self._prerender.is_alive():
            self._prerender.join(5.0)


_TEXT = "text/plain; charset=utf-8"


def _with_headers(response: Response, gate: Gate) -> Response:
    """The web config's ``http_server_config.headers`` added to an answer (serve.py's ``finish``: every
    answer, a 400 for a malformed request included)."""
    return dataclasses.replace(response, headers=response.headers + gate.headers) if gate.headers else response


def _admission(gate: Callable[[], Gate], auth: BasicAuth) -> Callable[[Request], Awaitable[Request | Response]]:
    """serve.py's ``admit``: the client certificate's names and the basic auth credentials checked."""

    async def admit(request: Request) -> Request | Response:
        now = gate()
        if now.allowed_sans and not _san_allowed(request, now.allowed_sans):
            return Response(403, _TEXT, b"client certificate not allowed\n")
        if not now.users:
            return request
        given = credentials(request.headers.get("authorization"))
        if given is None:
            return _UNAUTHORIZED
        verdict = await auth.check(now.users, *given, client=request.client)
        if verdict == "busy":
            return Response(429, _TEXT, b"too many password checks at once; retry\n", (("Retry-After", "1"),))
        if verdict == "denied":
            return _UNAUTHORIZED
        return dataclasses.replace(request, user=given[0])

    return admit


_UNAUTHORIZED = Response(401, _TEXT, b"credentials required\n", (("WWW-Authenticate", 'Basic realm="gpuwatch"'),))


def _san_allowed(request: Request, allowed: frozenset[str]) -> bool:
    """exporter-toolkit's client_allowed_sans: one of the certificate's subjectAltNames is in the list."""
    names = (request.peer_cert or {}).get("subjectAltName", ())
    return any(str(value) in allowed for _, value in names)


def _routes(holder: StateHolder, metrics: MetricsCache, monotonic: Callable[[], float],
            expose_sensitive: ExposeSensitive, live: LiveFeed | None = None,
            history: HistoryStore | None = None) -> Callable[[Request], Response]:
    page_body = page() if live is not None else b""

    def route(request: Request) -> Response:
        if request.method not in ("GET", "HEAD"):
            return Response(405, _TEXT, b"read-only endpoint: GET or HEAD only\n", (("Allow", "GET, HEAD"),))
        path = request.path
        if live is not None and path in ("/", "/index.html", "/events"):
            return _live(live, page_body, path,
                         sees_sensitive(expose_sensitive, is_loopback(request.client), request.authenticated))
        if path == "/metrics":
            if accepts_gzip(request.headers):
                return Response(200, METRICS_CONTENT_TYPE, metrics.gzipped(), _GZIP_HEADERS)
            return Response(200, METRICS_CONTENT_TYPE, metrics.body(), (("Vary", "Accept-Encoding"),))
        if path == "/healthz":
            fresh, reason = health(holder, monotonic())
            return Response(200 if fresh else 503, _TEXT, (reason + "\n").encode())
        sensitive = sees_sensitive(expose_sensitive, is_loopback(request.client), request.authenticated)
        if path == "/status":
            document = holder.document()
            if document is None:
                return Response(503, _TEXT, b"no sample published yet\n")
            if not sensitive:
                document = redact(document)
            return Response(200, "application/json", json.dumps(document, indent=2, sort_keys=True).encode())
        if path == "/history" and history is not None:
            return _history(history, request, redacted=not sensitive)
        return Response(404, _TEXT, b"not found: try /, /metrics, /healthz, /status, /history\n")

    return route


_GZIP_HEADERS = (("Content-Encoding", "gzip"), ("Vary", "Accept-Encoding"))


def _history(history: HistoryStore, request: Request, redacted: bool) -> Response:
    """/history?range=15m|1h|24h|7d (docs/page.md): the on-disk ring's points and events, 400 for another range.

    The body is built on a worker thread (``_Built``), one at a time (``HistoryStore.encode``'s lock): an hour of
    8 GPUs is 0.1-0.2 s of reading and encoding, which on the server's own loop would hold every scrape that long."""
    range_name, bad = parse_range(parse_qs(request.target.partition("?")[2], keep_blank_values=True))
    if range_name is None:
        return Response(400, _TEXT, f"{bad}\n".encode())
    return Response(200, "application/json", b"", (("Cache-Control", "no-store"),),
                    stream=_Built(lambda: history.chunks(range_name, time.time(), redacted)))


class _Built:
    """A body made by ``build`` on a worker thread, sent piece by piece (serve.py's Stream)."""

    def __init__(self, build: Callable[[], list[bytes]]) -> None:
        self._build = build

    async def chunks(self) -> AsyncIterator[bytes]:
        try:
            pieces = await asyncio.to_thread(self._build)
        except Exception:  # the head is sent: the client gets a short body, the log says why
            log.exception("building /history failed")
            return
        while pieces:
            yield pieces.pop(0)  # each piece freed once written

    def close(self) -> None:
        pass


# The page may load nothing from elsewhere (issue 37): the browser enforces it too.
_PAGE_HEADERS = (
    ("Content-Security-Policy", "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
                                "connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'"),
    ("Cache-Control", "no-cache"),
    ("X-Content-Type-Options", "nosniff"),
)


def _live(live: LiveFeed, page_body: bytes, path: str, sensitive: bool) -> Response:
    """/ (the page) or /events (its Server-Sent Events: a stream, or 503 over the cap on live pages; the
    processes' names and users only to a reader /status does not redact for, ``sensitive``)."""
    if path != "/events":
        return Response(200, "text/html; charset=utf-8", page_body, _PAGE_HEADERS)
    try:
        stream = live.open(sensitive)
    except TooManyClients as exc:
        return Response(503, _TEXT, f"{exc}; retry later\n".encode(), (("Retry-After", "5"),))
    return Response(200, "text/event-stream; charset=utf-8", b"",
                    (("Cache-Control", "no-cache"), ("X-Accel-Buffering", "no")), stream=stream)
