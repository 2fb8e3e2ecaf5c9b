"""What the launcher's optimizer-step hooks cost a training step on their common path.

The common path is a step with no pause requested and a heartbeat write throttled away: one
``stat`` of the pause file before the step, a counter and a clock read after it. Prints the cost in
microseconds per step (conv2d_fallback.py records the same number with its results).

    python benchmarks/heartbeat_hook_cost.py [--calls 20000]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gpuwatch.train.pause.hooks import StepHeartbeat  # noqa: E402


def hook_cost_s(calls: int = 20000, clock: Callable[[], float] = time.perf_counter) -> float:
    """Seconds one step spends in both hooks on the common path (no pause, throttled write)."""
    gate = StepHeartbeat(None, os.devnull + ".gpuwatch-no-such-pause-file", interval_s=3600.0)
    optimizer = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)
    gate.after_step(optimizer, (), {})  # the first step always publishes; time the steady state
    start = clock()
    for _ in range(calls):
        gate.before_step(optimizer, (), {})
        gate.after_step(optimizer, (), {})
    return (clock() - start) / calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20000)
    args = parser.parse_args()
    print(f"heartbeat hooks: {hook_cost_s(args.calls) * 1e6:.2f} us per step ({args.calls} steps)")


if __name__ == "__main__":
    main()
