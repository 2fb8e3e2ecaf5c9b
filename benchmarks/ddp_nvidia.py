"""The job-wide pause of a DDP job on real NVIDIA GPUs with NCCL: coherence, NVML while held, cost per step.

One call on a GPU machine (docs/nvidia.md, "A DDP job on NCCL"; scripts/ddp-nvidia.sh sets it up).
Results go to ``--out`` as they are made, so a run cut short still leaves what it measured:

1. ``agree.json``: ``benchmarks/ddp_pause_agreement.py`` under torchrun (NCCL, one rank per GPU, the
   YOLOv8n-shaped model under DDP): what gpuwatch's step hooks add to a step, as a ratio of the step time.
2. ``pauses.jsonl``, ``summary.json``, ``timeline.csv``: ``gpuwatch run`` (NVML backend, every GPU)
   supervises ``gpuwatch train -- torchrun --nproc-per-node N benchmarks/ddp_yolov8n_train.py``
   (NCCL, process-group timeout ``--pg-timeout-s``). First one hold of ``--long-hold-x`` times that
   timeout, then ``--pauses`` holds of ``--hold-s`` at random moments (a random run of
   ``--gap-s MIN MAX`` before each), over the daemon's control socket, while a thread reads every GPU's
   NVML busy % and power every 0.1 s. Every rank logs each step's start and end (CLOCK_MONOTONIC, shared
   by the processes of one host), so coherence is judged from the ranks' own records, not from
   gpuwatch's: per pause, the step each rank is in when the job is acknowledged as paused (the same on
   every rank), no rank starting a step while held, and per GPU the time from the acknowledgement until
   NVML reads ~0 % busy at near-idle power.

    python benchmarks/ddp_nvidia.py --out OUT --nproc 2 [--pauses 50] [--dry-run]
"""

from __future__ import annotations

import argparse
import bisect
import csv
import json
import os
import pwd
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import tomli_w

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from gpuwatch.daemon.control import send_command  # noqa: E402

# The device machines keep NVLink multicast off (their KINDS.md); the trainer gets them explicitly too.
NO_MULTICAST = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
Sample = tuple[float, int, float]  # (CLOCK_MONOTONIC s, busy %, board power W)


class Sampler(threading.Thread):
    """NVML busy % and board power of GPUs 0..count-1 every ``period_s`` (zeros in a dry run)."""

    def __init__(self, count: int, dry_run: bool, period_s: float = 0.1) -> None:
        super().__init__(daemon=True)
        self.period_s, self.stop = period_s, threading.Event()
        self.samples: list[list[Sample]] = [[] for _ in range(count)]
        self.nvml: Any = None
        self.names = ["none (dry run)"] * count
        if not dry_run:
            import pynvml

            pynvml.nvmlInit()
            self.nvml = pynvml
            self.handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
            self.names = [str(pynvml.nvmlDeviceGetName(h)) for h in self.handles]

    def run(self) -> None:
        while not self.stop.is_set():
            for gpu, samples in enumerate(self.samples):
                if self.nvml is None:
                    samples.append((time.monotonic(), 0, 0.0))
                    continue
                busy = self.nvml.nvmlDeviceGetUtilizationRates(self.handles[gpu]).gpu
                watts = self.nvml.nvmlDeviceGetPowerUsage(self.handles[gpu]) / 1000.0
                samples.append((time.monotonic(), int(busy), float(watts)))
            self.stop.wait(self.period_s)

    def window(self, gpu: int, start: float, end: float) -> list[Sample]:
        return [s for s in self.samples[gpu] if start <= s[0] <= end]

    def median_w(self, gpu: int, start: float, end: float) -> float | None:
        window = self.window(gpu, start, end)
        return statistics.median(s[2] for s in window) if window else None


def torchrun() -> list[str]:
    """This interpreter's torchrun (its console script, else the module)."""
    script = Path(sys.executable).parent / "torchrun"
    return [str(script)] if script.exists() else [sys.executable, "-m", "torch.distributed.run"]


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def run_cost(args: argparse.Namespace, out: Path, env: dict[str, str]) -> None:
    cmd = [*torchrun(), "--nproc-per-node", str(args.nproc), "--master-port", str(free_port()),
           str(REPO / "benchmarks/ddp_pause_agreement.py"), "--device", "cpu" if args.dry_run else "cuda",
           "--batch", str(2 if args.dry_run else args.batch), "--size", "64" if args.dry_run else "640",
           "--rounds", str(args.rounds), "--block", str(args.block), "--warmup", "5", "--micro", "300",
           "--json", str(out / "agree.json")]
    print("$", " ".join(cmd), flush=True)
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=args.cost_timeout_s, env=env)
    (out / "agree.log").write_text(done.stdout + done.stderr[-4000:])
    print(done.stdout, done.stderr[-2000:] if done.returncode else "", flush=True)


