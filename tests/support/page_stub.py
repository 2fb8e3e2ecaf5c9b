"""A stand-in for the daemon's live page endpoints, for the browser tests and benchmarks/page_render.py.

It serves the real page (publish/live_feed.page, with the real Content-Security-Policy of publish/http.py),
an /events stream of summaries built by the real ``publish.live.summary`` (a hot card and a cool one,
derived from tests/support/published.py's example state), and /history as the interface with the `hist`
branch fixes it (docs/page.md, "History"): the stub of that route, until the daemon serves its own. Every
request is recorded. Pure stdlib HTTP on a thread: what the page does with the data is the browser's.
"""

from __future__ import annotations

import copy
import json
import math
import threading
import time
import urllib.parse
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from gpuwatch.config.cooling import FanConfig
from gpuwatch.model import FanMode, PowerMode, PublishedState, TempReading
from gpuwatch.publish.history import point
from gpuwatch.publish.http import _PAGE_HEADERS
from gpuwatch.publish.live import Summary, redacted, summary
from gpuwatch.publish.live_feed import page, sse
from tests.support.published import GPU_A, GPU_B, GPU_GONE, example_state, with_rungs

HOSTNAME = "gpu-box-3"
STEP_S = {"15m": 1.0, "1h": 1.0, "24h": 10.0, "7d": 10.0}
SPAN_S = {"15m": 900.0, "1h": 3600.0, "24h": 86400.0, "7d": 604800.0}


def hot_and_cool(root: Path) -> PublishedState:
    """GPU A at 99 °C junction against its 100 °C limit, fan at 100 %, its cap lowered; GPU B idle at 48 °C,
    its governor not acting; no GPU off the bus, no run held."""
    state = example_state(root)
    hot = {"edge": 84.0, "junction": 99.0, "mem": 90.0}
    cool = {"edge": 41.0, "junction": 48.0, "mem": 46.0}

    def temps(gpu_temps: tuple[TempReading, ...], values: dict[str, float]) -> tuple[TempReading, ...]:
        return tuple(replace(t, temp_c=values.get(t.label, t.temp_c)) for t in gpu_temps)

    gpus = tuple(replace(g, temps=temps(g.temps, hot), fan_duty_ratio=1.0, pwm=255, gpu_busy_ratio=1.0,
                         power_w=231.0) if g.gpu_id == GPU_A else
                 replace(g, temps=temps(g.temps, cool), pwm=128, gpu_busy_ratio=0.0, power_w=38.0)
                 for g in state.snapshot.gpus if g.gpu_id != GPU_GONE)
    fans = (replace(state.fans[0], target_ratio=1.0, sensor_temp_c=99.0),
            replace(state.fans[1], mode=FanMode.CURVE, sensor_temp_c=48.0, target_ratio=0.5, stalled=False,
                    rpm=900, message=None))
    powers = tuple(replace(p, mode=PowerMode.GOVERNING, cap_w=231.0) if p.gpu_id == GPU_A else
                   replace(p, mode=PowerMode.IDLE, cap_w=p.original_cap_w, reason=None) for p in state.powers)
    trainers = (replace(state.trainers[0], gpus=(GPU_A,)),)
    resets = tuple(replace(r, recovering=False) for r in state.snapshot.resets)
    snapshot = replace(state.snapshot, gpus=gpus, resets=resets)
    # Its rungs as the tick publishes them for this state (the page's summary reads them: publish/live.py).
    return with_rungs(replace(state, snapshot=snapshot, fans=fans, powers=powers, trainers=trainers, clocks=(),
                              unmanaged=()))


