"""Daemon cost: CPU (% of one core) and memory of `gpuwatch run` at 1 Hz on 1- and 8-GPU fake trees.

Targets: < 0.5 % of one core and < 60 MiB RSS; torch never loaded (checked in /proc/<pid>/maps).
All daemons run at the same time, each on its own tree, state file and loopback HTTP port, so
they share whatever load the machine has. The window starts after start-up and the first ticks.
``--baseline DIR`` runs another checkout's daemons beside them (the same trees), and prints this
checkout's CPU per tick over the baseline's: a change's cost measured side by side in one run.

    .venv/bin/python benchmarks/daemon_cost.py [--window-s 60] [--gpus 1 8] [--baseline /path/to/checkout]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import time
from pathlib import Path

import psutil
from _common import (
    REPO,
    build_tree,
    cleanup,
    fixtures_arg,
    free_port,
    machine,
    start_daemon,
    stop,
    temp_dir,
    wait_state,
    write_config,
)

CPU_TARGET_PCT = 0.5
RSS_TARGET_MIB = 60.0
SETTLE_S = 3.0


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


def torch_mappings(pid: int) -> list[str]:
    maps = Path(f"/proc/{pid}/maps").read_text()
    return sorted({line.split()[-1] for line in maps.splitlines() if "torch" in line.rsplit("/", 1)[-1].lower()})


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--window-s", type=float, default=60.0, help="measurement window (default 60 s)")
    parser.add_argument("--gpus", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--interval-s", type=float, default=1.0)
    parser.add_argument("--baseline", type=Path, help="another checkout whose daemons run side by side")
    fixtures_arg(parser)
    args = parser.parse_args()
    sources = [("this", REPO)] + ([("baseline", args.baseline.resolve())] if args.baseline else [])
    work = temp_dir("cost")
    procs: dict[tuple[str, int], subprocess.Popen[bytes]] = {}
    try:
        for label, src in sources:
            for gpus in args.gpus:
                base = work / f"{label}-g{gpus}"
                build_tree(base / "sys", args.fixtures, args.capture, gpus)
                (base / "run").mkdir(parents=True)
                extra = f'[http]\nlisten = "127.0.0.1"\nport = {free_port()}\n'
                config = write_config(base / "gpuwatch.toml", base / "sys", base / "run", extra, args.interval_s)
                procs[label, gpus] = start_daemon(config, base / "daemon.log", src=src)
        for (label, gpus), proc in procs.items():
            state = wait_state(work / f"{label}-g{gpus}" / "run" / "state.json", proc)
            assert len(state["gpus"]) == gpus, f"daemon sees {len(state['gpus'])} GPUs, expected {gpus}"
        time.sleep(SETTLE_S)
        handles = {key: psutil.Process(proc.pid) for key, proc in procs.items()}
        before = {key: (cpu_s(h), time.monotonic()) for key, h in handles.items()}
        ticks_before = {key: _ticks(work / f"{key[0]}-g{key[1]}") for key in procs}
        peak_rss = {key: 0 for key in procs}
        end = time.monotonic() + args.window_s
        while time.monotonic() < end:
            for key, h in handles.items():
                peak_rss[key] = max(peak_rss[key], h.memory_info().rss)
            time.sleep(min(1.0, max(0.0, end - time.monotonic())))
        print(f"machine: {machine()}")
        print(f"capture: {args.capture}; interval {args.interval_s} s; window {args.window_s:.0f} s; "
              "daemons run side by side\n")
        print(
            f"{'build':>8} {'GPUs':>4} {'ticks':>6} {'CPU % core':>11} {'target':>7} {'ratio':>6} "
            f"{'peak RSS MiB':>13} {'USS MiB':>8} {'target':>7} {'ratio':>6} {'CPU ms/tick':>12} {'torch loaded':>13}"
        )
        failed = False
        per_tick_ms: dict[tuple[str, int], float] = {}
        for (label, gpus), h in handles.items():
            cpu0, t0 = before[label, gpus]
            used_s, t1 = cpu_s(h) - cpu0, time.monotonic()
            cpu_pct = 100.0 * used_s / (t1 - t0)
            ticks = _ticks(work / f"{label}-g{gpus}") - ticks_before[label, gpus]
            per_tick_ms[label, gpus] = 1e3 * used_s / max(ticks, 1)
            rss_mib = peak_rss[label, gpus] / 2**20
            uss_mib = h.memory_full_info().uss / 2**20
            torch = torch_mappings(h.pid)
            if label == "this":
                failed |= cpu_pct >= CPU_TARGET_PCT or rss_mib >= RSS_TARGET_MIB or bool(torch)
            print(
                f"{label:>8} {gpus:>4} {ticks:>6} {cpu_pct:>11.3f} {CPU_TARGET_PCT:>7.2f} "
                f"{cpu_pct / CPU_TARGET_PCT:>6.2f} "
                f"{rss_mib:>13.1f} {uss_mib:>8.1f} {RSS_TARGET_MIB:>7.0f} {rss_mib / RSS_TARGET_MIB:>6.2f} "
                f"{per_tick_ms[label, gpus]:>12.2f} {'YES ' + ','.join(torch) if torch else 'no':>13}"
            )
        print("\nratio = measured / target (< 1.00 meets the target)")
        for gpus in args.gpus if args.baseline else ():
            print(f"{gpus} GPU(s): CPU per tick this/baseline = "
                  f"{per_tick_ms['this', gpus] / max(per_tick_ms['baseline', gpus], 1e-9):.2f}")
        return 1 if failed else 0
    finally:
        for proc in procs.values():
            stop(proc)
        cleanup(work)


def _ticks(base: Path) -> int:
    try:
        return int(json.loads((base / "run" / "state.json").read_text())["daemon"]["ticks_total"])
    except (OSError, ValueError, KeyError):
        return 0


if __name__ == "__main__":
    raise SystemExit(main())
