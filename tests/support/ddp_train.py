"""A small DDP trainer that knows nothing of gpuwatch, for the distributed tests (CPU, gloo).

Three ways to start its ranks, as users do:

* under torchrun (``env://``): ``torchrun --nproc-per-node N ddp_train.py ARGS``;
* ``--spawn N``: the script starts N ranks with ``torch.multiprocessing.spawn`` (``tcp://``, no RANK);
* ``--torchrun N``: the script writes a temporary script and runs ``python -m torch.distributed.run``
  on it, as Ultralytics does for multi-GPU training.

Each rank trains a tiny conv + MLP model (a few ms per step), optionally with a spawned DataLoader
worker, checkpoints (rank 0) and resumes from ``--ckpt``, can crash one rank once, and writes one line
per start to ``<out>/starts.jsonl``: rank, pid, torchrun's restart count, the step it resumed from and
whether the conv2d patch is active in it. ``--rank0-optimizer`` adds an optimizer that rank 0 alone
steps; ``--stall-file`` stalls one rank outside any optimizer step while the file exists.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import socket
import subprocess
import sys
import tempfile
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DataLoader, Dataset


class Noise(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    def __len__(self) -> int:
        return 1 << 30

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        generator = torch.Generator().manual_seed(index)
        return torch.randn(1, 8, 8, generator=generator), torch.tensor(index % 4)


def batches(args: argparse.Namespace):
    if args.workers:
        loader = DataLoader(Noise(), batch_size=16, num_workers=args.workers, multiprocessing_context="spawn")
        yield from loader
    while True:
        yield torch.randn(16, 1, 8, 8), torch.randint(0, 4, (16,))


def train(rank: int | None, args: argparse.Namespace) -> None:
    torch.set_num_threads(1)
    timeout = datetime.timedelta(seconds=args.pg_timeout_s)
    if rank is None:
        dist.init_process_group("gloo", timeout=timeout)
    else:
        dist.init_process_group("gloo", init_method=args.init, rank=rank, world_size=args.spawn, timeout=timeout)
    rank = dist.get_rank()
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(256, 4))
    model = nn.parallel.DistributedDataParallel(net)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    side = torch.optim.SGD([torch.zeros(3, requires_grad=True)], lr=0.1) if args.rank0_optimizer else None
    step = 0
    if args.ckpt and os.path.exists(args.ckpt):
        state = torch.load(args.ckpt, weights_only=True)
        net.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        step = int(state["step"])
    with open(os.path.join(args.out, "starts.jsonl"), "a") as log:
        log.write(json.dumps({"rank": rank, "pid": os.getpid(), "attempt": attempt, "resumed_from": step,
                              "conv_forward": nn.Conv2d._conv_forward.__name__}) + "\n")
    for x, y in batches(args):
        if step >= args.steps:
            break
        while rank == args.stall_rank and args.stall_file and os.path.exists(args.stall_file):
            time.sleep(0.01)  # a rank busy elsewhere (evaluation, I/O): the others wait in all-reduce
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        opt.zero_grad()
        if side is not None and rank == 0:
            side.step()  # an optimizer rank 0 alone steps: must not take part in the job's pause
        step += 1
        if rank == args.crash_rank and step == args.crash_at_step and attempt == 0:
            os._exit(3)
        if args.ckpt and rank == 0 and step % args.ckpt_every == 0:
            torch.save({"model": net.state_dict(), "opt": opt.state_dict(), "step": step}, args.ckpt + ".tmp")
            os.replace(args.ckpt + ".tmp", args.ckpt)
        time.sleep(args.step_sleep_ms / 1000)
    dist.destroy_process_group()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def run_torchrun_itself(args: argparse.Namespace, argv: list[str]) -> None:
    """The Ultralytics pattern: a temporary script, run by ``python -m torch.distributed.run``."""
    rest = [word for i, word in enumerate(argv) if word != "--torchrun" and argv[i - 1] != "--torchrun"]
    with tempfile.NamedTemporaryFile("w", prefix="_temp_ddp_", suffix=".py", delete=False) as handle:
        handle.write(f"import sys\nsys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r})\n"
                     f"import ddp_train\nif __name__ == '__main__':\n    ddp_train.main({rest!r})\n")
    try:
        subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(args.torchrun),
                        "--master-port", str(free_port()), handle.name], check=True)
    finally:
        os.unlink(handle.name)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--steps", type=int, default=1 << 62)
    parser.add_argument("--pg-timeout-s", type=float, default=60)
    parser.add_argument("--step-sleep-ms", type=float, default=5)
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument("--ckpt")
    parser.add_argument("--ckpt-every", type=int, default=50)
    parser.add_argument("--crash-rank", type=int, default=-1)
    parser.add_argument("--crash-at-step", type=int, default=-1)
    parser.add_argument("--rank0-optimizer", action="store_true")
    parser.add_argument("--stall-rank", type=int, default=1)
    parser.add_argument("--stall-file", help="the stall rank stops stepping while this file exists")
    parser.add_argument("--spawn", type=int, default=0, help="start N ranks with torch.multiprocessing.spawn")
    parser.add_argument("--torchrun", type=int, default=0, help="start N ranks with python -m torch.distributed.run")
    args = parser.parse_args(argv)
    if args.torchrun:
        run_torchrun_itself(args, sys.argv[1:] if argv is None else argv)
    elif args.spawn:
        args.init = f"tcp://127.0.0.1:{free_port()}"
        torch.multiprocessing.spawn(train, args=(args,), nprocs=args.spawn)
    else:
        train(None, args)


if __name__ == "__main__":
    main()
