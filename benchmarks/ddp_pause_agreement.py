"""What the job-wide pause costs a DDP training step: the agreement next to a YOLOv8n-shaped step.

Run under torchrun; every rank trains the YOLOv8n-shaped network of yolov8n_model.py under
DistributedDataParallel and calls gpuwatch's step hooks (``StepHeartbeat``, as the launcher installs
them in every rank) around ``optimizer.step()``, with no pause requested. Variants, interleaved in
blocks of steps so that host drift hits them alike:

* ``none``: no hooks (the step time the ratio is taken against);
* ``agreement``: the coherence mechanism alone (an agreement about every second of steps, raised while it
  would cost more than 0.2 % of the steps between two, at most 5 s of steps apart), no heartbeat file;
* ``as shipped``: the same plus the rank's heartbeat file, rewritten every second;
* ``every step``: an agreement at every step (what a naive coherent pause would cost).

Per step, the time spent in the hooks is measured on every rank; the rank that arrives last at an
agreement waits for nobody, so the per-step minimum over the ranks is what the mechanism adds to the
job's critical path ("added"). Part A times the bare operations in a lockstep loop: a stat of the
pause file, a store round trip, the 3-integer all_reduce on the gloo side group.

    torchrun --nproc-per-node 2 benchmarks/ddp_pause_agreement.py --json out.json          # CPU, gloo
    torchrun --nproc-per-node 1 benchmarks/ddp_pause_agreement.py --device cuda --batch 16 --size 640
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from yolov8n_model import build_model  # noqa: E402

from gpuwatch.train.pause import lockstep  # noqa: E402
from gpuwatch.train.pause.cadence import Cadence  # noqa: E402
from gpuwatch.train.pause.hooks import StepHeartbeat  # noqa: E402

EVERY_STEP = Cadence(interval_s=1e-9, budget_ratio=0.0, max_latency_s=1e-9)


def quantiles(seconds: list[float]) -> dict[str, float]:
    ordered = sorted(seconds)
    return {"median_us": ordered[len(ordered) // 2] * 1e6, "p90_us": ordered[int(len(ordered) * 0.9)] * 1e6,
            "mean_us": statistics.fmean(ordered) * 1e6, "n": len(ordered)}


def micro(n: int, work: Path) -> dict[str, dict[str, float]]:
    store = dist.PrefixStore("bench/", lockstep.job_store())  # type: ignore[attr-defined]
    store.set("key", "1")
    side = dist.new_group(backend="gloo", timeout=lockstep.pg_timeout())
    pause = str(work / "no-such-pause-file")
    ops = {
        "stat of the pause file": lambda: os.path.exists(pause),
        "store.check (one round trip)": lambda: store.check(["key"]),
        "store.add(key, 0)": lambda: store.add("count", 0),
        "all_reduce MAX 3 x int64, gloo side group": lambda: dist.all_reduce(
            torch.zeros(3, dtype=torch.int64), op=dist.ReduceOp.MAX, group=side),
    }
    out = {}
    for name, op in ops.items():
        dist.barrier(group=side)
        times = []
        for i in range(n + 50):
            start = time.perf_counter()
            op()
            if i >= 50:
                times.append(time.perf_counter() - start)
        out[name] = quantiles(times)
    return out


def training(args: argparse.Namespace, device: torch.device, work: Path) -> dict[str, Any]:
    lockstep.track_ddp()  # as the installed hooks do: they must know the DDP parameters
    model = build_model().to(device)
    ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.001, momentum=0.9)
    images = torch.randn(args.batch, 3, args.size, args.size, device=device)
    pause = work / "no-such-pause-file"
    gates: dict[str, StepHeartbeat | None] = {
        "none": None,
        "agreement": StepHeartbeat(None, pause, cadence=Cadence()),
        "as shipped": StepHeartbeat(work / f"hb-{dist.get_rank()}.json", pause, cadence=Cadence()),
        "every step": StepHeartbeat(None, pause, cadence=EVERY_STEP),
    }
    hook_s: dict[str, list[float]] = {name: [] for name in gates}
    step_s: dict[str, list[float]] = {name: [] for name in gates}

    def one_step(name: str, record: bool = True) -> None:
        gate = gates[name]
        sync(device)
        start = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = sum(out.float().square().mean() for out in ddp(images))
        loss.backward()  # type: ignore[union-attr]
        h0 = time.perf_counter()
        if gate is not None:
            gate.before_step(opt, (), {})
        h1 = time.perf_counter()
        opt.step()
        h2 = time.perf_counter()
        if gate is not None:
            gate.after_step(opt, (), {})
        h3 = time.perf_counter()
        sync(device)
        if record:
            hook_s[name].append((h1 - h0) + (h3 - h2))
            step_s[name].append(time.perf_counter() - start)

    for name in gates:  # warm-up; every gate joins the job (its side group) in the same order everywhere
        for _ in range(args.warmup):
            one_step(name, record=False)
    for _ in range(args.rounds):
        for name, gate in gates.items():
            if gate is not None:
                gate._last_step = None  # its step-time estimate must not span the other variants' blocks
            for _ in range(args.block):
                one_step(name)
    gathered = gather("train", {"hook": hook_s, "step": step_s})
    base_ms = statistics.median(max(ts) for ts in zip(*(g["step"]["none"] for g in gathered), strict=True)) * 1e3
    out: dict[str, Any] = {}
    for name, gate in gates.items():
        added = [min(ts) for ts in zip(*(g["hook"][name] for g in gathered), strict=True)]
        steps = [max(ts) for ts in zip(*(g["step"][name] for g in gathered), strict=True)]
        mean_us = statistics.fmean(added) * 1e6
        out[name] = {
            "added_us_per_step_mean": round(mean_us, 1), "added": quantiles(added),
            "percent_of_step": round(mean_us / 1e3 / base_ms * 100, 3),
            "step_median_ms": round(statistics.median(steps) * 1e3, 2), "steps": len(steps),
            "agreement_every_k_steps": gate.job.every if gate and gate.job else None,
            "agreements_s_ewma_us": (
                round(gate.job.agree_s * 1e6, 1) if gate and gate.job and gate.job.agree_s else None
            ),
        }
    return out


def gather(name: str, value: Any) -> list[Any]:
    """Every rank's ``value``, through the job's store (all_gather_object needs numpy)."""
    store = dist.PrefixStore(f"bench/{name}/", lockstep.job_store())  # type: ignore[attr-defined]
    store.set(str(dist.get_rank()), json.dumps(value))
    return [json.loads(store.get(str(rank))) for rank in range(dist.get_world_size())]


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--size", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--block", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--micro", type=int, default=1000)
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads per rank")
    parser.add_argument("--json")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    if device.type == "cuda":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo", timeout=datetime.timedelta(seconds=300))
    with tempfile.TemporaryDirectory(prefix="gpuwatch-agree-") as tmp:
        work = Path(tmp)
        parts = micro(args.micro, work)
        gathered = gather("micro", parts)
        result = {"world_size": dist.get_world_size(), "backend": dist.get_backend(), "device": str(device),
                  "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
                  "torch": torch.__version__, "args": vars(args), "micro_per_rank": gathered,
                  "train": training(args, device, work), "loadavg_end": os.getloadavg()}
    if dist.get_rank() == 0:
        print(f"{result['world_size']} ranks, {result['backend']}, {result['device_name']}, "
              f"batch {args.batch} at {args.size} px, load {result['loadavg_end'][0]:.1f}")
        for name, row in result["train"].items():
            print(f"  {name:11s} step {row['step_median_ms']:8.2f} ms"
                  f"  added {row['added_us_per_step_mean']:8.1f} us/step"
                  f"  = {row['percent_of_step']:.3f} % of the step  (k = {row['agreement_every_k_steps']})")
        for name, q in gathered[0].items():
            print(f"  rank 0: {name}: median {q['median_us']:.0f} us, p90 {q['p90_us']:.0f} us")
        if args.json:
            Path(args.json).write_text(json.dumps(result, indent=1))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
