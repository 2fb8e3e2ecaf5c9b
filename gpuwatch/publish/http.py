"""The read-only HTTP endpoint: /metrics, /healthz and /status, and the live page (/ and /events,
docs/page.md), served from its own thread.

Every response is rendered from the StateHolder (what the last tick published); nothing here reads
sysfs or changes anything, so a hung GPU read cannot hang a scrape and HTTP cannot control the
machine. Only GET and HEAD are allowed. The connections, their deadlines and limits are serve.py's.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import generate_latest

from gpuwatch.publish.live_feed import LiveFeed, TooManyClients, page
from gpuwatch.publish.metrics import GpuwatchCollector
from gpuwatch.publish.serve import REQUEST_DEADLINE_S, Server
from gpuwatch.publish.state import StateHolder, is_stale
from gpuwatch.publish.wire import Response, bind

log = logging.getLogger("gpuwatch.http")  # the name log lines had before the move

# generate_latest writes the classic text format; newer clients' CONTENT_TYPE_LATEST may name 1.0.0.
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
    """The /metrics body rendered once per published state, however many clients scrape it.

    Everything the collector exports comes from the published state (no scrape-time clock, no settings
    of its own: the thermal limits in force are published too), so a body stays valid until the next
    tick publishes; concurrent scrapes share one render.
    """

    def __init__(self, holder: StateHolder, registry: CollectorRegistry) -> None:
        self._holder = holder
        self._registry = registry
        self._lock = threading.Lock()
        self._rendered_for: object | None = None
        self._body = b""

    def body(self) -> bytes:
        with self._lock:
            state = self._holder.latest()
            if state is None or state is not self._rendered_for:
                self._body = generate_latest(self._registry)
                self._rendered_for = state
            return self._body


class HttpServer:
    """Owns the listening socket and its thread; ``port`` is the bound port (useful with port 0).

    The constructor binds (OSError when the port is taken); ``start()`` serves, ``stop()`` closes.
    """

    def __init__(self, holder: StateHolder, listen: str, port: int,
                 monotonic: Callable[[], float] = time.monotonic,
                 request_deadline_s: float = REQUEST_DEADLINE_S, live: LiveFeed | None = None) -> None:
        registry = CollectorRegistry(auto_describe=False)
        registry.register(GpuwatchCollector(holder.latest))
        self._metrics = MetricsCache(holder, registry)
        self._sock = bind(listen, port)
        self._server = Server(self._sock, _routes(holder, self._metrics, monotonic, live), request_deadline_s)

    @property
    def port(self) -> int:
        return int(self._sock.getsockname()[1])

    @property
    def address(self) -> str:
        return str(self._sock.getsockname()[0])

    def start(self) -> None:
        self._server.start()
        log.info("HTTP listening on %s:%d (/metrics, /healthz, /status, the live page /)", self.address, self.port)

    def stop(self) -> None:
        self._server.stop()


_TEXT = "text/plain; charset=utf-8"


def _routes(holder: StateHolder, metrics: MetricsCache, monotonic: Callable[[], float],
            live: LiveFeed | None = None) -> Callable[[str, str], Response]:
    page_body = page() if live is not None else b""

    def respond(method: str, target: str) -> Response:
        if method not in ("GET", "HEAD"):
            return Response(405, _TEXT, b"read-only endpoint: GET or HEAD only\n", (("Allow", "GET, HEAD"),))
        path = target.split("?", 1)[0]
        if live is not None and path in ("/", "/index.html", "/events"):
            return _live(live, page_body, path)
        if path == "/metrics":
            return Response(200, METRICS_CONTENT_TYPE, metrics.body())
        if path == "/healthz":
            fresh, reason = health(holder, monotonic())
            return Response(200 if fresh else 503, _TEXT, (reason + "\n").encode())
        if path == "/status":
            document = holder.document()
            if document is None:
                return Response(503, _TEXT, b"no sample published yet\n")
            return Response(200, "application/json", json.dumps(document, indent=2, sort_keys=True).encode())
        return Response(404, _TEXT, b"not found: try /, /metrics, /healthz, /status\n")

    return respond


# The page may load nothing from elsewhere (issue 37): the browser enforces it too.
_PAGE_HEADERS = (
    ("Content-Security-Policy", "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
                                "connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'"),
    ("Cache-Control", "no-cache"),
    ("X-Content-Type-Options", "nosniff"),
)


def _live(live: LiveFeed, page_body: bytes, path: str) -> Response:
    """/ (the page) or /events (its Server-Sent Events: a stream, or 503 over the cap on live pages)."""
    if path != "/events":
        return Response(200, "text/html; charset=utf-8", page_body, _PAGE_HEADERS)
    try:
        stream = live.open()
    except TooManyClients as exc:
        return Response(503, _TEXT, f"{exc}; retry later\n".encode(), (("Retry-After", "5"),))
    return Response(200, "text/event-stream; charset=utf-8", b"",
                    (("Cache-Control", "no-cache"), ("X-Accel-Buffering", "no")), stream=stream)
