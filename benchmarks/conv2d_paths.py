"""Every MIOpen-free path of the conv2d fallback, forced one at a time, against the native convolution on the device.

For a grid of convolutions (strides, padding, dilation, groups, depthwise, 1x1, bias) in float32 (TF32
off) and float16, each path of each direction (conv2d/paths.py: forward, input gradient, weight
gradient, both gradients, whole-layer routes) is forced through the autotuner with a timer that
prefers it, and the forward and gradients are compared with cuDNN's (max error relative to the
reference's largest value). It also counts convolutions that reached cuDNN/MIOpen (must be 0) and
prints the host time per call of each path on one small layer, where the host cost shows, and the
first call's time of the Triton kernels (their compilation).

    python benchmarks/conv2d_paths.py
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from conv2d_fallback import _ConvCounter  # noqa: E402

from gpuwatch.train.conv2d import paths  # noqa: E402
from gpuwatch.train.conv2d.function import conv2d  # noqa: E402
from gpuwatch.train.conv2d.plan import DEFAULT_TUNING, plan_for  # noqa: E402
from gpuwatch.train.conv2d.tune import TUNER, pinned_timer  # noqa: E402

# (in_channels, out_channels, kernel, stride, padding, dilation, groups, bias)
GRID = [
    (16, 24, 3, 1, 1, 1, 1, True),
    (16, 32, 3, 2, 1, 1, 1, False),
    (16, 32, 3, 1, 0, 2, 2, True),
    (24, 24, 3, 1, 1, 1, 24, True),
    (3, 16, 3, 2, 1, 1, 1, False),
    (32, 16, 1, 1, 0, 1, 1, True),
    (32, 64, 1, 2, 0, 1, 1, False),
    (16, 16, 5, 2, 2, 1, 1, True),
]
FORCED = [
    *[("forward", name) for name in paths.FORWARD],
    *[("input_grad", name) for name in paths.INPUT_GRAD],
    *[("weight_grad", name) for name in paths.WEIGHT_GRAD],
    *[("both_grads", name) for name in paths.BOTH_GRADS],
    ("layer", "thnn"),
    ("layer", "pointwise"),
]


def check(args: argparse.Namespace) -> None:
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    print("| path | dtype | cases | max fwd err | max grad err | vendor convs | chosen as |")
    print("|---|---|---|---|---|---|---|")
    for direction, name in FORCED:
        for dtype in (torch.float32, torch.float16):
            worst_fwd = worst_grad = 0.0
            vendor = cases = 0
            chosen = set()
            for cin, cout, k, s, p, d, g, bias in GRID:
                plan_for.cache_clear()
                TUNER.timer_for = lambda device, label=f"{direction}.{name}": pinned_timer(label)
                x = torch.randn(2, cin, 17, 19, device=args.device, dtype=dtype, requires_grad=True)
                w = (torch.randn(cout, cin // g, k, k, device=args.device, dtype=dtype) / (cin // g * k * k) ** 0.5)
                w.requires_grad_()
                b = torch.randn(cout, device=args.device, dtype=dtype, requires_grad=True) if bias else None
                leaves = [t for t in (x, w, b) if t is not None]
                with _ConvCounter() as counter:
                    out = conv2d(x, w, b, s, p, d, g)
                    grad = torch.randn_like(out)
                    got = torch.autograd.grad(out, leaves, grad)
                vendor += counter.convs
                ref = F.conv2d(x, w, b, s, p, d, g)
                want = torch.autograd.grad(ref, leaves, grad)
                worst_fwd = max(worst_fwd, _err(out, ref))
                worst_grad = max(worst_grad, *(_err(a, r) for a, r in zip(got, want, strict=True)))
                chosen.add(TUNER.history[-1][1].describe() if TUNER.history else "?")
                cases += 1
            used = [c for c in chosen if name in c]
            print(f"| {direction}.{name} | {str(dtype)[6:]} | {cases} | {worst_fwd:.1e} | {worst_grad:.1e} "
                  f"| {vendor} | {'; '.join(sorted(used))[:120] or 'not eligible here'} |", flush=True)


def _err(got: torch.Tensor, want: torch.Tensor) -> float:
    got, want = got.detach().float(), want.detach().float()
    return float((got - want).abs().max() / want.abs().max().clamp_min(1e-30))


def host_cost(args: argparse.Namespace) -> None:
    """Host time per call (no sync inside the loop) of each path on a small layer, and Triton's first call."""
    device = torch.device(args.device)
    x = torch.randn(4, 64, 40, 40, device=device, dtype=torch.float16)
    w = torch.randn(64, 64, 3, 3, device=device, dtype=torch.float16)
    plan = plan_for(x.shape, w.shape, x.dtype, 1, 1, 1, 1, DEFAULT_TUNING)
    go = torch.randn(4, 64, 40, 40, device=device, dtype=torch.float16)
    flipped = paths.flipped_kernel(w, 1)
    calls = {
        **{f"forward.{n}": (lambda f=f: f(x, w, plan)) for n, f in paths.FORWARD.items() if n != "matmul"},
        **{f"input_grad.{n}": (lambda f=f: f(x, go, w, flipped, plan))
           for n, f in paths.INPUT_GRAD.items() if n != "matmul"},
        **{f"weight_grad.{n}": (lambda f=f: f(x, go, w, plan)) for n, f in paths.WEIGHT_GRAD.items()},
    }
    print("\nhost us per call, fp16 [4, 64, 40, 40] 3x3 (first call ms in brackets):")
    for label, call in calls.items():
        torch.cuda.synchronize()
        start = time.perf_counter()
        call()
        torch.cuda.synchronize()
        first = (time.perf_counter() - start) * 1e3
        for _ in range(10):
            call()
        torch.cuda.synchronize()
        best = float("inf")
        for _ in range(3):
            start = time.perf_counter()
            for _ in range(50):
                call()
            best = min(best, (time.perf_counter() - start) / 50 * 1e6)
            torch.cuda.synchronize()
        print(f"  {label}: {best:.0f} us [{first:.0f} ms]", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args()
    TUNER.devices = frozenset({torch.device(args.device).type})
    host_cost(args)
    check(args)


if __name__ == "__main__":
    main()