def trainer_state(state_file: Path) -> dict[str, Any] | None:
    try:
        trainer: dict[str, Any] = json.loads(state_file.read_text())["trainers"][0]
        return trainer
    except (OSError, ValueError, KeyError, IndexError):
        return None


def wait_for(check: Any, timeout_s: float, what: str) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.02)
    raise TimeoutError(what)


def read_steps(prefix: Path, nproc: int) -> list[list[tuple[int, float, float, float]]]:
    """Every rank's step log: (step, start, end, loss); a torn last line is dropped."""
    ranks = []
    for rank in range(nproc):
        rows = []
        path = Path(f"{prefix}.rank{rank}.tsv")
        for line in path.read_text().splitlines() if path.exists() else []:
            parts = line.split("\t")
            if len(parts) == 4:
                rows.append((int(parts[0]), float(parts[1]), float(parts[2]), float(parts[3])))
        ranks.append(rows)
    return ranks


def judge_pause(pause: dict[str, Any], steps: list[list[tuple[int, float, float, float]]], sampler: Sampler,
                idle_w: list[float], train_w: list[float], settle_s: float) -> dict[str, Any]:
    """One pause against the ranks' own step logs and NVML (see the module's docstring)."""
    acked, resumed = pause["acked"], pause["resume_sent"]
    held, started_while_held = [], 0
    for rows in steps:
        starts = [r[1] for r in rows]
        at = bisect.bisect_left(starts, acked) - 1  # the step in progress (or last started) at the acknowledgement
        held.append(rows[at][0] if at >= 0 else None)
        started_while_held += sum(1 for t in starts if acked < t < resumed)
    gpus = []
    for gpu in range(len(idle_w)):
        threshold = idle_w[gpu] + 0.25 * (train_w[gpu] - idle_w[gpu])
        window = sampler.window(gpu, acked, resumed)
        quiet = [s for s in window if s[1] <= 1 and s[2] <= threshold]
        settled = [s for s in window if s[0] >= acked + settle_s]
        gpus.append({
            "quiet_after_ack_s": round(quiet[0][0] - acked, 2) if quiet else None,
            "quiet_after_request_s": round(quiet[0][0] - pause["sent"], 2) if quiet else None,
            "busy_max_after_settle": max((s[1] for s in settled), default=None),
            "power_w_max_after_settle": round(max((s[2] for s in settled), default=0.0), 1) if settled else None,
            "near_idle_threshold_w": round(threshold, 1),
        })
    coherent = len(set(held)) == 1 and None not in held and started_while_held == 0
    return {"held_steps": held, "started_while_held": started_while_held, "coherent": coherent, "gpus": gpus}


def start_daemon(args: argparse.Namespace, work: Path, out: Path, env: dict[str, str]) -> tuple[
        subprocess.Popen[bytes], Path, Path]:
    command = [sys.executable, "-m", "gpuwatch.cli", "train", "--conv2d-fallback", "off", "--", *torchrun(),
               "--nproc-per-node", str(args.nproc), "--master-port", str(free_port()),
               str(REPO / "benchmarks/ddp_yolov8n_train.py"), "--pg-timeout-s", str(args.pg_timeout_s),
               "--step-log", str(work / "steps")]
    if args.dry_run:
        command += ["--cpu", "--batch", "2", "--image-size", "64"]
    trainer: dict[str, Any] = {"name": "ddp", "command": command, "cwd": str(REPO / "benchmarks"), "env": NO_MULTICAST,
                               "user": "root" if os.geteuid() == 0 else pwd.getpwuid(os.geteuid()).pw_name,
                               "pause_ack_timeout_s": 30.0, "hang_timeout_s": 600.0, "log_dir": str(work / "logs")}
    settings: dict[str, Any] = {"backend": "nvml", "interval_s": 0.25, "runtime_dir": str(work / "run"),
                                "http": {"enabled": False}, "trainer": [trainer]}
    if args.dry_run:  # no GPU: an empty sysfs tree
        (work / "sys").mkdir()
        settings.update(backend="amdgpu", sysfs_root=str(work / "sys"))
    config = work / "gpuwatch.toml"
    config.write_text(tomli_w.dumps(settings))
    (out / "gpuwatch.toml").write_text(config.read_text())
    daemon = subprocess.Popen([sys.executable, "-m", "gpuwatch.cli", "run", "-c", str(config)],
                              stdout=open(out / "daemon.log", "wb"), stderr=subprocess.STDOUT, env=env,
                              start_new_session=True)
    return daemon, config, work / "run"


