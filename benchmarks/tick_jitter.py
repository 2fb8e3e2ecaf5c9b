"""Tick jitter under scrape load: 50 concurrent /metrics clients must not delay the control loop.

The daemon runs on an 8-GPU fake tree; its ticks are observed from outside through the state file's
``taken_unix`` (written at the end of every tick), polled every few ms. Jitter of a tick is how far
its spacing from the previous tick strays from ``interval_s``. Two phases of equal length, idle
then loaded (N clients scraping back to back on loopback), so the ratio isolates the load's effect.
Target: loaded p99 < 50 ms.

    .venv/bin/python benchmarks/tick_jitter.py [--clients 50] [--phase-s 10] [--interval-s 0.25]
"""

from __future__ import annotations

import argparse
import http.client
import json
import threading
import time
from pathlib import Path

from _common import (
    build_tree,
    cleanup,
    fixtures_arg,
    free_port,
    machine,
    median,
    percentile,
    start_daemon,
    stop,
    temp_dir,
    wait_port,
    wait_state,
    write_config,
)

TARGET_P99_MS = 50.0


def watch_ticks(state_file: Path, until: float) -> list[float]:
    """Every distinct taken_unix the daemon publishes until ``until`` (monotonic)."""
    seen: list[float] = []
    while time.monotonic() < until:
        try:
            taken = float(json.loads(state_file.read_text())["taken_unix"])
        except (OSError, ValueError, KeyError):
            taken = None
        if taken is not None and (not seen or taken != seen[-1]):
            seen.append(taken)
        time.sleep(0.002)
    return seen


def client(port: int, until: float, counts: list[int], errors: list[str]) -> None:
    done = 0
    while time.monotonic() < until:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        try:
            conn.request("GET", "/metrics")
            response = conn.getresponse()
            response.read()
            if response.status == 200:
                done += 1
            else:
                errors.append(f"HTTP {response.status}")
        except OSError as exc:
            errors.append(type(exc).__name__)
        finally:
            conn.close()
    counts.append(done)


def jitter_ms(ticks: list[float], interval_s: float) -> list[float]:
    return [abs((b - a) - interval_s) * 1e3 for a, b in zip(ticks, ticks[1:], strict=False)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--phase-s", type=float, default=10.0, help="length of the idle and the loaded phase")
    parser.add_argument("--interval-s", type=float, default=0.25,
                        help="daemon tick (default 0.25 s: 40 ticks per 10 s)")
    parser.add_argument("--gpus", type=int, default=8)
    fixtures_arg(parser)
    args = parser.parse_args()
    work = temp_dir("jitter")
    daemon = None
    try:
        build_tree(work / "sys", args.fixtures, args.capture, args.gpus)
        (work / "run").mkdir()
        port = free_port()
        config = write_config(
            work / "gpuwatch.toml",
            work / "sys",
            work / "run",
            f'[http]\nlisten = "127.0.0.1"\nport = {port}\n',
            args.interval_s,
        )
        daemon = start_daemon(config, work / "daemon.log")
        state_file = work / "run" / "state.json"
        wait_state(state_file, daemon)
        wait_port(port)
        time.sleep(2 * args.interval_s)
        idle = watch_ticks(state_file, time.monotonic() + args.phase_s)
        until = time.monotonic() + args.phase_s
        counts: list[int] = []
        errors: list[str] = []
        threads = [
            threading.Thread(target=client, args=(port, until, counts, errors), daemon=True)
            for _ in range(args.clients)
        ]
        for thread in threads:
            thread.start()
        loaded = watch_ticks(state_file, until)
        for thread in threads:
            thread.join(10)
        print(f"machine: {machine()}")
        print(
            f"{args.gpus} GPUs; tick {args.interval_s} s; phases of {args.phase_s:.0f} s; "
            f"{args.clients} clients scraping /metrics back to back in the loaded phase\n"
        )
        print(f"{'phase':<8} {'ticks':>6} {'scrapes':>8} {'errors':>7} "
              f"{'jitter p50 ms':>14} {'p99 ms':>8} {'max ms':>8}")
        rows = [("idle", idle, 0, 0), ("loaded", loaded, sum(counts), len(errors))]
        p99 = {}
        for name, ticks, scrapes, errs in rows:
            values = jitter_ms(ticks, args.interval_s)
            p99[name] = percentile(values, 99)
            print(
                f"{name:<8} {len(ticks):>6} {scrapes:>8} {errs:>7} {median(values):>14.2f} {p99[name]:>8.2f} "
                f"{max(values, default=float('nan')):>8.2f}"
            )
        print(f"\nloaded p99 / target ({TARGET_P99_MS:.0f} ms): {p99['loaded'] / TARGET_P99_MS:.2f}")
        print(f"loaded p99 / idle p99: {p99['loaded'] / p99['idle'] if p99['idle'] else float('nan'):.2f}")
        if errors:
            print(f"client errors (first 5): {errors[:5]}")
        return 0 if p99["loaded"] < TARGET_P99_MS else 1
    finally:
        if daemon is not None:
            stop(daemon)
        cleanup(work)


if __name__ == "__main__":
    raise SystemExit(main())
