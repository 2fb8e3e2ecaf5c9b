"""An ordinary training script for the NVIDIA end-to-end run: the YOLOv8n-shaped model on random images.

It knows nothing about gpuwatch; run it under the launcher, which adds the conv2d fallback, the step
heartbeat and the pause gate:  python -m gpuwatch.launch --conv2d-fallback on benchmarks/e2e_yolov8n_train.py
"""

from __future__ import annotations

import argparse
import time

import torch
from yolov8n_model import build_model, train_steps  # beside this script


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=1_000_000)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--image-size", type=int, default=640)
    p.add_argument("--report-every", type=int, default=50)
    args = p.parse_args()
    model = build_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.937, nesterov=True)
    done, started = 0, time.perf_counter()
    while done < args.steps:
        chunk = min(args.report_every, args.steps - done)
        result = train_steps(model, steps=chunk, batch_size=args.batch, image_size=args.image_size,
                             optimizer=optimizer, seed=done)
        done += chunk
        print(f"step {done} loss {result.loss:.4f} median step {result.median * 1000:.1f} ms "
              f"({done / (time.perf_counter() - started):.1f} steps/s overall)", flush=True)


if __name__ == "__main__":
    main()