def pause_once(n: int, hold_s: float, control: Path, state_file: Path) -> dict[str, Any]:
    sent = time.monotonic()
    ok, reply = send_command(control, "pause", None)
    state = wait_for(lambda: (s := trainer_state(state_file)) and s["phase"] == "paused" and s, 30, f"pause {n}")
    acked = time.monotonic()
    time.sleep(hold_s)
    resume_sent = time.monotonic()
    send_command(control, "resume", None)
    wait_for(lambda: (s := trainer_state(state_file)) and s["phase"] == "running", 30, f"resume {n}")
    return {"n": n, "hold_s": round(hold_s, 2), "sent": sent, "acked": acked, "resume_sent": resume_sent,
            "ack_s": round(acked - sent, 2), "reply": reply,
            "ranks_held": f"{state.get('ranks_held')}/{state.get('ranks')}",
            "steps_total_at_ack": state.get("steps_total")}


def run_job(args: argparse.Namespace, out: Path, sampler: Sampler, idle_w: list[float], env: dict[str, str],
            deadline: float) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="gpuwatch-ddp-"))
    daemon, config, run_dir = start_daemon(args, work, out, env)
    state_file, control = run_dir / "state.json", run_dir / "control.sock"
    result: dict[str, Any] = {"pg_timeout_s": args.pg_timeout_s}
    pauses: list[dict[str, Any]] = []
    rng = random.Random(args.seed)
    try:
        wait_for(lambda: (s := trainer_state(state_file)) and (s.get("steps_total") or 0) >= 60, 180, "training")
        t0 = time.monotonic()
        time.sleep(3)
        train_w = [sampler.median_w(g, t0, time.monotonic()) or 0.0 for g in range(args.nproc)]
        result["train_power_w"] = train_w
        status = subprocess.run([sys.executable, "-m", "gpuwatch.cli", "status", "--color", "never", "-c", str(config)],
                                capture_output=True, text=True, env=env, timeout=30)
        (out / "status-training.txt").write_text(status.stdout + status.stderr)
        holds = [args.long_hold_x * args.pg_timeout_s] + [args.hold_s] * args.pauses
        for n, hold_s in enumerate(holds):
            if time.monotonic() + hold_s + args.gap_s[1] + 10 > deadline:
                result["stopped_early"] = f"the time budget ran out after {len(pauses)} holds"
                break
            time.sleep(rng.uniform(*args.gap_s))
            pauses.append(pause_once(n, hold_s, control, state_file))
            with open(out / "pauses.jsonl", "a") as sink:
                sink.write(json.dumps(pauses[-1]) + "\n")
        steps_now = (trainer_state(state_file) or {}).get("steps_total") or 0
        final = wait_for(
            lambda: (s := trainer_state(state_file)) and (s.get("steps_total") or 0) > steps_now + 20 and s,
            60, "steps after the last pause",
        )
        result["restarts_total"] = final.get("restarts_total")
        result["steps_total"] = final.get("steps_total")
    except TimeoutError as exc:
        result["error"] = f"timed out waiting for {exc}"
    finally:
        daemon.send_signal(signal.SIGTERM)
        try:
            daemon.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(daemon.pid, signal.SIGKILL)
        with open(out / "daemon.log", "a") as sink:
            for path in sorted((work / "logs").glob("*.log")):
                sink.write(f"\n===== {path.name} (last 80 lines) =====\n")
                sink.writelines(path.read_text(errors="replace").splitlines(keepends=True)[-80:])
    steps = read_steps(work / "steps", args.nproc)
    for rank, rows in enumerate(steps):
        (out / f"steps.rank{rank}.tsv").write_text("".join("\t".join(map(str, r)) + "\n" for r in rows))
    train_w = result.get("train_power_w") or [0.0] * args.nproc
    for pause in pauses:
        pause.update(judge_pause(pause, steps, sampler, idle_w, train_w, args.settle_s))
    result["pauses"] = pauses
    result["verdict"] = verdict(pauses, steps, args, result)
    write_timeline(out / "timeline.csv", sampler)
    return result


