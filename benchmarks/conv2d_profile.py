"""Where the fallback's step time goes: host vs GPU per training step, GPU time by kernel family, backward cost.

A development aid next to benchmarks/conv2d_fallback.py (which measures the ratios). On the
YOLOv8n-shaped model at one batch size, AMP, for native and fallback alike it prints

* host time to issue forward and backward (no sync), the optimizer step and the synchronised wall
  time, and the GPU's busy time per step (profiler, kernels only), native with its backward on the
  autograd engine's thread and on the calling thread, the fallback on the calling thread;
* GPU time per step grouped by kernel family (im2col, col2im, GEMM, cuDNN, elementwise...);
* the host cost of the fallback's backward helpers for one 3x3 layer, called directly and inside
  the autograd engine (which runs backward on its own device thread).

    python benchmarks/conv2d_profile.py --batch 16
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from yolov8n_model import build_model  # noqa: E402

from gpuwatch.train.conv2d import paths  # noqa: E402
from gpuwatch.train.conv2d.plan import DEFAULT_TUNING, plan_for  # noqa: E402
from gpuwatch.train.patch import patch_conv2d  # noqa: E402

FAMILIES = (
    "im2col", "col2im", "nvjet", "gemm", "cutlass", "bn_", "cudnn", "conv", "reduce_kernel", "elementwise", "Cat"
)


def _gpu_ms_by_family(prof: profile, steps: int) -> dict[str, float]:
    totals: dict[str, float] = {}
    for event in prof.key_averages():
        if event.device_type != torch.autograd.DeviceType.CUDA:
            continue
        family = next((f for f in FAMILIES if f in event.key), "other")
        totals[family] = totals.get(family, 0.0) + event.self_device_time_total / steps / 1e3
    return totals


def model_split(variant: str, batch: int, steps: int) -> None:
    """``variant``: native (engine's backward thread), native@caller, fallback (calling thread)."""
    fallback, on_caller = variant == "fallback", variant != "native"
    model = build_model().cuda().train()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.937, nesterov=True)
    scaler = torch.amp.GradScaler("cuda")
    images = torch.randn(batch, 3, 640, 640, device="cuda")
    marks: list[tuple[float, float, float, float]] = []

    def step() -> None:
        torch.cuda.synchronize()
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.float16):
            loss = sum(out.float().square().mean() for out in model(images))
        issued_fwd = time.perf_counter()
        scaler.scale(loss).backward()
        issued_bwd = time.perf_counter()
        scaler.step(optimizer)
        scaler.update()
        stepped = time.perf_counter()
        torch.cuda.synchronize()
        end = time.perf_counter()
        marks.append((issued_fwd - start, issued_bwd - issued_fwd, stepped - issued_bwd, end - start))

    with patch_conv2d(model, "on" if fallback else "off", backward_on_caller=False), \
            torch.autograd.set_multithreading_enabled(not on_caller):
        for _ in range(8):
            step()
        marks.clear()
        for _ in range(steps):
            step()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(3):
                step()
    fwd, bwd, opt, wall = (statistics.median(m[i] for m in marks[:steps]) * 1e3 for i in range(4))
    families = _gpu_ms_by_family(prof, 3)
    print(f"{variant}: host forward {fwd:.1f} ms, host backward {bwd:.1f} ms, optimizer+wait {opt:.1f} ms, "
          f"wall {wall:.1f} ms; GPU busy {sum(families.values()):.1f} ms")
    ranked = sorted(families.items(), key=lambda kv: -kv[1])
    print("  GPU ms by kernel family: " + ", ".join(f"{k} {v:.2f}" for k, v in ranked))


def _host_us(fn: Callable[[], object], reps: int = 300) -> float:
    for _ in range(30):
        fn()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(reps):
            fn()
        best = min(best, (time.perf_counter() - start) / reps * 1e6)
        torch.cuda.synchronize()
    return best


def backward_cost(batch: int) -> None:
    """The backward helpers of one 3x3 layer: called directly vs run by the autograd engine."""
    x = torch.randn(batch, 64, 40, 40, device="cuda", dtype=torch.half)
    weight = torch.randn(64, 64, 3, 3, device="cuda", dtype=torch.half)
    grad_out = torch.randn_like(x)
    plan = plan_for(x.shape, weight.shape, x.dtype, (1, 1), (1, 1), (1, 1), 1, DEFAULT_TUNING)
    flipped = paths.flipped_kernel(weight, 1)

    def helpers() -> None:  # what the Function's backward runs for this layer with the fixed strategies
        paths.both_grads_shared(x, grad_out, weight, flipped, plan)

    class Work(torch.autograd.Function):
        @staticmethod
        def forward(ctx, a):  # type: ignore[override]
            return a.view_as(a)

        @staticmethod
        def backward(ctx, grad):  # type: ignore[override]
            helpers()
            return grad

    class Empty(Work):
        @staticmethod
        def backward(ctx, grad):  # type: ignore[override]
            return grad

    leaf = torch.zeros(4, device="cuda", requires_grad=True)
    seed = torch.ones(4, device="cuda")
    direct = _host_us(helpers)
    in_engine = _host_us(lambda: Work.apply(leaf).backward(seed)) - _host_us(lambda: Empty.apply(leaf).backward(seed))
    print(f"backward helpers of a {list(x.shape)} 3x3 layer: {direct:.0f} us called directly, "
          f"{in_engine:.0f} us inside the autograd engine")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--steps", type=int, default=30)
    args = parser.parse_args()
    torch.backends.cudnn.benchmark = True
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, batch {args.batch}, AMP fp16")
    for variant in ("native", "native@caller", "fallback") * 2:
        model_split(variant, args.batch, args.steps)
    backward_cost(args.batch)


if __name__ == "__main__":
    main()
