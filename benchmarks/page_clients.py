"""The live page's cost: tick jitter and the daemon's CPU with 0 and with 20 /events clients (docs/page.md).

One daemon on an 8-GPU fake tree; its ticks are observed from outside through the state file's
``taken_unix`` (as benchmarks/tick_jitter.py does), its CPU from /proc/PID/stat (user + system time
over wall time, in % of one core). Phases alternate, without clients and with N live pages reading the
Server-Sent Events stream (raw sockets on one thread, each reading every message), so drift on a shared
machine falls on both columns alike; each column sums its phases. Jitter of a tick is how far its spacing
from the previous tick strays from ``interval_s``.

    .venv/bin/python benchmarks/page_clients.py [--clients 20] [--phase-s 10] [--rounds 2] [--interval-s 0.25]
"""

from __future__ import annotations

import argparse
import os
import selectors
import socket
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
from tick_jitter import jitter_ms, watch_ticks


def cpu_s(pid: int) -> float:
    """utime + stime of a process, seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def live_pages(port: int, count: int, until: float, received: list[int], errors: list[str]) -> None:
    """``count`` /events clients on one thread until ``until``; ``received`` gets the messages read."""
    selector = selectors.DefaultSelector()
    socks = []
    for _ in range(count):
        sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        sock.sendall(b"GET /events HTTP/1.1\r\nHost: bench\r\nAccept: text/event-stream\r\n\r\n")
        sock.setblocking(False)
        selector.register(sock, selectors.EVENT_READ)
        socks.append(sock)
    messages = 0
    try:
        while time.monotonic() < until:
            for key, _ in selector.select(timeout=0.2):
                sock = key.fileobj
                assert isinstance(sock, socket.socket)
                try:
                    data = sock.recv(1 << 20)
                except BlockingIOError:
                    continue
                if not data:
                    errors.append("stream closed by the server")
                    selector.unregister(sock)
                    continue
                messages += data.count(b"\n\n")
    finally:
        for sock in socks:
            sock.close()
        selector.close()
    received.append(messages)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--phase-s", type=float, default=10.0, help="length of each phase")
    parser.add_argument("--rounds", type=int, default=2, help="pairs of phases (without, with clients)")
    parser.add_argument("--interval-s", type=float, default=0.25, help="daemon tick")
    parser.add_argument("--gpus", type=int, default=8)
    fixtures_arg(parser)
    args = parser.parse_args()
    work = temp_dir("page-clients")
    daemon = None
    try:
        build_tree(work / "sys", args.fixtures, args.capture, args.gpus)
        (work / "run").mkdir()
        port = free_port()
        config = write_config(work / "gpuwatch.toml", work / "sys", work / "run",
                              f'[http]\nlisten = "127.0.0.1"\nport = {port}\n', args.interval_s)
        daemon = start_daemon(config, work / "daemon.log")
        state_file = work / "run" / "state.json"
        wait_state(state_file, daemon)
        wait_port(port)
        time.sleep(2 * args.interval_s)
        ticks: dict[str, list[float]] = {"0 clients": [], f"{args.clients} clients": []}
        jitter: dict[str, list[float]] = {name: [] for name in ticks}
        cpu = dict.fromkeys(ticks, 0.0)
        wall = dict.fromkeys(ticks, 0.0)
        received: list[int] = []
        errors: list[str] = []
        for _ in range(args.rounds):
            for name, clients in zip(ticks, (0, args.clients), strict=True):
                started, cpu_before = time.monotonic(), cpu_s(daemon.pid)
                until = started + args.phase_s
                reader = None
                if clients:
                    reader = threading.Thread(target=live_pages, args=(port, clients, until, received, errors))
                    reader.start()
                seen = watch_ticks(state_file, until)
                if reader is not None:
                    reader.join(30)
                cpu[name] += cpu_s(daemon.pid) - cpu_before
                wall[name] += time.monotonic() - started
                ticks[name] += seen
                jitter[name] += jitter_ms(seen, args.interval_s)
        print(f"machine: {machine()}")
        print(f"{args.gpus} GPUs; tick {args.interval_s} s; {args.rounds} x {args.phase_s:.0f} s per column, "
              f"alternating; live pages read /events in the second column\n")
        names = list(ticks)
        print(f"{'':<22} {names[0]:>12} {names[1]:>12}")
        rows = [
            ("ticks", lambda n: f"{len(ticks[n])}"),
            ("jitter p50 ms", lambda n: f"{median(jitter[n]):.2f}"),
            ("jitter p99 ms", lambda n: f"{percentile(jitter[n], 99):.2f}"),
            ("jitter max ms", lambda n: f"{max(jitter[n], default=float('nan')):.2f}"),
            ("daemon CPU % of a core", lambda n: f"{100 * cpu[n] / wall[n]:.1f}"),
        ]
        for label, value in rows:
            print(f"{label:<22} {value(names[0]):>12} {value(names[1]):>12}")
        print(f"\nmessages read by the live pages: {sum(received)} "
              f"(~{sum(received) / max(1, args.clients) / max(1, len(ticks[names[1]])):.2f} per page per tick, "
              "the snapshot included)")
        if errors:
            print(f"client errors (first 5): {errors[:5]}")
        return 0
    finally:
        if daemon is not None:
            stop(daemon)
        cleanup(work)


if __name__ == "__main__":
    raise SystemExit(main())
