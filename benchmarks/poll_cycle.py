"""Poll-cycle cost: time for Sampler.sample() to read one full snapshot, per GPU, for 1, 2 and 8 GPUs.

Target: under 1 ms per GPU, growing linearly with the GPU count (8-GPU cost / (8 x 1-GPU cost) ~ 1).
Two measurements, interleaved: the daemon's steady-state tick (fixed attributes remembered since
discovery) and a full read of every file (the first tick after each 30 s re-discovery).

    .venv/bin/python benchmarks/poll_cycle.py [--gpus 1 2 8] [--cycles 2000]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from gpuwatch.gpus.amdgpu import AmdgpuSource, discover, read_card
from gpuwatch.gpus.sampler import Sampler
from gpuwatch.sysfs import Sysfs

from _common import build_tree, cleanup, fixtures_arg, machine, median, percentile, temp_dir

TARGET_PER_GPU_MS = 1.0


def measure(
    counts: list[int], cycles: int, fixtures: Path, capture: str
) -> tuple[dict[int, list[float]], dict[int, list[float]]]:
    """Samples the trees round-robin, so load from other processes hits every GPU count alike."""
    root = temp_dir("poll")
    try:
        samplers = {}
        for gpus in counts:
            build_tree(root / f"sys{gpus}", fixtures, capture, gpus)
            sampler = Sampler([AmdgpuSource(Sysfs(root / f"sys{gpus}"))])
            snapshot = sampler.sample()  # discovery happens here, as at daemon start
            assert len(snapshot.gpus) == gpus and all(g.up and g.temps for g in snapshot.gpus), snapshot
            samplers[gpus] = sampler
        for _ in range(min(200, cycles)):
            for sampler in samplers.values():
                sampler.sample()
        durations: dict[int, list[float]] = {gpus: [] for gpus in counts}
        full: dict[int, list[float]] = {gpus: [] for gpus in counts}
        cards = {gpus: (Sysfs(root / f"sys{gpus}"), discover(Sysfs(root / f"sys{gpus}")).cards) for gpus in counts}
        for _ in range(cycles):
            for gpus, sampler in samplers.items():
                started = time.perf_counter()
                sampler.sample()
                durations[gpus].append(time.perf_counter() - started)
                sysfs, found = cards[gpus]
                started = time.perf_counter()
                for card in found:
                    read_card(sysfs, card)
                full[gpus].append(time.perf_counter() - started)
        return durations, full
    finally:
        cleanup(root)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, nargs="+", default=[1, 2, 8])
    parser.add_argument("--cycles", type=int, default=2000)
    fixtures_arg(parser)
    args = parser.parse_args()
    print(f"machine: {machine()}")
    print(f"capture: {args.capture}; {args.cycles} cycles per row after warm-up, rows interleaved (discovery excluded)\n")
    print(
        f"{'GPUs':>4} {'min ms':>8} {'p50 ms':>8} {'p99 ms':>8} {'p50/GPU ms':>11} {'target/GPU':>11} "
        f"{'p50/GPU vs target':>18} {'full read p50/GPU ms':>21}"
    )
    per_gpu: dict[int, float] = {}
    min_per_gpu: dict[int, float] = {}
    steady, full = measure(args.gpus, args.cycles, args.fixtures, args.capture)
    for gpus, durations in steady.items():
        p50, p99 = median(durations) * 1e3, percentile(durations, 99) * 1e3
        per_gpu[gpus] = p50 / gpus
        min_per_gpu[gpus] = min(durations) * 1e3 / gpus
        print(
            f"{gpus:>4} {min(durations) * 1e3:>8.3f} {p50:>8.3f} {p99:>8.3f} {p50 / gpus:>11.3f} {TARGET_PER_GPU_MS:>11.3f} "
            f"{p50 / gpus / TARGET_PER_GPU_MS:>17.2f}x {median(full[gpus]) * 1e3 / gpus:>21.3f}"
        )
    base = min(per_gpu)
    print("\nlinearity: per-GPU cost relative to the smallest GPU count (1.00 = perfectly linear);")
    print("min is the least noisy on a shared machine, p50 includes other processes' load")
    for gpus in per_gpu:
        print(f"  {gpus} GPUs: p50 {per_gpu[gpus] / per_gpu[base]:.2f}   min {min_per_gpu[gpus] / min_per_gpu[base]:.2f}")
    return 0 if all(cost < TARGET_PER_GPU_MS for cost in per_gpu.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
