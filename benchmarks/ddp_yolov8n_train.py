"""An ordinary DDP training script for the NVIDIA run: the YOLOv8n-shaped model under DistributedDataParallel.

It knows nothing about gpuwatch; run it under torchrun, under gpuwatch train, which puts the step hooks
and the job-wide pause into every rank:

    gpuwatch train -- torchrun --nproc-per-node 1 benchmarks/ddp_yolov8n_train.py --pg-timeout-s 10
"""

from __future__ import annotations

import argparse
import datetime
import os
import time

import torch
import torch.distributed as dist
from yolov8n_model import build_model  # beside this script


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=1_000_000)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--image-size", type=int, default=640)
    p.add_argument("--pg-timeout-s", type=float, default=600.0, help="the process group's (NCCL's) timeout")
    p.add_argument("--report-every", type=int, default=50)
    p.add_argument("--cpu", action="store_true", help="gloo on the CPU (a dry run of the scripts around it)")
    p.add_argument("--step-log", help="PREFIX: every rank writes PREFIX.rank<R>.tsv, one line per step: step, "
                   "CLOCK_MONOTONIC at its start and end (s), loss (a sync per step, as a progress bar's)")
    args = p.parse_args()
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device("cpu") if args.cpu else torch.device("cuda", local_rank)
    if not args.cpu:
        torch.cuda.set_device(device)
    dist.init_process_group("gloo" if args.cpu else "nccl", timeout=datetime.timedelta(seconds=args.pg_timeout_s))
    ids = None if args.cpu else [local_rank]
    model = torch.nn.parallel.DistributedDataParallel(build_model().to(device), device_ids=ids)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.937, nesterov=True)
    images = torch.randn(args.batch, 3, args.image_size, args.image_size, device=device)
    log = open(f"{args.step_log}.rank{dist.get_rank()}.tsv", "w", buffering=1) if args.step_log else None
    started = time.perf_counter()
    for step in range(1, args.steps + 1):
        step_start = time.monotonic()
        optimizer.zero_grad(set_to_none=True)
        loss = sum(out.float().square().mean() for out in model(images))
        loss.backward()  # type: ignore[union-attr]
        optimizer.step()  # gpuwatch's hooks, and a pause's hold, are around this call
        if log is not None:
            value = float(loss.detach())  # type: ignore[union-attr]
            log.write(f"{step}\t{step_start:.4f}\t{time.monotonic():.4f}\t{value:.6f}\n")
        if step % args.report_every == 0 and dist.get_rank() == 0:
            print(f"step {step} loss {float(loss.detach()):.4f} "
                  f"({step / (time.perf_counter() - started):.1f} steps/s overall)", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
