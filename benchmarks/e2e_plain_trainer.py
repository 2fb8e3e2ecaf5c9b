"""A plain PyTorch training loop that speaks gpuwatch's heartbeat/pause protocol (no launcher needed).

Used by benchmarks/e2e_nvidia.py (``--plain``) where the launcher is not available: a small conv net on
random images, one heartbeat per optimizer step, blocks while the daemon's pause file exists.
"""

from __future__ import annotations

import argparse
import os
import time

import torch
from torch import nn

from gpuwatch.heartbeat import HEARTBEAT_ENV, PAUSE_ENV, Heartbeat, pause_requested, write_heartbeat


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=1_000_000)
    p.add_argument("--batch", type=int, default=64)
    args = p.parse_args()
    device = "cuda"
    model = nn.Sequential(
        nn.Conv2d(3, 64, 3, padding=1), nn.SiLU(), nn.Conv2d(64, 128, 3, stride=2, padding=1), nn.SiLU(),
        nn.Conv2d(128, 256, 3, stride=2, padding=1), nn.SiLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(256, 80),
    ).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    images = torch.randn(args.batch, 3, 320, 320, device=device)
    labels = torch.randint(0, 80, (args.batch,), device=device)
    hb, pause = os.environ.get(HEARTBEAT_ENV), os.environ.get(PAUSE_ENV)
    started, rate = time.time(), None
    for step in range(1, args.steps + 1):
        loss = nn.functional.cross_entropy(model(images), labels)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        torch.cuda.synchronize()
        now = time.time()
        rate = step / (now - started)
        if hb:
            write_heartbeat(hb, Heartbeat(os.getpid(), step, now, rate, now))
        while pause_requested(pause):
            if hb:
                write_heartbeat(hb, Heartbeat(os.getpid(), step, now, rate, time.time(), paused=True))
            time.sleep(0.2)
        if step % 200 == 0:
            print(f"step {step} loss {loss.item():.3f} {rate:.1f} steps/s", flush=True)


if __name__ == "__main__":
    main()
