"""Scrape latency while slow clients hold connections: N connections to /metrics that send nothing or
trickle a byte at a time (half each; any the server closes is opened again at once, as an attacker
or a broken client would), against the same daemon's scrapes with no slow clients.

Sequential scrapes, one started every ``--every-s``, one new connection each, 5 s client timeout (a
timeout counts as 5 s). The tick
spacing is read from the state file meanwhile: slow clients must not slow the control loop either.
``--baseline DIR`` runs another checkout's daemon (e.g. the version before the event-loop server)
side by side in the same run, phases interleaved. Target: p99 under 1 s with 100 slow clients.

    .venv/bin/python benchmarks/slow_clients.py [--slow 100] [--scrapes 200] [--baseline /path/to/old/checkout]
"""

from __future__ import annotations

import argparse
import http.client
import json
import socket
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from _common import (
    REPO,
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

TIMEOUT_S = 5.0
TARGET_P99_S = 1.0


@dataclass
class Phase:
    latencies_s: list[float] = field(default_factory=list)
    timeouts: int = 0
    tick_gaps_s: list[float] = field(default_factory=list)


class SlowClients:
    """Keeps ``count`` connections open to ``port``: even ones idle, odd ones sending a byte every 0.5 s."""

    def __init__(self, port: int, count: int) -> None:
        self.port, self.count = port, count
        self.socks: list[socket.socket | None] = [None] * count
        self.sent = [0] * count
        self.reopened = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> SlowClients:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        for sock in self.socks:
            if sock is not None:
                sock.close()

    def _run(self) -> None:
        request = b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"y" * 4096
        while not self._stop.is_set():
            for i in range(self.count):
                sock = self.socks[i]
                try:
                    if sock is None:
                        sock = self.socks[i] = socket.create_connection(("127.0.0.1", self.port), timeout=1)
                        sock.setblocking(False)
                        self.sent[i] = 0
                    elif _closed(sock):
                        raise ConnectionError
                    elif i % 2:
                        sock.send(request[self.sent[i] % len(request):][:1])
                        self.sent[i] += 1
                except OSError:
                    if sock is not None:
                        sock.close()
                    self.socks[i] = None
                    self.reopened += 1
            self._stop.wait(0.5)


def _closed(sock: socket.socket) -> bool:
    try:
        return sock.recv(1, socket.MSG_PEEK) == b""
    except BlockingIOError:
        return False


def scrape(port: int) -> float | None:
    started = time.perf_counter()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=TIMEOUT_S)
    try:
        conn.request("GET", "/metrics")
        response = conn.getresponse()
        response.read()
    except OSError:
        return None
    finally:
        conn.close()
    return time.perf_counter() - started


def run_phase(port: int, state_file: Path, scrapes: int, every_s: float, wall_s: float) -> Phase:
    phase = Phase()
    ticks: list[float] = []
    started = time.monotonic()
    for index in range(scrapes):
        now = time.monotonic()
        if now - started >= wall_s:
            break
        time.sleep(max(0.0, started + index * every_s - now))
        latency = scrape(port)
        if latency is None:
            phase.timeouts += 1
            latency = TIMEOUT_S
        phase.latencies_s.append(latency)
        try:
            taken = json.loads(state_file.read_text())["taken_unix"]
        except (OSError, ValueError):
            continue
        if not ticks or taken != ticks[-1]:
            ticks.append(taken)
    phase.tick_gaps_s = [b - a for a, b in zip(ticks, ticks[1:], strict=False)]
    return phase


def report(name: str, label: str, phase: Phase) -> str:
    lat = phase.latencies_s
    gaps = phase.tick_gaps_s
    return (f"| {name} | {label} | {len(lat)} | {median(lat) * 1e3:.1f} | {percentile(lat, 99) * 1e3:.1f} | "
            f"{max(lat, default=float('nan')) * 1e3:.0f} | {phase.timeouts} | "
            f"{max(gaps, default=float('nan')):.2f} |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--slow", type=int, default=100, help="slow connections (half idle, half trickling)")
    parser.add_argument("--scrapes", type=int, default=200, help="scrapes per phase")
    parser.add_argument("--every-s", type=float, default=0.05, help="one scrape started every this often")
    parser.add_argument("--phase-s", type=float, default=30.0, help="wall-clock limit of a phase")
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--baseline", type=Path, help="another checkout to run side by side")
    fixtures_arg(parser)
    args = parser.parse_args()
    work = temp_dir("slow")
    daemons: list[tuple[str, int, Path, object]] = []
    try:
        build_tree(work / "sys", args.fixtures, args.capture, args.gpus)
        sources = [("this", REPO)] + ([("baseline", args.baseline.resolve())] if args.baseline else [])
        for name, src in sources:
            port = free_port()
            run = work / f"run-{name}"
            run.mkdir()
            config = write_config(work / f"{name}.toml", work / "sys", run,
                                  f'[http]\nlisten = "127.0.0.1"\nport = {port}\n[fan]\nmode = "monitor-only"\n')
            proc = start_daemon(config, work / f"{name}.log", src=src)
            daemons.append((name, port, run / "state.json", proc))
            wait_state(run / "state.json", proc)
            wait_port(port)
        rows = []
        for slow in (0, args.slow):
            for name, port, state_file, _ in daemons:
                if slow:
                    with SlowClients(port, slow) as clients:
                        time.sleep(1.0)  # let them connect
                        phase = run_phase(port, state_file, args.scrapes, args.every_s, args.phase_s)
                    label = f"{slow} slow ({clients.reopened} reopened)"
                else:
                    phase = run_phase(port, state_file, args.scrapes, args.every_s, args.phase_s)
                    label = "none"
                rows.append(report(name, label, phase))
        print(f"machine: {machine()}")
        print(f"{args.gpus} GPUs ({args.capture}); tick 1 s; sequential scrapes every {args.every_s:g} s, "
              f"{TIMEOUT_S:g} s client timeout\n")
        print("| daemon | slow clients | scrapes | p50 ms | p99 ms | max ms | timeouts | largest tick gap s |")
        print("|---|---|---|---|---|---|---|---|")
        print("\n".join(rows))
        print(f"\ntarget: p99 < {TARGET_P99_S * 1e3:.0f} ms with {args.slow} slow clients")
        for name, _, _, _ in daemons:
            log = (work / f"{name}.log").read_text(errors="replace")
            warnings = [line for line in log.splitlines() if "cut off" in line]
            print(f"{name}: {len(warnings)} cut-off warning(s){': ' + warnings[-1] if warnings else ''}")
    finally:
        for _, _, _, proc in daemons:
            stop(proc)  # type: ignore[arg-type]
        cleanup(work)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
