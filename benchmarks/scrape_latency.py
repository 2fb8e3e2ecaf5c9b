"""Scrape latency and CPU per scrape: gpuwatch's /metrics side by side with Prometheus node_exporter.

Both read the same real-layout fake tree (node_exporter with --path.sysfs and only its hwmon and drm
collectors; gpuwatch renders from its published in-memory state at its normal 1 Hz tick). Scrapes
are sequential, one new connection each (as Prometheus does after a keep-alive timeout), alternating
A-B / B-A so machine noise hits both alike. CPU per scrape comes from each server process's
cpu_times over the scrape phase, minus its idle rate measured just before (ticks, Go runtime).
Target: gpuwatch p99 at or below node_exporter's.

``--tls``: both servers read the same web config (a self-signed ECDSA P-256 certificate made with
openssl, basic auth with a bcrypt cost-10 hash); every scrape is a new TLS connection with the
credentials, as Prometheus' after its keep-alive timeout. Both cache the verified password.

``--prometheus`` (issue 47): the same two servers with the same web config (TLS + basic auth), scraped by a
real Prometheus (Debian's ``prometheus``, on loopback, every ``--interval-s``) for ``--duration-s``; its own
``scrape_duration_seconds`` p50/p99 per job from its query API (Prometheus keeps its connections alive and
asks for gzip). Then a keep-alive client (one connection per server, alternating) side by side, p99, with
and without gzip. Targets: Prometheus's p50 for gpuwatch at most 0.6x node_exporter's, the keep-alive
client's p99 at most 0.5x.

    .venv/bin/python benchmarks/scrape_latency.py [--scrapes 1000] [--gpus 8] [--tls]
    .venv/bin/python benchmarks/scrape_latency.py --prometheus [--duration-s 60] [--scrapes 1000]
"""

from __future__ import annotations

import argparse
import base64
import gzip
import http.client
import json
import ssl
import subprocess
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import psutil
from _common import (
    build_tree,
    cleanup,
    fixtures_arg,
    free_port,
    machine,
    median,
    node_exporter,
    percentile,
    prometheus_query,
    start_daemon,
    start_prometheus,
    stop,
    temp_dir,
    wait_port,
    wait_state,
    write_config,
)


@dataclass
class Server:
    name: str
    port: int
    pid: int
    latencies_s: list[float] = field(default_factory=list)
    body_bytes: int = 0
    idle_cpu_rate: float = 0.0
    cpu_s: float = 0.0


USER, PASSWORD = "prometheus", "benchmark-password"


@dataclass(frozen=True)
class Tls:
    web_config: Path
    context: ssl.SSLContext


def make_tls(work: Path) -> Tls:
    """A self-signed certificate for 127.0.0.1 and a web config with TLS and basic auth."""
    import bcrypt

    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                    "-keyout", str(work / "key.pem"), "-out", str(work / "cert.pem"), "-subj", "/CN=127.0.0.1",
                    "-days", "2", "-addext", "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True)
    hashed = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(10)).decode()
    web = work / "web.yml"
    web.write_text(f"tls_server_config:\n  cert_file: {work / 'cert.pem'}\n  key_file: {work / 'key.pem'}\n"
                   f"basic_auth_users:\n  {USER}: {hashed}\n")
    return Tls(web, ssl.create_default_context(cafile=str(work / "cert.pem")))


def scrape(port: int, tls: Tls | None = None) -> tuple[float, int]:
    started = time.perf_counter()
    headers = {}
    conn: http.client.HTTPConnection
    if tls is None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    else:
        conn = http.client.HTTPSConnection("127.0.0.1", port, timeout=10, context=tls.context)
        headers["Authorization"] = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
    try:
        conn.request("GET", "/metrics", headers=headers)
        response = conn.getresponse()
        body = response.read()
    finally:
        conn.close()
    elapsed = time.perf_counter() - started
    if response.status != 200:
        raise RuntimeError(f"port {port}: HTTP {response.status}")
    return elapsed, len(body)


