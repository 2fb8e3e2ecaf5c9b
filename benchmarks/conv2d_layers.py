"""Per-layer view of the fallback: every distinct Conv2d of the YOLOv8n-shaped model, native vs fallback.

Times forward and forward+backward of each convolution shape (half precision, as under AMP) with
CUDA events, weighted by how often the shape occurs, and optionally prints profiler tables of one
full training step per variant. A development aid for tuning ``gpuwatch.train.conv2d``.

    python benchmarks/conv2d_layers.py --batch 16 --profile
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections import Counter
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from conv2d_fallback import tuning_of  # noqa: E402
from yolov8n_model import build_model, train_steps  # noqa: E402

from gpuwatch.train.patch import patch_conv2d  # noqa: E402

Shape = tuple[tuple[int, ...], int, int, int, int, int, bool]  # input, out_c, k, stride, pad, groups, bias


def conv_shapes(batch: int, image_size: int) -> Counter[Shape]:
    model, shapes = build_model(), Counter()

    def record(module: nn.Conv2d, inputs: tuple[torch.Tensor, ...]) -> None:
        k, s, p = module.kernel_size[0], module.stride[0], module.padding[0]
        shapes[(tuple(inputs[0].shape), module.out_channels, k, s, p, module.groups, module.bias is not None)] += 1

    for module in model.modules():
        if isinstance(module, nn.Conv2d):
            module.register_forward_pre_hook(record)
    with torch.device("meta"):
        model.to("meta")(torch.empty(batch, 3, image_size, image_size))
    return shapes


def time_ms(fn, reps: int) -> float:
    for _ in range(3):
        fn()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def layer_table(batch: int, image_size: int, variants: list[str], reps: int, dtype: torch.dtype) -> None:
    totals = {v: [0.0, 0.0] for v in variants}
    print("| input | out | k/s/p | n | " + " | ".join(f"{v} fwd / fwd+bwd ms" for v in variants) + " |")
    print("|---" * (4 + len(variants)) + "|")
    for (shape, out_c, k, s, p, g, has_bias), count in sorted(conv_shapes(batch, image_size).items()):
        x = torch.randn(shape, device="cuda", dtype=dtype, requires_grad=True)
        conv = nn.Conv2d(shape[1], out_c, k, s, p, groups=g, bias=has_bias).to("cuda", dtype)
        grad = torch.randn_like(conv(x))
        cells = []
        for variant in variants:
            with patch_conv2d(conv, "off" if variant == "native" else "on", tuning=tuning_of(variant)):
                fwd = time_ms(lambda conv=conv, x=x: conv(x), reps)
                both = time_ms(lambda conv=conv, x=x, grad=grad: conv(x).backward(grad), reps)
            totals[variant][0] += fwd * count
            totals[variant][1] += both * count
            cells.append(f"{fwd:.3f} / {both:.3f}")
        print(f"| {list(shape)} | {out_c} | {k}/{s}/{p} | {count} | " + " | ".join(cells) + " |", flush=True)
    print("| total (weighted) | | | | " + " | ".join(f"{a:.2f} / {b:.2f}" for a, b in totals.values()) + " |")


def profile_step(batch: int, image_size: int, fallback: bool, rows: int) -> None:
    from torch.profiler import ProfilerActivity, profile

    model = build_model()
    with patch_conv2d(model, "on" if fallback else "off"):
        train_steps(model, steps=3, batch_size=batch, image_size=image_size, amp_dtype=torch.float16)
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            train_steps(model, steps=2, batch_size=batch, image_size=image_size, amp_dtype=torch.float16)
    print(f"\n### profile, {'fallback' if fallback else 'native'}, batch {batch}, AMP, 2 steps")
    averages = prof.key_averages()
    for key in ("device_time_total", "cuda_time_total"):
        try:
            print(averages.table(sort_by=key, row_limit=rows, max_name_column_width=60))
            break
        except (AttributeError, KeyError, ValueError):
            continue


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--image-size", type=int, default=640)
    parser.add_argument("--variants", nargs="+", default=["native", "fallback", "fallback:gemm/fold"])
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--dtype", choices=["fp16", "fp32"], default="fp16")
    parser.add_argument("--profile", action="store_true", help="also profile one full AMP step per variant")
    parser.add_argument("--rows", type=int, default=30)
    args = parser.parse_args()
    torch.backends.cudnn.benchmark = True
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    dtype = torch.float16 if args.dtype == "fp16" else torch.float32
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, batch {args.batch}, {args.dtype}")
    layer_table(args.batch, args.image_size, args.variants, args.reps, dtype)
    if args.profile:
        profile_step(args.batch, args.image_size, False, args.rows)
        profile_step(args.batch, args.image_size, True, args.rows)


if __name__ == "__main__":
    main()
