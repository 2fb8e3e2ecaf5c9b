"""What the conv2d autotuner measured and chose for each convolution of the YOLOv8n-shaped model.

For each batch size and precision: a fresh model under ``patch_conv2d(model, "on")`` takes one
training step, during which every signature is tuned (conv2d/tune.py); the script prints, per
signature, every candidate's time (us per call; forward, input gradient, weight gradient, both
gradients in one, and whole layers: the Function with the best paths vs PyTorch's slow_conv2d
under its own autograd vs the 1x1 bmm) and the choice, then the first step's time against the
median of the following steps (what autotuning cost). A development aid and the record behind the
choices quoted in docs/training-patches.md.

    python benchmarks/conv2d_autotune.py --batches 4 16 --precisions fp32 amp
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from yolov8n_model import build_model, make_step  # noqa: E402

from gpuwatch.train.conv2d.plan import plan_for  # noqa: E402
from gpuwatch.train.conv2d.tune import TUNER  # noqa: E402
from gpuwatch.train.patch import patch_conv2d  # noqa: E402

PRECISIONS = {"fp32": None, "amp": torch.float16, "amp-bf16": torch.bfloat16}
DIRECTIONS = ("forward", "input_grad", "weight_grad", "both_grads", "layer")


def tune_once(batch: int, precision: str, args: argparse.Namespace) -> None:
    device = torch.device(args.device)
    plan_for.cache_clear()
    TUNER.history.clear()
    model = build_model()
    with patch_conv2d(model, "on"):
        step = make_step(model, batch_size=batch, image_size=args.image_size, device=device,
                         amp_dtype=PRECISIONS[precision])
        seconds = []
        for _ in range(1 + args.steps):
            _sync(device)
            start = time.perf_counter()
            step()
            _sync(device)
            seconds.append(time.perf_counter() - start)
    print(f"\n### batch {batch}, {precision}: {len(TUNER.history)} signatures; first step {seconds[0] * 1e3:.0f} ms, "
          f"then median {statistics.median(seconds[1:]) * 1e3:.1f} ms")
    chosen: Counter[str] = Counter()
    for signature, choice, times in TUNER.history:
        chosen[choice.describe()] += 1
        print(f"- `{signature}` -> **{choice.describe()}**")
        for direction in DIRECTIONS:
            cells = [f"{label.partition('.')[2]} {t * 1e6:.0f}" for label, t in times.items()
                     if label.startswith(direction + ".")]
            if cells:
                print(f"  - {direction}: " + ", ".join(cells))
    print("choices: " + "; ".join(f"{name} x{count}" for name, count in chosen.most_common()))


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, nargs="+", default=[4, 16])
    parser.add_argument("--precisions", nargs="+", choices=list(PRECISIONS), default=["fp32", "amp"])
    parser.add_argument("--image-size", type=int, default=640)
    parser.add_argument("--steps", type=int, default=5, help="steps after the tuning one")
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args()
    device = torch.device(args.device)
    if device.type != "cuda":
        TUNER.devices = frozenset({device.type})  # a smoke test: CPU timings mean little
    torch.backends.cudnn.benchmark = True
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(f"{name}, torch {torch.__version__}, {args.image_size}x{args.image_size}; times in us per call")
    for batch in args.batches:
        for precision in args.precisions:
            tune_once(batch, precision, args)


if __name__ == "__main__":
    main()