def verdict(pauses: list[dict[str, Any]], steps: list[list[tuple[int, float, float, float]]],
            args: argparse.Namespace, result: dict[str, Any]) -> dict[str, Any]:
    quiet = [g["quiet_after_ack_s"] for p in pauses for g in p["gpus"]]
    long_hold = pauses[0] if pauses else None
    losses_around = None
    if long_hold and steps and steps[0]:
        rows = steps[0]
        held = long_hold["held_steps"][0] or 0
        losses_around = {"before": [round(r[3], 4) for r in rows if held - 5 <= r[0] <= held],
                         "after": [round(r[3], 4) for r in rows if held < r[0] <= held + 5]}
    return {
        "holds": len(pauses), "coherent": sum(1 for p in pauses if p["coherent"]),
        "every_gpu_quiet_within_2s_of_ack": sum(1 for p in pauses if all(
            g["quiet_after_ack_s"] is not None and g["quiet_after_ack_s"] <= 2.0 for g in p["gpus"])),
        "quiet_after_ack_s_max": max((q for q in quiet if q is not None), default=None),
        "quiet_after_ack_s_median": statistics.median(q for q in quiet if q is not None) if any(
            q is not None for q in quiet) else None,
        "ack_s_median": statistics.median(p["ack_s"] for p in pauses) if pauses else None,
        "long_hold_s": long_hold["hold_s"] if long_hold else None,
        "long_hold_coherent": bool(long_hold and long_hold["coherent"]),
        "loss_around_long_hold_rank0": losses_around,
        "steps_continuous": all(r[0] == i + 1 for rows in steps for i, r in enumerate(rows)),
        "restarts_total": result.get("restarts_total"),
    }


def write_timeline(path: Path, sampler: Sampler) -> None:
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["t_s", *(f"gpu{g}_{k}" for g in range(len(sampler.samples)) for k in ("busy_pct", "power_w"))])
        start = sampler.samples[0][0][0] if sampler.samples[0] else 0.0
        for row in zip(*sampler.samples, strict=False):
            writer.writerow([round(row[0][0] - start, 2), *(v for s in row for v in (s[1], round(s[2], 1)))])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--nproc", type=int, default=2, help="ranks, one per GPU 0..N-1")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3, help="cost: blocks of each variant")
    parser.add_argument("--block", type=int, default=30, help="cost: steps per block")
    parser.add_argument("--cost-timeout-s", type=float, default=120)
    parser.add_argument("--pg-timeout-s", type=float, default=10.0, help="the job's NCCL timeout")
    parser.add_argument("--long-hold-x", type=float, default=2.0, help="the first hold, in NCCL timeouts")
    parser.add_argument("--pauses", type=int, default=50)
    parser.add_argument("--hold-s", type=float, default=3.0)
    parser.add_argument("--gap-s", type=float, nargs=2, default=(0.3, 1.7), metavar=("MIN", "MAX"))
    parser.add_argument("--settle-s", type=float, default=2.0, help="NVML must read quiet this long after the ack")
    parser.add_argument("--budget-s", type=float, default=360, help="stop pausing in time to report within this")
    parser.add_argument("--seed", type=int, default=23)
    parser.add_argument("--skip-cost", action="store_true")
    parser.add_argument("--dry-run", action="store_true", help="without a GPU: CPU/gloo, no NVML (checks the flow)")
    args = parser.parse_args()
    deadline = time.monotonic() + args.budget_s
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, **NO_MULTICAST, PYTHONUNBUFFERED="1",
               PYTHONPATH=f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    sampler = Sampler(args.nproc, args.dry_run)
    sampler.start()
    time.sleep(3)
    idle_w = [sampler.median_w(g, 0, time.monotonic()) or 0.0 for g in range(args.nproc)]
    summary: dict[str, Any] = {"gpus": sampler.names, "idle_power_w": idle_w, "python": sys.executable,
                               "args": {k: v for k, v in vars(args).items() if k != "out"}}
    print(json.dumps(summary), flush=True)
    if not args.skip_cost:
        try:
            run_cost(args, out, env)
        except subprocess.TimeoutExpired:
            summary["cost"] = "timed out"
    summary.update(run_job(args, out, sampler, idle_w, env, deadline))
    sampler.stop.set()
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    print(json.dumps(summary["verdict"], indent=1), flush=True)
    return 0 if summary.get("pauses") and "error" not in summary else 1


if __name__ == "__main__":
    raise SystemExit(main())
