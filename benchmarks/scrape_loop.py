"""A Prometheus stand-in for machines without one: scrapes each target's /metrics every interval, in its own process.

Where no Prometheus binary can run (the device machine: no network, no Debian packages), benchmarks/daemon_cost.py
``--scraper python`` starts this beside the daemons and measures its CPU too. Like Prometheus it keeps one
keep-alive connection per target, asks for gzip and for the text format with Prometheus's own Accept header,
reads and decompresses the whole body, and times out a scrape at the interval; it does not parse the body or
store samples (its own cost is no part of the exporters'). Every target is scraped once per interval, one after
the other, at a fixed phase of the interval (Prometheus spreads its targets over the interval in the same way).

Its counts go to ``--stats FILE`` (JSON, replaced atomically after every round): per job the scrapes, the failed
ones and every scrape's duration in ms, so a caller diffs two reads to get a window's counts. SIGTERM stops it.

    python benchmarks/scrape_loop.py --interval-s 1 --stats FILE JOB=PORT [JOB=PORT ...]
"""

from __future__ import annotations

import argparse
import gzip
import http.client
import json
import os
import signal
import time
from pathlib import Path

# What Prometheus 2.x sends (scrape/scrape.go, acceptHeader for the default scrape protocols).
ACCEPT = ("application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,"
          "text/plain;version=0.0.4;q=0.5,*/*;q=0.1")
MAX_DURATIONS = 100_000  # per job: a day at 1 s


class Target:
    def __init__(self, job: str, port: int, timeout_s: float) -> None:
        self.job, self.port, self.timeout_s = job, port, timeout_s
        self.conn: http.client.HTTPConnection | None = None
        self.scrapes = self.failed = 0
        self.durations_ms: list[float] = []

    def scrape(self) -> None:
        start = time.monotonic()
        ok = False
        try:
            if self.conn is None:
                self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=self.timeout_s)
            self.conn.request("GET", "/metrics", headers={"Accept": ACCEPT, "Accept-Encoding": "gzip",
                                                          "User-Agent": "gpuwatch-bench-scrape-loop"})
            response = self.conn.getresponse()
            body = response.read()
            if response.getheader("Content-Encoding") == "gzip":
                body = gzip.decompress(body)
            ok = response.status == 200 and bool(body)
            if response.getheader("Connection", "").lower() == "close":
                self.conn.close()
                self.conn = None
        except (OSError, http.client.HTTPException):
            if self.conn is not None:
                self.conn.close()
            self.conn = None
        self.scrapes += 1
        self.failed += not ok
        if len(self.durations_ms) < MAX_DURATIONS:
            self.durations_ms.append((time.monotonic() - start) * 1e3)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--interval-s", type=float, default=1.0)
    parser.add_argument("--stats", type=Path, required=True, help="where the counts go (JSON)")
    parser.add_argument("targets", nargs="+", help="JOB=PORT on 127.0.0.1")
    args = parser.parse_args()
    targets = []
    for spec in args.targets:
        job, _, port = spec.partition("=")
        targets.append(Target(job, int(port), args.interval_s))
    stopping = False

    def stop(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    due = time.monotonic()
    while not stopping:
        for target in targets:
            target.scrape()
        stats = {t.job: {"scrapes": t.scrapes, "failed": t.failed, "durations_ms": t.durations_ms} for t in targets}
        tmp = args.stats.with_suffix(".tmp")
        tmp.write_text(json.dumps(stats))
        os.replace(tmp, args.stats)
        due += args.interval_s
        delay = due - time.monotonic()
        if delay < 0:  # a round overran: start the schedule again, as Prometheus skips rather than bursts
            due, delay = time.monotonic(), 0.0
        time.sleep(delay)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
