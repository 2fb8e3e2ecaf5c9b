"""A YOLOv8n-shaped training run on random images: a realistic conv workload for end-to-end checks.

Run it plainly, or under the launcher so the daemon sees its heartbeat and can pause it:

    python -m gpuwatch.launch --conv2d-fallback on benchmarks/yolov8n_train.py --steps 2000

Prints the step rate every ``--log-every`` steps. ``--device cpu --image-size 64`` is a smoke test.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from yolov8n_model import build_model, make_step  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--image-size", type=int, default=640)
    parser.add_argument("--precision", choices=["amp", "amp-bf16", "fp32"], default="amp")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--log-every", type=int, default=50)
    args = parser.parse_args()
    amp_dtype = {"amp": torch.float16, "amp-bf16": torch.bfloat16, "fp32": None}[args.precision]
    if torch.device(args.device).type == "cpu" and amp_dtype == torch.float16:
        amp_dtype = torch.bfloat16  # CPU autocast runs bfloat16
    step = make_step(
        build_model(), batch_size=args.batch, image_size=args.image_size, device=args.device, amp_dtype=amp_dtype
    )
    start, last = time.perf_counter(), 0
    for index in range(1, args.steps + 1):
        loss = step()
        if index % args.log_every == 0 or index == args.steps:
            value = loss.item()  # synchronises, so the rate below counts finished steps
            rate = (index - last) / (time.perf_counter() - start)
            print(f"step {index}/{args.steps} loss {value:.4f} {rate:.2f} steps/s", flush=True)
            start, last = time.perf_counter(), index
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
