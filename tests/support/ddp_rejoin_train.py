"""A DDP trainer for the join tests (CPU, gloo, under torchrun): it knows nothing of gpuwatch.

Each rank steps a tiny DDP model forever (``--step-sleep-ms`` apart) and rewrites
``<out>/rank-<r>.json`` (its pid, torchrun's restart count, its step) every 10 steps.
``--no-gloo-rank R`` gives rank R a gloo interface that does not exist once the job's process group
is up, as a rank whose network differs would have: any gloo group it builds later fails there.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import time

import torch
import torch.distributed as dist
from torch import nn


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--step-sleep-ms", type=float, default=5)
    parser.add_argument("--no-gloo-rank", type=int, default=-1)
    args = parser.parse_args()
    torch.set_num_threads(1)
    timeout = datetime.timedelta(seconds=10)
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True":
        # Static rendezvous: the workers share the agent's store, which outlives them, and torch 2.13's
        # env:// init reads the dead incarnation's addresses there (every restart failed in
        # init_process_group, with or without gpuwatch): keys of their own per restart.
        store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False,
                              timeout=timeout)
        attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
        dist.init_process_group("gloo", store=dist.PrefixStore(f"attempt-{attempt}/", store), timeout=timeout,
                                rank=int(os.environ["RANK"]), world_size=int(os.environ["WORLD_SIZE"]))
    else:
        dist.init_process_group("gloo", timeout=timeout)
    rank = dist.get_rank()
    if rank == args.no_gloo_rank:
        os.environ["GLOO_SOCKET_IFNAME"] = "gpuwatch-test-none0"
    model = nn.parallel.DistributedDataParallel(nn.Linear(8, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    progress = os.path.join(args.out, f"rank-{rank}.json")
    step = 0
    while True:
        model(torch.randn(4, 8)).sum().backward()
        opt.step()
        opt.zero_grad()
        step += 1
        if step % 10 == 0:
            with open(progress + ".tmp", "w") as handle:
                json.dump({"pid": os.getpid(), "attempt": os.environ.get("TORCHELASTIC_RESTART_COUNT"),
                           "step": step}, handle)
            os.replace(progress + ".tmp", progress)
        time.sleep(args.step_sleep_ms / 1000)


if __name__ == "__main__":
    main()
