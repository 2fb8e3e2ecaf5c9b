"""The read-only HTTP endpoint: /metrics, /healthz and /status, served from a daemon thread.

Every response is rendered from the StateHolder (what the last tick published); nothing here reads
sysfs or changes anything, so a hung GPU read cannot hang a scrape and HTTP cannot control the
machine. Only GET and HEAD are allowed.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import generate_latest

from gpuwatch.config import ThermalConfig
from gpuwatch.publish.metrics import GpuwatchCollector
from gpuwatch.publish.state import StateHolder, is_stale

_Request = socket.socket | tuple[bytes, socket.socket]  # socketserver's request
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


# Handler threads at once. Every Python thread competes with the control loop for the GIL, and the
# loop needs it back after each of its ~400 sysfs syscalls per tick (8 GPUs): unbounded threads
# under 50 concurrent scrapers pushed tick jitter p99 to ~200 ms (benchmarks/tick_jitter.py,
# docs/performance.md). Further clients wait in the listen backlog, not in the interpreter.
MAX_HANDLER_THREADS = 4
# A client that stalls mid-request holds a handler slot at most this long.
CLIENT_TIMEOUT_S = 5.0


class MetricsCache:
    """The /metrics body rendered once per published state, however many clients scrape it.

    Everything the collector exports comes from the published state (no scrape-time clock), so a
    body stays valid until the next tick publishes; concurrent scrapes share one render.
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


class _BoundedThreadingServer(ThreadingHTTPServer):
    """ThreadingHTTPServer with at most MAX_HANDLER_THREADS requests in flight."""

    daemon_threads = True
    # socketserver's default backlog of 5 drops SYNs under 50 concurrent clients (they then retry
    # after 1 s, 3 s...); queued connections cost nothing until a slot takes them.
    request_queue_size = 128

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler]) -> None:
        super().__init__(address, handler)
        self._slots = threading.BoundedSemaphore(MAX_HANDLER_THREADS)

    def process_request(self, request: _Request, client_address: Any) -> None:
        self._slots.acquire()
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request: _Request, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()


class HttpServer:
    """Owns the listening socket and its thread; ``port`` is the bound port (useful with port 0)."""

    def __init__(self, holder: StateHolder, thermal: ThermalConfig, listen: str, port: int,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        registry = CollectorRegistry(auto_describe=False)
        registry.register(GpuwatchCollector(holder.latest, thermal))
        handler = _handler_class(holder, MetricsCache(holder, registry), monotonic)
        self._server = _BoundedThreadingServer((listen, port), handler)
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def address(self) -> str:
        return str(self._server.server_address[0])

    def start(self) -> None:
        self._thread = threading.Thread(target=self._server.serve_forever, name="gpuwatch-http", daemon=True)
        self._thread.start()
        log.info("HTTP listening on %s:%d (/metrics, /healthz, /status)", self.address, self.port)

    def stop(self) -> None:
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join(timeout=5)
        self._server.server_close()


def _handler_class(holder: StateHolder, metrics: MetricsCache,
                   monotonic: Callable[[], float]) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "gpuwatch"
        timeout = CLIENT_TIMEOUT_S

        def do_GET(self) -> None:
            self._respond(body=True)

        def do_HEAD(self) -> None:
            self._respond(body=False)

        def _respond(self, body: bool) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                self._send(200, METRICS_CONTENT_TYPE, metrics.body(), body)
            elif path == "/healthz":
                fresh, reason = health(holder, monotonic())
                self._send(200 if fresh else 503, "text/plain; charset=utf-8", (reason + "\n").encode(), body)
            elif path == "/status":
                document = holder.document()
                if document is None:
                    self._send(503, "text/plain; charset=utf-8", b"no sample published yet\n", body)
                else:
                    payload = json.dumps(document, indent=2, sort_keys=True).encode()
                    self._send(200, "application/json", payload, body)
            else:
                self._send(404, "text/plain; charset=utf-8", b"not found: try /metrics, /healthz, /status\n", body)

        def _not_allowed(self) -> None:
            self._send(405, "text/plain; charset=utf-8", b"read-only endpoint: GET or HEAD only\n", True,
                       extra={"Allow": "GET, HEAD"})

        do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = _not_allowed

        def _send(self, code: int, content_type: str, payload: bytes, body: bool,
                  extra: dict[str, str] | None = None) -> None:
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(payload)))
            for key, value in (extra or {}).items():
                self.send_header(key, value)
            self.end_headers()
            if body:
                self.wfile.write(payload)

        def log_message(self, format: str, *args: object) -> None:
            log.debug("%s %s", self.address_string(), format % args)

    return Handler
