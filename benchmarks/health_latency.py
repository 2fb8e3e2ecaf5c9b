"""`gpuwatch health` end to end, as Slurm's HealthCheckProgram and node-problem-detector run it: a new process
each time (`python -m gpuwatch health -c CONFIG`), against a running daemon on a real-layout fake tree.

Reported beside the same interpreter doing nothing (``python -c pass``), measured alternately so the
machine's noise hits both alike: what the command adds to Python's own start-up is gpuwatch's part. The
budget (docs/cluster.md): p99 under 50 ms on two cores with the daemon up, far inside NPD's 10-15 s
timeout and Slurm's 60 s kill; a direct read without a daemon (`--cold`) under 2 s.

    .venv/bin/python benchmarks/health_latency.py [--runs 200] [--gpus 8] [--cold]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

from _common import (
    REPO,
    build_tree,
    cleanup,
    fixtures_arg,
    machine,
    median,
    percentile,
    start_daemon,
    stop,
    temp_dir,
    wait_state,
    write_config,
)


def timed(argv: list[str]) -> tuple[float, int]:
    started = time.perf_counter()
    done = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    return time.perf_counter() - started, done.returncode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--cold", action="store_true", help="no daemon: the direct read's time instead")
    fixtures_arg(parser)
    args = parser.parse_args()
    work = temp_dir("gpuwatch-health-bench-")
    daemon = None
    try:
        sysfs = work / "sys"
        build_tree(sysfs, args.fixtures, "navi21-rx6900xt-sapphire-nitro", args.gpus, telemetry=True)
        config = write_config(work / "gpuwatch.toml", sysfs, work / "run", "[http]\nenabled = false\n")
        if not args.cold:
            daemon = start_daemon(config, work / "daemon.log")
            wait_state(work / "run" / "state.json", daemon)
        health = [sys.executable, "-m", "gpuwatch", "health", "-c", str(config), "--format", "npd"]
        bare = [sys.executable, "-c", "pass"]
        timed(health)  # the page cache warm for both
        ours: list[float] = []
        python: list[float] = []
        codes: set[int] = set()
        for _ in range(args.runs):
            seconds, code = timed(health)
            ours.append(seconds)
            codes.add(code)
            python.append(timed(bare)[0])
        print(f"# {machine()}; {args.gpus} GPUs, {'no daemon (direct read)' if args.cold else 'daemon up'}, "
              f"{args.runs} runs, exit codes {sorted(codes)}")
        for name, values in (("gpuwatch health", ours), ("python -c pass", python)):
            print(f"{name:16} p50 {median(values) * 1000:7.1f} ms  p99 {percentile(values, 99) * 1000:7.1f} ms  "
                  f"max {max(values) * 1000:7.1f} ms")
        print(f"{'its own part':16} p50 {(median(ours) - median(python)) * 1000:7.1f} ms")
    finally:
        if daemon is not None:
            stop(daemon)
        cleanup(work)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))
    main()