def history(now_unix: float, range_name: str) -> dict[str, Any]:
    """/history's JSON (the interface's schema 1) over ``range_name``: smooth series, a gap of a minute (a
    daemon restart), the cap lowered and a pause as events."""
    step, span = STEP_S[range_name], SPAN_S[range_name]
    count = int(span / step)
    t = [now_unix - span + (i + 1) * step for i in range(count)]
    gap = range(count // 2, count // 2 + max(2, int(60 / step)))

    def series(base: float, swing: float, period_s: float) -> list[float | None]:
        return [None if i in gap else round(base + swing * math.sin(u / period_s), 1) for i, u in enumerate(t)]

    return {
        "schema": 1, "range": range_name, "step_s": step, "now_unix": now_unix, "t": t,
        "gpus": {GPU_A: {"hottest_c": series(92, 7, 600), "fan_pct": series(85, 15, 700),
                         "power_w": series(240, 20, 500), "busy_pct": series(95, 5, 300),
                         "cap_w": series(250, 15, 900), "sclk_mhz": series(2300, 100, 400)},
                 GPU_B: {"hottest_c": series(48, 2, 800), "fan_pct": series(30, 0, 800),
                         "power_w": series(38, 3, 800), "busy_pct": series(2, 2, 800),
                         "cap_w": series(289, 0, 800), "sclk_mhz": series(500, 0, 800)}},
        "runs": {"resnet": {"steps_per_s": series(4.5, 0.4, 300)}},
        "events": [{"unix": now_unix - span * 0.3, "kind": "cap", "text": "cap of GPU A lowered to 250 W",
                    "gpu": GPU_A, "run": None},
                   {"unix": now_unix - span * 0.2, "kind": "pause", "text": "run resnet paused: hot",
                    "gpu": None, "run": "resnet"},
                   {"unix": now_unix - span * 0.15, "kind": "resume", "text": "run resnet resumed",
                    "gpu": None, "run": "resnet"}],
    }


class PageStub:
    """The page, /events and /history on 127.0.0.1; ``tick()`` sends the next tick to every stream."""

    def __init__(self, state: PublishedState, *, sensitive: bool = True, serve_history: bool = True,
                 html: bytes | None = None, snapshot_points: list[dict[str, Any]] | None = None) -> None:
        """``html``: another page than this checkout's (a benchmark's baseline); ``snapshot_points``: the
        stream snapshot's history (else the current tick's point alone)."""
        self.state = state
        self.html = page() if html is None else html
        self.snapshot_points = snapshot_points
        self.sensitive = sensitive
        self.serve_history = serve_history
        self.requests: list[str] = []
        self.tick_number = 7200
        self._cond = threading.Condition()
        self._message = b""
        self._seq = 0
        self._closing = False
        self.summary = self._summary()
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                stub.requests.append(self.path)
                url = urllib.parse.urlsplit(self.path)
                if url.path == "/":
                    self._send(200, "text/html; charset=utf-8", stub.html, _PAGE_HEADERS)
                elif url.path == "/history" and stub.serve_history:
                    wanted = urllib.parse.parse_qs(url.query).get("range", ["1h"])[0]
                    if wanted not in SPAN_S:
                        self._send(400, "text/plain", b"range: one of 15m, 1h, 24h, 7d\n")
                        return
                    body = json.dumps(history(stub.summary["taken_unix"] - 1, wanted)).encode()
                    self._send(200, "application/json", body, (("Cache-Control", "no-store"),))
                elif url.path == "/events":
                    stub._stream(self)
                else:
                    self._send(404, "text/plain", b"not found\n")

            def _send(self, code: int, kind: str, body: bytes, headers: tuple[tuple[str, str], ...] = ()) -> None:
                self.send_response(code)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                for name, value in headers:
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(body)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> PageStub:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        self._server.shutdown()
        self._server.server_close()

    def _summary(self) -> Summary:
        tick = summary(self.state, FanConfig(), HOSTNAME)
        tick = tick | {"tick": self.tick_number, "taken_unix": round(time.time(), 3)}
        return tick if self.sensitive else redacted(tick)

    def tick(self) -> None:
        self.tick_number += 1
        self.summary = self._summary()
        with self._cond:
            self._message = sse({"summary": self.summary, "point": point(self.summary), "events": []})
            self._seq += 1
            self._cond.notify_all()

    def _stream(self, handler: BaseHTTPRequestHandler) -> None:
        handler.send_response(200)
        handler.send_header("Content-Type", "text/event-stream; charset=utf-8")
        handler.send_header("Cache-Control", "no-cache")
        handler.end_headers()
        points = self.snapshot_points if self.snapshot_points is not None else [point(self.summary)]
        snapshot = {"summary": copy.deepcopy(self.summary), "points": points, "events": []}
        seen = self._seq
        try:
            handler.wfile.write(b"retry: 1000\n\n" + sse(snapshot, event="snapshot"))
            handler.wfile.flush()
            while True:
                with self._cond:
                    if self._seq == seen and not self._closing:
                        self._cond.wait(timeout=1.0)
                    if self._closing:
                        return
                    if self._seq == seen:
                        continue
                    seen, message = self._seq, self._message
                handler.wfile.write(message)
                handler.wfile.flush()
        except OSError:
            return  # the page went away
