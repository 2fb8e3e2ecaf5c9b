"""The read-only HTTP endpoint: /metrics, /healthz and /status, served from a daemon thread.

Every response is rendered from the StateHolder (what the last tick published); nothing here reads
sysfs or changes anything, so a hung GPU read cannot hang a scrape and HTTP cannot control the
machine. Only GET and HEAD are allowed.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import generate_latest

from gpuwatch.config import ThermalConfig
from gpuwatch.metrics import GpuwatchCollector
from gpuwatch.state import StateHolder

log = logging.getLogger(__name__)

# Same rule as `gpuwatch status`: state older than this many intervals (+ slack) means a stuck loop.
STALE_AFTER_TICKS = 5
STALE_SLACK_S = 2.0
# generate_latest writes the classic text format; newer clients' CONTENT_TYPE_LATEST may name 1.0.0.
METRICS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def health(holder: StateHolder, now_monotonic: float) -> tuple[bool, str]:
    """(fresh, reason) for /healthz; pure apart from reading the holder."""
    state = holder.latest()
    if state is None:
        return False, "no sample published yet"
    interval_s = state.daemon.interval_s if state.daemon else 1.0
    age_s = now_monotonic - state.snapshot.taken_monotonic
    if age_s > STALE_AFTER_TICKS * interval_s + STALE_SLACK_S:
        return False, f"last sample is {age_s:.1f}s old: the control loop is stuck"
    failures = state.daemon.failures if state.daemon else ()
    return True, "ok" + "".join(f"\nfailing: {f}" for f in failures)


class HttpServer:
    """Owns the listening socket and its thread; ``port`` is the bound port (useful with port 0)."""

    def __init__(self, holder: StateHolder, thermal: ThermalConfig, listen: str, port: int,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        registry = CollectorRegistry(auto_describe=False)
        registry.register(GpuwatchCollector(holder.latest, thermal))
        handler = _handler_class(holder, registry, monotonic)
        self._server = ThreadingHTTPServer((listen, port), handler)
        self._server.daemon_threads = True
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


def _handler_class(holder: StateHolder, registry: CollectorRegistry,
                   monotonic: Callable[[], float]) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "gpuwatch"

        def do_GET(self) -> None:
            self._respond(body=True)

        def do_HEAD(self) -> None:
            self._respond(body=False)

        def _respond(self, body: bool) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                self._send(200, METRICS_CONTENT_TYPE, generate_latest(registry), body)
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
