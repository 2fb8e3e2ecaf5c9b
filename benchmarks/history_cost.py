"""History ring cost: the daemon's CPU, tick cost and RSS with the on-disk history ring and without it, and what
/history costs to serve from a full week (docs/performance.md, docs/page.md "History on disk").

Two daemons at 1 Hz on 8-GPU fake trees run side by side, one with ``[history]`` on over a ring already full
(a week of synthetic points for 8 GPUs and two runs, and 1000 events: the largest files it keeps), one with
``[history] enabled = false``; both serve HTTP on loopback, so both build the live page's summary each tick.
Over the window: CPU (% of a core, ms per tick, from /proc/<pid>/task/*/schedstat) and peak RSS. Then the
tick's own share, in-process: ``HistoryStore.add`` (all the tick does for the ring) timed with its writer
running. Last, /history for each range from the ring daemon (wall time, size) and its peak RSS (VmHWM) after.

    .venv/bin/python benchmarks/history_cost.py [--window-s 60] [--gpus 8] [--requests 5]
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import time
import urllib.request
from pathlib import Path

import psutil
from _common import (
    build_tree,
    cleanup,
    fixtures_arg,
    free_port,
    machine,
    median,
    start_daemon,
    stop,
    temp_dir,
    wait_state,
    write_config,
)
from daemon_cost import CPU_TARGET_PCT, RSS_TARGET_MIB, SETTLE_S, measure_window  # the daemon's bounds, one home

from gpuwatch.publish.history_format import TIERS, encode_line, header, segment_name
from gpuwatch.publish.history_store import HistoryStore


def fill_week(directory: Path, gpus: list[str], runs: list[str], now: float) -> int:
    """Every tier full to its span, as a daemon would have left it; the bytes written."""
    directory.mkdir(parents=True, mode=0o755)
    rng = random.Random(1)
    written = 0
    for tier in TIERS:
        first = now - tier.span_s
        for start in range(int(tier.span_s // tier.segment_s)):
            seg_first = first + start * tier.segment_s
            lines = [encode_line(header(tier, 1.0, start == 0))]
            for k in range(int(tier.segment_s // tier.step_s)):
                t = round(seg_first + k * tier.step_s, 3)
                lines.append(encode_line({
                    "t": t,
                    "g": {g: [round(rng.uniform(40, 95), 1), round(rng.uniform(20, 100), 1),
                              round(rng.uniform(50, 300), 1), round(rng.uniform(0, 100), 1), 300, 2100] for g in gpus},
                    "r": {r: round(rng.uniform(1, 9), 2) for r in runs}}))
            path = directory / segment_name(tier, int(seg_first * 1000))
            path.write_bytes(b"".join(lines))
            written += path.stat().st_size
    events = [encode_line({"schema": 1, "events": True})] + [encode_line(
        {"unix": now - 7 * 86400 + i * 600, "kind": "cap", "text": f"cap of {gpus[i % len(gpus)]} lowered to 250 W "
         "(from 300 W)", "gpu": gpus[i % len(gpus)], "run": None}) for i in range(1000)]
    (directory / "events.log").write_bytes(b"".join(events))
    return written + (directory / "events.log").stat().st_size


def vm_hwm_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def add_cost_us(rounds: int) -> float:
    """µs of the tick's thread per ``HistoryStore.add`` (an 8-GPU point), its writer thread running."""
    work = temp_dir("history-add")
    try:
        store = HistoryStore(work / "history")
        store.start()
        point = {"t": 0.0, "g": {f"0000:{i:02x}:00.0": [70, 50, 200, 100, 300, 2100] for i in range(8)},
                 "r": {"a": 5.0, "b": 6.0}}
        spent = []
        for i in range(rounds):
            p = dict(point, t=1_800_000_000.0 + i)
            t0 = time.thread_time()
            store.add(p, [], 1.0)
            spent.append(time.thread_time() - t0)
            if i % 50 == 0:
                time.sleep(0.001)  # let the writer take its batch, as between ticks
        store.stop()
        return 1e6 * median(spent)
    finally:
        cleanup(work)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--window-s", type=float, default=60.0)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--requests", type=int, default=5, help="/history requests per range")
    fixtures_arg(parser)
    args = parser.parse_args()
    work = temp_dir("history")
    procs: dict[str, subprocess.Popen[bytes]] = {}
    ports: dict[str, int] = {}
    try:
        filled = 0
        for label in ("ring", "no ring"):
            base = work / label.replace(" ", "-")
            build_tree(base / "sys", args.fixtures, args.capture, args.gpus)
            gpus = [f"0000:{0x10 + 3 * i + 2:02x}:00.0" for i in range(args.gpus)]  # build_tree's PCI slots
            (base / "run").mkdir(parents=True)
            if label == "ring":
                filled = fill_week(base / "run" / "history", gpus, ["train-a", "train-b"], time.time())
            ports[label] = free_port()
            extra = (f'[http]\nlisten = "127.0.0.1"\nport = {ports[label]}\n'
                     f'[history]\nenabled = {"true" if label == "ring" else "false"}\n')
            config = write_config(base / "gpuwatch.toml", base / "sys", base / "run", extra)
            procs[label] = start_daemon(config, base / "daemon.log", env={"STATE_DIRECTORY": ""})
        for label, proc in procs.items():
            wait_state(work / label.replace(" ", "-") / "run" / "state.json", proc)
        time.sleep(SETTLE_S)
        handles = {label: psutil.Process(proc.pid) for label, proc in procs.items()}
        ticks_before = {label: _ticks(work, label) for label in handles}
        window = measure_window(handles, args.window_s)
        print(f"machine: {machine()}; load average {Path('/proc/loadavg').read_text().split()[0]}")
        print(f"{args.gpus} GPUs, 1 Hz, window {args.window_s:.0f} s, both daemons side by side; the ring "
              f"pre-filled with a full week ({filled / 2**20:.1f} MiB)\n")
        print(f"{'daemon':>8} {'ticks':>6} {'CPU % core':>11} {'ratio':>6} {'CPU ms/tick':>12} {'peak RSS MiB':>13} "
              f"{'USS MiB':>8} {'ratio':>6}")
        per_tick = {}
        for label, h in handles.items():
            ticks = _ticks(work, label) - ticks_before[label]
            per_tick[label] = 1e3 * window[label].cpu_used_s / max(ticks, 1)
            pct = 100 * window[label].cpu_used_s / window[label].elapsed_s
            rss = window[label].peak_rss_bytes / 2**20
            print(f"{label:>8} {ticks:>6} {pct:>11.3f} {pct / CPU_TARGET_PCT:>6.2f} {per_tick[label]:>12.2f} "
                  f"{rss:>13.1f} {h.memory_full_info().uss / 2**20:>8.1f} {rss / RSS_TARGET_MIB:>6.2f}")
        print(f"\nring / no ring, CPU per tick: {per_tick['ring'] / max(per_tick['no ring'], 1e-9):.2f}")
        print(f"the tick's share (HistoryStore.add, median of 5000): {add_cost_us(5000):.1f} µs")
        print(f"\n/history from the full ring ({args.requests} requests each, one at a time):")
        print(f"{'range':>6} {'points':>7} {'KiB':>7} {'p50 ms':>7} {'max ms':>7}")
        for name in ("15m", "1h", "24h", "7d"):
            times, size, points = [], 0, 0
            for _ in range(args.requests):
                t0 = time.perf_counter()
                with urllib.request.urlopen(f"http://127.0.0.1:{ports['ring']}/history?range={name}",
                                            timeout=60) as response:
                    body = response.read()
                times.append(1e3 * (time.perf_counter() - t0))
                size, points = len(body), len(json.loads(body)["t"])
            print(f"{name:>6} {points:>7} {size / 1024:>7.0f} {median(times):>7.1f} {max(times):>7.1f}")
        hwm = vm_hwm_mib(procs["ring"].pid)
        print(f"\nring daemon's peak RSS (VmHWM) after them: {hwm:.1f} MiB (target {RSS_TARGET_MIB:.0f}: "
              f"{hwm / RSS_TARGET_MIB:.2f}); no ring: {vm_hwm_mib(procs['no ring'].pid):.1f} MiB")
        return 0 if hwm < RSS_TARGET_MIB else 1
    finally:
        for proc in procs.values():
            stop(proc)
        cleanup(work)


def _ticks(work: Path, label: str) -> int:
    try:
        state = json.loads((work / label.replace(" ", "-") / "run" / "state.json").read_text())
        return int(state["daemon"]["ticks_total"])
    except (OSError, ValueError, KeyError):
        return 0


if __name__ == "__main__":
    raise SystemExit(main())
