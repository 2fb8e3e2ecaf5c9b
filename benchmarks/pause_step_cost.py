"""What gpuwatch's step hooks add to a short training step, measured side by side (issue 38 point 4).

A training step of about ``--step-ms`` (5 ms by default: forward, backward and ``optimizer.step()`` of
an MLP sized to take that long) runs in alternating blocks: plain (no hooks) and hooked (the hooks
``gpuwatch train`` installs, as under the supervisor: a heartbeat file in a temporary folder, written
at most every second, and a pause file that does not exist). The order inside each pair of blocks is
drawn at random, so a drift of the machine (clocks, other load) falls on both. Each block's time per
step is its wall time over its steps, with one device synchronisation at the block's end (as a real
loop: the host runs ahead of the GPU, so hook time the GPU hides costs nothing). The result is the
mean of the paired differences (hooked - plain) with a t-based 95 % confidence interval, and a
bootstrap interval of the same mean, in µs and in % of the plain step.

On a GPU (``--device cuda``, the default when one is there) and, as a fallback, on the CPU. Prints one
JSON line; ``--json FILE`` writes it too.

    python benchmarks/pause_step_cost.py                      # CUDA if present, 5 ms step, 40 pairs of blocks
    python benchmarks/pause_step_cost.py --device cpu --pairs 20
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gpuwatch.train.pause.hooks import StepHeartbeat  # noqa: E402

# Two-sided 97.5 % quantiles of Student's t for small samples (df -> t); larger samples use 1.96 + a
# small correction (within 0.5 % of the exact value from df 30 on).
_T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228,
         12: 2.179, 15: 2.131, 20: 2.086, 25: 2.060, 30: 2.042}


def t975(df: int) -> float:
    if df in _T975:
        return _T975[df]
    if df < 30:
        return _T975[max(k for k in _T975 if k <= df)]
    return 1.96 + 2.4 / df


def build_step(device: torch.device, width: int, layers: int) -> tuple[Callable[[], None], torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Sequential(nn.Linear(width, width), nn.ReLU()) for _ in range(layers)]).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-4, momentum=0.9)
    x = torch.randn(256 if device.type == "cuda" else 32, width, device=device)

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        model(x).square().mean().backward()
        optimizer.step()

    return step, optimizer


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def block_s(step: Callable[[], None], steps: int, device: torch.device) -> float:
    """Seconds per step over one block: one synchronisation at the end, as a training loop has."""
    sync(device)
    start = time.perf_counter()
    for _ in range(steps):
        step()
    sync(device)
    return (time.perf_counter() - start) / steps


def calibrate(device: torch.device, target_ms: float) -> tuple[int, int, float]:
    """(width, layers, step ms): narrow the layer while one is too slow, then add layers up to ~target."""
    width, layers = (2048, 4) if device.type == "cuda" else (256, 1)
    while True:
        step, _ = build_step(device, width, layers)
        block_s(step, 5, device)  # warm-up: kernels, allocator, autograd graph
        ms = block_s(step, 20, device) * 1e3
        if ms > target_ms * 1.2 and layers == 1 and width > 16:
            width //= 2
            continue
        if ms >= target_ms * 0.9 or layers >= 256 or ms > target_ms * 1.2:
            return width, layers, ms
        layers = max(layers + 1, round(layers * target_ms / max(ms, 1e-3)))


def measure(device: torch.device, step_ms: float, pairs: int, steps: int, seed: int) -> dict[str, object]:
    width, layers, calibrated_ms = calibrate(device, step_ms)
    step, optimizer = build_step(device, width, layers)
    folder = tempfile.mkdtemp(prefix="gpuwatch-step-cost-")
    hooks = StepHeartbeat(os.path.join(folder, "heartbeat.json"), os.path.join(folder, "pause"))
    rng = random.Random(seed)
    block_s(step, steps, device)  # warm-up
    hooks.install()
    block_s(step, steps, device)  # the hooks' first step (role, first heartbeat) out of the measurement
    hooks.remove()
    plain: list[float] = []
    hooked: list[float] = []
    for _ in range(pairs):
        order = [False, True]
        rng.shuffle(order)
        for with_hooks in order:
            if with_hooks:
                hooks.install()
                hooked.append(block_s(step, steps, device))
                hooks.remove()
            else:
                plain.append(block_s(step, steps, device))
    diffs = [h - p for h, p in zip(hooked, plain, strict=True)]
    plain_mean = statistics.fmean(plain)
    mean = statistics.fmean(diffs)
    half = t975(len(diffs) - 1) * statistics.stdev(diffs) / math.sqrt(len(diffs))
    boot = sorted(statistics.fmean(rng.choices(diffs, k=len(diffs))) for _ in range(5000))
    pct = 100.0 / plain_mean
    return {
        "benchmark": "pause_step_cost", "device": _device_name(device), "torch": torch.__version__,
        "python": platform.python_version(), "width": width, "layers": layers, "calibrated_step_ms": calibrated_ms,
        "pairs": pairs, "steps_per_block": steps, "hooks_steps": hooks.steps,
        "plain_step_ms": plain_mean * 1e3, "hooked_step_ms": statistics.fmean(hooked) * 1e3,
        "added_us": mean * 1e6, "added_pct": mean * pct,
        "ci95_t_pct": [(mean - half) * pct, (mean + half) * pct],
        "ci95_bootstrap_pct": [boot[124] * pct, boot[4874] * pct],
        "target_pct": 0.5, "met": (mean + half) * pct < 0.5,
        "optimizer": type(optimizer).__name__,
    }


def _device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return str(torch.cuda.get_device_name(device))
    return f"cpu ({platform.processor() or platform.machine()}, {torch.get_num_threads()} threads)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--step-ms", type=float, default=5.0, help="the training step to calibrate (default 5 ms)")
    parser.add_argument("--pairs", type=int, default=40, help="pairs of blocks (plain, hooked) in random order")
    parser.add_argument("--steps", type=int, default=200, help="steps per block (default 200: 1 s at 5 ms)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, help="also write the JSON line to this file")
    args = parser.parse_args()
    result = measure(torch.device(args.device), args.step_ms, args.pairs, args.steps, args.seed)
    line = json.dumps(result)
    print(line)
    if args.json is not None:
        args.json.write_text(line + "\n")


if __name__ == "__main__":
    main()
