"""Daemon cost: CPU (% of one core) and memory of `gpuwatch run` at 1 Hz on 1- and 8-GPU fake trees.

Targets: < 0.5 % of one core and < 60 MiB RSS; torch never loaded (checked in /proc/<pid>/maps).
All daemons run at the same time, each on its own tree, state file and loopback HTTP port, so
they share whatever load the machine has. The window starts after start-up and the first ticks.
``--baseline DIR`` runs another checkout's daemons beside them (the same trees), and prints this
checkout's CPU per tick over the baseline's: a change's cost measured side by side in one run.

A production-like load (issue 52): ``--attached N`` attaches N runs to every daemon through the real wrapper
(`gpuwatch train --runtime-dir RUN -- python -c LOOP`: heartbeats, the run's cgroup and processes watched
every tick; each daemon's wrappers are its own checkout's), and ``--prometheus`` has a real Prometheus
(Debian's, loopback) scrape every daemon's /metrics every ``--scrape-interval-s``, next to a node_exporter on
each tree (hwmon and drm collectors) that the same Prometheus scrapes: node_exporter's own CPU and RSS are
measured over the same window, so both exporters' cost comes from one run.

Where no Prometheus can run (the device machine), ``--scraper python`` scrapes the same targets the same way
from a process of its own (benchmarks/scrape_loop.py: keep-alive, gzip, Prometheus's Accept header), whose CPU
is measured beside. node_exporter is optional: ``--node-exporter PATH`` names its binary (default: Debian's
prometheus-node-exporter, else node_exporter on PATH); without one the daemons are scraped alone.
benchmarks/device/run-on-device.sh runs it there.

    .venv/bin/python benchmarks/daemon_cost.py [--window-s 60] [--gpus 1 8] [--baseline /path/to/checkout]
    .venv/bin/python benchmarks/daemon_cost.py --gpus 8 --attached 2 --prometheus     # issue 52's load
    .venv/bin/python benchmarks/daemon_cost.py --gpus 8 --attached 2 --scraper python  # the same, no Prometheus
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import psutil
from _common import (
    REPO,
    build_tree,
    cleanup,
    fixtures_arg,
    free_port,
    machine,
    median,
    node_exporter,
    prometheus_query,
    start_daemon,
    start_prometheus,
    start_wrapper,
    stop,
    temp_dir,
    wait_state,
    write_config,
)

CPU_TARGET_PCT = 0.5
RSS_TARGET_MIB = 60.0
SETTLE_S = 3.0
K = TypeVar("K")
RUN_LOOP = "import time\nwhile True:\n    time.sleep(0.05)\n"  # an attached run's command


def cpu_s(handle: psutil.Process) -> float:
    """On-CPU time of all the process's threads, from schedstat (ns) where the kernel has it.

    psutil's cpu_times count in 10 ms clock ticks: too coarse for a few ms per tick over a short
    window. Threads that exit are lost from schedstat; the daemon's threads live as long as it.
    """
    try:
        return sum(
            int(Path(task, "schedstat").read_text().split()[0]) for task in Path(f"/proc/{handle.pid}/task").iterdir()
        ) / 1e9
    except (OSError, ValueError, IndexError):
        times = handle.cpu_times()
        return times.user + times.system


@dataclass(frozen=True)
class Window:
    """One process over a measurement window: its CPU (all threads) and the peak of its RSS sampled each second."""
    cpu_used_s: float
    elapsed_s: float
    peak_rss_bytes: int


def measure_window(handles: Mapping[K, psutil.Process], window_s: float) -> dict[K, Window]:
    """CPU and peak RSS of every process over the same ``window_s`` (daemon_cost.py's and history_cost.py's)."""
    before = {key: (cpu_s(h), time.monotonic()) for key, h in handles.items()}
    peak = dict.fromkeys(handles, 0)
    end = time.monotonic() + window_s
    while time.monotonic() < end:
        for key, h in handles.items():
            peak[key] = max(peak[key], h.memory_info().rss)
        time.sleep(min(1.0, max(0.0, end - time.monotonic())))
    return {key: Window(cpu_s(h) - before[key][0], time.monotonic() - before[key][1], peak[key])
            for key, h in handles.items()}


def torch_mappings(pid: int) -> list[str]:
    maps = Path(f"/proc/{pid}/maps").read_text()
    return sorted({line.split()[-1] for line in maps.splitlines() if "torch" in line.rsplit("/", 1)[-1].lower()})


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--window-s", type=float, default=60.0, help="measurement window (default 60 s)")
    parser.add_argument("--gpus", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--interval-s", type=float, default=1.0)
    parser.add_argument("--baseline", type=Path, help="another checkout whose daemons run side by side")
    parser.add_argument("--attached", type=int, default=0, help="runs attached to every daemon (real wrappers)")
    parser.add_argument("--scraper", choices=("prometheus", "python"),
                        help="who scrapes every daemon and a node_exporter on each tree: a real Prometheus, or "
                             "benchmarks/scrape_loop.py in a process of its own (no Prometheus binary needed)")
    parser.add_argument("--prometheus", action="store_const", const="prometheus", dest="scraper",
                        help="the same as --scraper prometheus")
    parser.add_argument("--node-exporter", metavar="PATH",
                        default=shutil.which("prometheus-node-exporter") or shutil.which("node_exporter"),
                        help="node_exporter's binary, measured beside (default: prometheus-node-exporter or "
                             "node_exporter on PATH; none found: not run)")
    parser.add_argument("--scrape-interval-s", type=float, default=1.0)
    fixtures_arg(parser)
    args = parser.parse_args()
    exporter = args.node_exporter if args.scraper and args.node_exporter else None
    sources = [("this", REPO)] + ([("baseline", args.baseline.resolve())] if args.baseline else [])
    work = temp_dir("cost")
    procs: dict[tuple[str, int], subprocess.Popen[bytes]] = {}
    helpers: list[subprocess.Popen[bytes]] = []  # wrappers and Prometheus: not measured
    ports: dict[str, int] = {}
    try:
        for label, src in sources:
            for gpus in args.gpus:
                base = work / f"{label}-g{gpus}"
                # A tree each: a daemon controls its cards' fans alone (a second one on them exits).
                build_tree(base / "sys", args.fixtures, args.capture, gpus)
                (base / "run").mkdir(parents=True)
                ports[f"{label}-g{gpus}"] = port = free_port()
                extra = f'[http]\nlisten = "127.0.0.1"\nport = {port}\n'
                config = write_config(base / "gpuwatch.toml", base / "sys", base / "run", extra,
                                      args.interval_s)
                procs[label, gpus] = start_daemon(config, base / "daemon.log", src=src)
        if exporter:
            for gpus in args.gpus:
                ports[f"node_exporter-g{gpus}"] = port = free_port()
                procs["node_exporter", gpus] = node_exporter(work / f"this-g{gpus}" / "sys", port,
                                                             work / f"node_exporter-g{gpus}.log", binary=exporter)
        for (label, gpus), proc in procs.items():
            if label in HELPERS:
                continue
            state = wait_state(work / f"{label}-g{gpus}" / "run" / "state.json", proc)
            assert len(state["gpus"]) == gpus, f"daemon sees {len(state['gpus'])} GPUs, expected {gpus}"
            for index in range(args.attached):
                helpers.append(start_wrapper(work, work / f"{label}-g{gpus}" / "run", f"{label}-g{gpus}-run{index}",
                                             RUN_LOOP, src=dict(sources)[label]))  # each daemon's own wrapper
        for label, gpus in procs if args.attached else ():
            if label not in HELPERS:
                _wait_attached(work / f"{label}-g{gpus}", args.attached)
        prometheus_port = 0
        stats = work / "scrape-loop.json"
        if args.scraper == "prometheus":
            prometheus, prometheus_port = start_prometheus(work, ports, args.scrape_interval_s)
            helpers.append(prometheus)
        elif args.scraper == "python":
            procs["scraper", 0] = subprocess.Popen(
                [sys.executable, str(REPO / "benchmarks/scrape_loop.py"), "--interval-s", f"{args.scrape_interval_s}",
                 "--stats", str(stats), *(f"{job}={port}" for job, port in ports.items())],
                stdout=(work / "scrape-loop.log").open("wb"), stderr=subprocess.STDOUT)
        time.sleep(SETTLE_S)
        handles = {key: psutil.Process(proc.pid) for key, proc in procs.items()}
        ticks_before = {key: _ticks(work / f"{key[0]}-g{key[1]}") for key in procs}
        scraped_before = _scraped(stats)
        window = measure_window(handles, args.window_s)
        scraped_after = _scraped(stats)
        print(f"machine: {machine()}")
        who = {"prometheus": "Prometheus", "python": "benchmarks/scrape_loop.py"}.get(args.scraper or "")
        print(f"capture: {args.capture}; interval {args.interval_s} s; window {args.window_s:.0f} s; "
              f"{args.attached} attached run(s) per daemon; "
              + (f"{who} scraping every {args.scrape_interval_s:g} s; " if who else "")
              + (f"node_exporter {exporter}; " if exporter else "no node_exporter; " if who else "")
              + "all side by side\n")
        print(
            f"{'build':>13} {'GPUs':>4} {'ticks':>6} {'CPU % core':>11} {'target':>7} {'ratio':>6} "
            f"{'peak RSS MiB':>13} {'USS MiB':>8} {'target':>7} {'ratio':>6} {'CPU ms/tick':>12} {'torch loaded':>13}"
        )
        failed = False
        per_tick_ms: dict[tuple[str, int], float] = {}
        cost: dict[tuple[str, int], tuple[float, float]] = {}
        for (label, gpus), h in handles.items():
            used_s = window[label, gpus].cpu_used_s
            cpu_pct = 100.0 * used_s / window[label, gpus].elapsed_s
            rss_mib = window[label, gpus].peak_rss_bytes / 2**20
            cost[label, gpus] = cpu_pct, rss_mib
            uss_mib = h.memory_full_info().uss / 2**20
            if label in HELPERS:
                print(f"{label:>13} {gpus or '-':>4} {'-':>6} {cpu_pct:>11.3f} {'-':>7} {'-':>6} {rss_mib:>13.1f} "
                      f"{uss_mib:>8.1f} {'-':>7} {'-':>6} {'-':>12} {'-':>13}")
                continue
            ticks = _ticks(work / f"{label}-g{gpus}") - ticks_before[label, gpus]
            per_tick_ms[label, gpus] = 1e3 * used_s / max(ticks, 1)
            torch = torch_mappings(h.pid)
            if label == "this":
                failed |= cpu_pct >= CPU_TARGET_PCT or rss_mib >= RSS_TARGET_MIB or bool(torch)
            print(
                f"{label:>13} {gpus:>4} {ticks:>6} {cpu_pct:>11.3f} {CPU_TARGET_PCT:>7.2f} "
                f"{cpu_pct / CPU_TARGET_PCT:>6.2f} "
                f"{rss_mib:>13.1f} {uss_mib:>8.1f} {RSS_TARGET_MIB:>7.0f} {rss_mib / RSS_TARGET_MIB:>6.2f} "
                f"{per_tick_ms[label, gpus]:>12.2f} {'YES ' + ','.join(torch) if torch else 'no':>13}"
            )
        print("\nratio = measured / target (< 1.00 meets the target)")
        for gpus in args.gpus if args.baseline else ():
            print(f"{gpus} GPU(s): CPU per tick this/baseline = "
                  f"{per_tick_ms['this', gpus] / max(per_tick_ms['baseline', gpus], 1e-9):.2f}")
        if args.scraper == "python":
            print("scrape_loop.py over the window: " + ", ".join(
                f"{job} {after['scrapes'] - before_job['scrapes']} scrapes "
                f"({after['failed'] - before_job['failed']} failed, p50 "
                f"{median(after['durations_ms'][before_job['scrapes']:]):.1f} ms)"
                for job, after in scraped_after.items()
                for before_job in [scraped_before.get(job, {"scrapes": 0, "failed": 0})]))
        if args.scraper == "prometheus":
            window = f"[{int(args.window_s)}s]"
            scrapes = prometheus_query(prometheus_port, f"count_over_time(up{window})")
            down = prometheus_query(prometheus_port, f"count_over_time(up{window}) - sum_over_time(up{window})")
            took = prometheus_query(prometheus_port, f"quantile_over_time(0.5, scrape_duration_seconds{window})")
            print("Prometheus over the window: " + ", ".join(
                f"{job} {scrapes.get(job, 0):.0f} scrapes ({down.get(job, 0):.0f} failed, p50 "
                f"{took.get(job, float('nan')) * 1e3:.1f} ms)" for job in ports))
        for gpus in args.gpus if exporter else ():
            (gw_cpu, gw_rss), (ne_cpu, ne_rss) = cost["this", gpus], cost["node_exporter", gpus]
            print(f"{gpus} GPU(s): gpuwatch / node_exporter: CPU {gw_cpu / max(ne_cpu, 1e-9):.2f}, "
                  f"peak RSS {gw_rss / max(ne_rss, 1e-9):.2f}")
        return 1 if failed else 0
    finally:
        for proc in [*helpers, *procs.values()]:
            stop(proc)
        cleanup(work)


HELPERS = ("node_exporter", "scraper")  # measured beside the daemons, not daemons themselves


def _scraped(stats: Path) -> dict[str, dict[str, Any]]:
    """scrape_loop.py's counts so far (none yet, or no such scraper: empty)."""
    try:
        return dict(json.loads(stats.read_text()))
    except (OSError, ValueError):
        return {}


def _wait_attached(base: Path, count: int, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            trainers = json.loads((base / "run" / "state.json").read_text())["trainers"]
            if sum(t.get("origin") == "attached" for t in trainers) >= count:
                return
        except (OSError, ValueError, KeyError):
            pass
        time.sleep(0.1)
    raise TimeoutError(f"{count} run(s) not attached to {base} after {timeout_s:g} s; see its wrapper logs")


def _ticks(base: Path) -> int:
    try:
        return int(json.loads((base / "run" / "state.json").read_text())["daemon"]["ticks_total"])
    except (OSError, ValueError, KeyError):
        return 0


if __name__ == "__main__":
    raise SystemExit(main())