class KeepAliveClient:
    """One kept-alive HTTPS connection to a server, with the credentials; ``gzip``: asks for it and
    decompresses (as Prometheus does)."""

    def __init__(self, port: int, tls: Tls, gzip_wanted: bool) -> None:
        self._conn = http.client.HTTPSConnection("127.0.0.1", port, timeout=10, context=tls.context)
        self._headers = {"Authorization": "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()}
        if gzip_wanted:
            self._headers["Accept-Encoding"] = "gzip"
        self.latencies_s: list[float] = []
        self.wire_bytes = 0

    def scrape(self) -> None:
        started = time.perf_counter()
        self._conn.request("GET", "/metrics", headers=self._headers)
        response = self._conn.getresponse()
        body = response.read()
        self.wire_bytes = len(body)
        if response.getheader("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        self.latencies_s.append(time.perf_counter() - started)
        if response.status != 200:
            raise RuntimeError(f"HTTP {response.status}")

    def close(self) -> None:
        self._conn.close()


def run_prometheus(work: Path, tls: Tls, ports: dict[str, int], duration_s: float,
                   interval_s: float) -> dict[str, tuple[float, float, int]]:
    """Prometheus scraping each job for ``duration_s``: job -> (p50 s, p99 s, scrapes) of its own
    scrape_duration_seconds."""
    scheme = (f"    scheme: https\n    tls_config:\n      ca_file: {work / 'cert.pem'}\n"
              f"    basic_auth:\n      username: {USER}\n      password: {PASSWORD}\n")
    proc, port = start_prometheus(work, ports, interval_s, scheme)
    try:
        time.sleep(duration_s)

        def query(expr: str) -> dict[str, float]:
            return prometheus_query(port, expr)

        window = f"[{int(duration_s)}s]"
        p50 = query(f"quantile_over_time(0.5, scrape_duration_seconds{window})")
        p99 = query(f"quantile_over_time(0.99, scrape_duration_seconds{window})")
        count = query(f"count_over_time(scrape_duration_seconds{window})")
        down = query(f"count_over_time(up{window}) - sum_over_time(up{window})")
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/targets", timeout=30) as response:
            last_error = {t["labels"]["job"]: t["lastError"] for t in json.load(response)["data"]["activeTargets"]}
        for job, failed in down.items():
            if failed:
                print(f"WARNING: {job}: {failed:g} failed scrapes (the last error: {last_error.get(job) or '-'})")
        return {job: (p50[job], p99[job], int(count[job])) for job in ports}
    finally:
        stop(proc)


def prometheus_main(args: argparse.Namespace, work: Path, tls: Tls, servers: list[Server]) -> int:
    """Issue 47's comparison: a real Prometheus, then a keep-alive client, both servers side by side."""
    print(f"machine: {machine()}")
    print(f"{args.gpus} GPUs ({args.capture}); TLS + basic auth (bcrypt cost 10), the same web config for both\n")
    seen = run_prometheus(work, tls, {s.name: s.port for s in servers}, args.duration_s, args.interval_s)
    print(f"Prometheus (every {args.interval_s:g} s for {args.duration_s:g} s), its scrape_duration_seconds:")
    print(f"{'job':<14} {'p50 ms':>8} {'p99 ms':>8} {'scrapes':>8}")
    for name, (p50, p99, count) in seen.items():
        print(f"{name:<14} {p50 * 1e3:>8.3f} {p99 * 1e3:>8.3f} {count:>8}")
    gw, ne = seen["gpuwatch"], seen["node_exporter"]
    prom_p50 = gw[0] / ne[0]
    print(f"gpuwatch / node_exporter: p50 {prom_p50:.2f} (target <= 0.60), p99 {gw[1] / ne[1]:.2f}\n")

    clients = {(s.name, wanted): KeepAliveClient(s.port, tls, wanted) for s in servers for wanted in (True, False)}
    try:
        for client in clients.values():
            for _ in range(20):  # warm-up: the handshake, the password cache
                client.scrape()
            client.latencies_s.clear()
        order = list(clients.values())
        for index in range(args.scrapes):
            for client in order if index % 2 == 0 else reversed(order):
                client.scrape()
    finally:
        for client in clients.values():
            client.close()
    print(f"keep-alive client: one connection per server and encoding, {args.scrapes} scrapes each, alternating:")
    print(f"{'server':<14} {'gzip':<5} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} {'wire KiB':>9}")
    for (name, wanted), client in clients.items():
        lat = client.latencies_s
        print(f"{name:<14} {'yes' if wanted else 'no':<5} {median(lat) * 1e3:>8.3f} {percentile(lat, 99) * 1e3:>8.3f} "
              f"{max(lat) * 1e3:>8.3f} {client.wire_bytes / 1024:>9.1f}")
    gw_gz, ne_gz = clients[("gpuwatch", True)].latencies_s, clients[("node_exporter", True)].latencies_s
    p99_ratio = percentile(gw_gz, 99) / percentile(ne_gz, 99)
    print(f"gpuwatch / node_exporter, both gzip as Prometheus asks: p50 {median(gw_gz) / median(ne_gz):.2f}, "
          f"p99 {p99_ratio:.2f} (target <= 0.50)")
    plain = clients[("gpuwatch", False)].latencies_s
    print(f"gpuwatch gzip / identity: p50 {median(gw_gz) / median(plain):.2f}, "
          f"p99 {percentile(gw_gz, 99) / percentile(plain, 99):.2f}")
    return 0 if prom_p50 <= 0.6 and p99_ratio <= 0.5 else 1


def cpu_s(pid: int) -> float:
    times = psutil.Process(pid).cpu_times()
    return times.user + times.system


def render_cost_s(sysfs_root: Path, runtime_dir: Path, renders: int = 200) -> list[float]:
    """What the first scrape after each tick pays: the collector rendering the published state."""
    from prometheus_client import CollectorRegistry
    from prometheus_client.exposition import generate_latest

    from gpuwatch.config.cooling import FanConfig
    from gpuwatch.config.file import Config
    from gpuwatch.config.sections import HttpConfig
    from gpuwatch.daemon.loop import Daemon
    from gpuwatch.publish.metrics import GpuwatchCollector

    config = Config(sysfs_root=sysfs_root, runtime_dir=runtime_dir, fan=FanConfig(mode="off"),
                    http=HttpConfig(enabled=False))
    daemon = Daemon(config)
    daemon.tick()
    registry = CollectorRegistry(auto_describe=False)
    registry.register(GpuwatchCollector(daemon.holder.latest))
    durations = []
    for _ in range(renders):
        started = time.perf_counter()
        generate_latest(registry)
        durations.append(time.perf_counter() - started)
    daemon.shutdown()
    return durations


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scrapes", type=int, default=1000, help="scrapes per server (default 1000)")
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--idle-s", type=float, default=5.0, help="idle window for the CPU baseline")
    parser.add_argument("--tls", action="store_true", help="both servers with the same web config: TLS and "
                        "basic auth (issue 35's target: gpuwatch p99 at most 0.5x node_exporter's)")
    parser.add_argument("--prometheus", action="store_true", help="TLS and basic auth, scraped by a real "
                        "Prometheus, then a keep-alive client (issue 47's targets)")
    parser.add_argument("--duration-s", type=float, default=60.0, help="how long Prometheus scrapes (--prometheus)")
    parser.add_argument("--interval-s", type=float, default=1.0, help="Prometheus's scrape interval (--prometheus)")
    fixtures_arg(parser)
    args = parser.parse_args()
    work = temp_dir("scrape")
    procs = []
    try:
        build_tree(work / "sys", args.fixtures, args.capture, args.gpus)
        (work / "run").mkdir()
        gw_port, ne_port = free_port(), free_port()
        tls = make_tls(work) if args.tls or args.prometheus else None
        web = f'web_config = "{tls.web_config}"\n' if tls is not None else ""
        config = write_config(
            work / "gpuwatch.toml", work / "sys", work / "run",
            f'[http]\nlisten = "127.0.0.1"\nport = {gw_port}\n{web}'
        )
        daemon = start_daemon(config, work / "daemon.log")
        procs.append(daemon)
        exporter = node_exporter(work / "sys", ne_port, work / "node_exporter.log",
                                 tls.web_config if tls is not None else None)
        procs.append(exporter)
        wait_state(work / "run" / "state.json", daemon)
        wait_port(gw_port)
        wait_port(ne_port)
        servers = [Server("gpuwatch", gw_port, daemon.pid), Server("node_exporter", ne_port, exporter.pid)]
        if args.prometheus:
            assert tls is not None
            return prometheus_main(args, work, tls, servers)
        for server in servers:
            for _ in range(20):  # warm-up: connections, caches, the Go runtime's first GC
                _, server.body_bytes = scrape(server.port, tls)
        idle0 = {s.name: cpu_s(s.pid) for s in servers}
        time.sleep(args.idle_s)
        for server in servers:
            server.idle_cpu_rate = (cpu_s(server.pid) - idle0[server.name]) / args.idle_s
        start_cpu = {s.name: cpu_s(s.pid) for s in servers}
        started = time.monotonic()
        for index in range(args.scrapes):
            for server in servers if index % 2 == 0 else reversed(servers):
                latency, _ = scrape(server.port, tls)
                server.latencies_s.append(latency)
        duration_s = time.monotonic() - started
        for server in servers:
            raw = cpu_s(server.pid) - start_cpu[server.name]
            server.cpu_s = max(0.0, raw - server.idle_cpu_rate * duration_s)
        print(f"machine: {machine()}")
        print(
            f"{args.gpus} GPUs ({args.capture}); {args.scrapes} sequential scrapes per server, alternating; "
            f"scrape phase {duration_s:.1f} s{'; TLS + basic auth (bcrypt cost 10), same web config' if tls else ''}\n"
        )
        print(f"{'server':<14} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} {'CPU ms/scrape':>14} {'body KiB':>9}")
        for s in servers:
            print(
                f"{s.name:<14} {median(s.latencies_s) * 1e3:>8.3f} {percentile(s.latencies_s, 99) * 1e3:>8.3f} "
                f"{max(s.latencies_s) * 1e3:>8.3f} {s.cpu_s / args.scrapes * 1e3:>14.3f} {s.body_bytes / 1024:>9.1f}"
            )
        gw, ne = servers
        p99_ratio = percentile(gw.latencies_s, 99) / percentile(ne.latencies_s, 99)
        target = 0.5 if tls else 1.0
        print(f"\ngpuwatch / node_exporter (<= {target:.2f} meets the target for p99):")
        print(f"  p50 {median(gw.latencies_s) / median(ne.latencies_s):.2f}")
        print(f"  p99 {p99_ratio:.2f}")
        print(f"  CPU per scrape {gw.cpu_s / ne.cpu_s if ne.cpu_s else float('nan'):.2f}")
        print(f"(CPU is net of each server's idle rate: gpuwatch {gw.idle_cpu_rate * 1e3:.1f} ms/s, "
              f"node_exporter {ne.idle_cpu_rate * 1e3:.1f} ms/s)")
        render = render_cost_s(work / "sys", work / "render-run")
        print(
            f"gpuwatch renders /metrics once per published tick (scrapes in between reuse the bytes); one render "
            f"in-process: p50 {median(render) * 1e3:.2f} ms, p99 {percentile(render, 99) * 1e3:.2f} ms"
        )
        return 0 if p99_ratio <= target else 1
    finally:
        for proc in procs:
            stop(proc)
        cleanup(work)


if __name__ == "__main__":
    raise SystemExit(main())
