"""Poll-cycle cost: time for Sampler.sample() to read one full snapshot, per GPU, for 1, 2 and 8 GPUs.

Target: under 1 ms per GPU, growing linearly with the GPU count (8-GPU cost / (8 x 1-GPU cost) ~ 1).
Two measurements, interleaved: the daemon's steady-state tick (fixed attributes remembered since
discovery) and a full read of every file (the first tick after each 30 s re-discovery).
``--telemetry`` adds, interleaved in the same run, trees whose cards sit behind a Radeon's PCIe
switch with AER files and a gpu_metrics table (all an RDNA card on a recent kernel has to read).

    .venv/bin/python benchmarks/poll_cycle.py [--gpus 1 2 8] [--cycles 2000] [--telemetry]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from _common import build_tree, cleanup, fixtures_arg, machine, median, percentile, temp_dir

from gpuwatch.gpus.amdgpu import discover, read_card
from gpuwatch.gpus.amdgpu_source import AmdgpuSource
from gpuwatch.gpus.sampler import Sampler
from gpuwatch.sysfs import Sysfs

TARGET_PER_GPU_MS = 1.0


Row = tuple[int, bool]  # (GPUs, with telemetry files)


def measure(
    rows: list[Row], cycles: int, fixtures: Path, capture: str
) -> tuple[dict[Row, list[float]], dict[Row, list[float]]]:
    """Samples the trees round-robin, so load from other processes hits every row alike."""
    root = temp_dir("poll")
    try:
        samplers = {}
        for gpus, telemetry in rows:
            tree = root / f"sys{gpus}{'t' if telemetry else ''}"
            build_tree(tree, fixtures, capture, gpus, telemetry)
            sampler = Sampler([AmdgpuSource(Sysfs(tree))])
            snapshot = sampler.sample()  # discovery happens here, as at daemon start
            assert len(snapshot.gpus) == gpus and all(g.up and g.temps for g in snapshot.gpus), snapshot
            assert all((g.gpu_metrics_revision is not None) == telemetry for g in snapshot.gpus), snapshot
            samplers[(gpus, telemetry)] = (sampler, Sysfs(tree), discover(Sysfs(tree)).cards)
        for _ in range(min(200, cycles)):
            for sampler, _, _ in samplers.values():
                sampler.sample()
        durations: dict[Row, list[float]] = {row: [] for row in rows}
        full: dict[Row, list[float]] = {row: [] for row in rows}
        for _ in range(cycles):
            for row, (sampler, sysfs, found) in samplers.items():
                started = time.perf_counter()
                sampler.sample()
                durations[row].append(time.perf_counter() - started)
                started = time.perf_counter()
                for card in found:
                    read_card(sysfs, card)
                full[row].append(time.perf_counter() - started)
        return durations, full
    finally:
        cleanup(root)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, nargs="+", default=[1, 2, 8])
    parser.add_argument("--cycles", type=int, default=2000)
    parser.add_argument("--telemetry", action="store_true", help="also trees with PCIe switch, AER and gpu_metrics")
    fixtures_arg(parser)
    args = parser.parse_args()
    print(f"machine: {machine()}")
    print(f"capture: {args.capture}; {args.cycles} cycles per row after warm-up, rows interleaved "
          "(discovery excluded)\n")
    print(
        f"{'GPUs':>4} {'telemetry':>9} {'min ms':>8} {'p50 ms':>8} {'p99 ms':>8} {'p50/GPU ms':>11} {'target/GPU':>11} "
        f"{'p50/GPU vs target':>18} {'full read p50/GPU ms':>21}"
    )
    per_gpu: dict[Row, float] = {}
    min_per_gpu: dict[Row, float] = {}
    rows = [(gpus, telemetry) for gpus in args.gpus for telemetry in ((False, True) if args.telemetry else (False,))]
    steady, full = measure(rows, args.cycles, args.fixtures, args.capture)
    for (gpus, telemetry), durations in steady.items():
        p50, p99 = median(durations) * 1e3, percentile(durations, 99) * 1e3
        per_gpu[(gpus, telemetry)] = p50 / gpus
        min_per_gpu[(gpus, telemetry)] = min(durations) * 1e3 / gpus
        print(
            f"{gpus:>4} {'yes' if telemetry else 'no':>9} {min(durations) * 1e3:>8.3f} {p50:>8.3f} {p99:>8.3f} "
            f"{p50 / gpus:>11.3f} {TARGET_PER_GPU_MS:>11.3f} {p50 / gpus / TARGET_PER_GPU_MS:>17.2f}x "
            f"{median(full[(gpus, telemetry)]) * 1e3 / gpus:>21.3f}"
        )
    print("\nlinearity: per-GPU cost relative to the smallest GPU count (1.00 = perfectly linear);")
    print("min is the least noisy on a shared machine, p50 includes other processes' load")
    for telemetry in sorted({t for _, t in rows}):
        base = (min(g for g, t in rows if t == telemetry), telemetry)
        for gpus in (g for g, t in rows if t == telemetry):
            row = (gpus, telemetry)
            print(f"  {gpus} GPUs{' (telemetry)' if telemetry else ''}: p50 {per_gpu[row] / per_gpu[base]:.2f}   "
                  f"min {min_per_gpu[row] / min_per_gpu[base]:.2f}")
    if args.telemetry:
        for gpus in args.gpus:
            print(f"  telemetry / plain at {gpus} GPUs: p50 {per_gpu[(gpus, True)] / per_gpu[(gpus, False)]:.2f}   "
                  f"min {min_per_gpu[(gpus, True)] / min_per_gpu[(gpus, False)]:.2f}")
    return 0 if all(cost < TARGET_PER_GPU_MS for cost in per_gpu.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
