"""The job-wide pause on a real NVIDIA GPU with NCCL: its cost per step, and what NVML reads while held.

One call on a GPU machine (docs/nvidia.md, "A DDP job on NCCL"); results go to ``--out``:

1. ``agree.json``: ``benchmarks/ddp_pause_agreement.py`` under torchrun (NCCL, the YOLOv8n-shaped model
   under DDP on the GPU): what gpuwatch's step hooks add to a step, as a ratio of the step time.
2. ``summary.json``, ``timeline.csv``: ``gpuwatch run`` with the NVML backend supervises
   ``gpuwatch train -- torchrun --nproc-per-node N benchmarks/ddp_yolov8n_train.py`` (NCCL, process-group
   timeout ``--pg-timeout-s``); the script pauses and resumes it over the daemon's control socket, one
   hold ``--long-hold-x`` times that timeout, while a thread samples NVML every 0.1 s. Per pause: the
   time to the acknowledgement (every rank held), the time until NVML reads the GPU ~0 % busy at
   near-idle power, and whether the job went on stepping afterwards (a hold beyond the NCCL timeout
   must not kill it: nothing is in flight).

    python benchmarks/ddp_nvidia.py --out OUT [--nproc 1]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import pwd
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


class FakeNvml(threading.Thread):
    """``--dry-run`` on a machine without a GPU: the same flow, readings all zero."""

    def __init__(self, period_s: float = 0.1) -> None:
        super().__init__(daemon=True)
        self.name = "none (dry run)"
        self.period_s = period_s
        self.samples: list[tuple[float, int, float]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            self.samples.append((time.monotonic(), 0, 0.0))
            self.stop.wait(self.period_s)

    def window(self, start: float, end: float) -> list[tuple[float, int, float]]:
        return [s for s in self.samples if start <= s[0] <= end]


class Nvml(threading.Thread):
    """NVML busy % and board power of one GPU every ``period_s``."""

    def __init__(self, index: int, period_s: float = 0.1) -> None:
        super().__init__(daemon=True)
        import pynvml

        pynvml.nvmlInit()
        self.nvml = pynvml
        self.handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        self.name = str(pynvml.nvmlDeviceGetName(self.handle))
        self.period_s = period_s
        self.samples: list[tuple[float, int, float]] = []  # (monotonic, busy %, watts)
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            busy = self.nvml.nvmlDeviceGetUtilizationRates(self.handle).gpu
            watts = self.nvml.nvmlDeviceGetPowerUsage(self.handle) / 1000.0
            self.samples.append((time.monotonic(), int(busy), float(watts)))
            self.stop.wait(self.period_s)

    def window(self, start: float, end: float) -> list[tuple[float, int, float]]:
        return [s for s in self.samples if start <= s[0] <= end]


def median_power(samples: list[tuple[float, int, float]]) -> float | None:
    return statistics.median(s[2] for s in samples) if samples else None


def torchrun() -> list[str]:
    """This interpreter's torchrun (its console script, else the module)."""
    script = Path(sys.executable).parent / "torchrun"
    return [str(script)] if script.exists() else [sys.executable, "-m", "torch.distributed.run"]


def run_cost(args: argparse.Namespace, out: Path) -> None:
    cmd = [*torchrun(), "--nproc-per-node", str(args.nproc),
           "--master-port", str(free_port()), str(REPO / "benchmarks/ddp_pause_agreement.py"), "--device", "cuda",
           "--batch", str(args.batch), "--size", "640", "--rounds", str(args.rounds), "--block", str(args.block),
           "--warmup", "5", "--micro", "500", "--json", str(out / "agree.json")]
    if args.dry_run:
        cmd[cmd.index("cuda")] = "cpu"
        cmd[cmd.index("640")] = "64"
    print("$", " ".join(cmd), flush=True)
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=args.cost_timeout_s)
    (out / "agree.log").write_text(done.stdout + done.stderr[-4000:])
    print(done.stdout, done.stderr[-2000:] if done.returncode else "", flush=True)


def trainer_state(state_file: Path) -> dict[str, Any] | None:
    try:
        doc = json.loads(state_file.read_text())
        return doc["trainers"][0]
    except (OSError, ValueError, KeyError, IndexError):
        return None


def wait_for(check: Any, timeout_s: float, what: str) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.05)
    raise TimeoutError(what)


def run_pauses(args: argparse.Namespace, out: Path, nvml: Nvml | FakeNvml, idle_w: float) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="gpuwatch-ddp-"))
    command = [sys.executable, "-m", "gpuwatch.cli", "train", "--conv2d-fallback", "off", "--", *torchrun(),
               "--nproc-per-node", str(args.nproc), "--master-port", str(free_port()),
               str(REPO / "benchmarks/ddp_yolov8n_train.py"), "--pg-timeout-s", str(args.pg_timeout_s)]
    if args.dry_run:
        command += ["--cpu", "--batch", "2", "--image-size", "64"]
    trainer: dict[str, Any] = {"name": "ddp", "command": command, "cwd": str(REPO / "benchmarks"),
                               "user": "root" if os.geteuid() == 0 else pwd.getpwuid(os.geteuid()).pw_name,
                               "pause_ack_timeout_s": 30.0, "hang_timeout_s": 600.0, "log_dir": str(work / "logs")}
    config = work / "gpuwatch.toml"
    settings: dict[str, Any] = {"backend": "nvml", "interval_s": 0.25, "runtime_dir": str(work / "run"),
                                "http": {"enabled": False}, "trainer": [trainer]}
    if args.dry_run:  # no GPU: an empty sysfs tree
        (work / "sys").mkdir()
        settings.update(backend="amdgpu", sysfs_root=str(work / "sys"))
    config.write_text(tomli_w.dumps(settings))
    state_file, control = work / "run" / "state.json", work / "run" / "control.sock"
    env = dict(os.environ, PYTHONUNBUFFERED="1", PYTHONPATH=f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    log = open(out / "daemon.log", "wb")
    daemon = subprocess.Popen([sys.executable, "-m", "gpuwatch.cli", "run", "-c", str(config)], stdout=log,
                              stderr=subprocess.STDOUT, env=env, start_new_session=True)
    timeline: list[dict[str, Any]] = []
    pauses: list[dict[str, Any]] = []
    stop = threading.Event()

    def follow() -> None:
        while not stop.is_set():
            state = trainer_state(state_file)
            if state:
                timeline.append({"t": time.monotonic(), "phase": state["phase"], "steps": state.get("steps_total"),
                                 "ranks": state.get("ranks"), "ranks_held": state.get("ranks_held")})
            stop.wait(0.1)

    follower = threading.Thread(target=follow, daemon=True)
    follower.start()
    result: dict[str, Any] = {"command": command, "pg_timeout_s": args.pg_timeout_s}
    try:
        wait_for(lambda: (s := trainer_state(state_file)) and (s.get("steps_total") or 0) >= 60, 150, "training")
        t0 = time.monotonic()
        time.sleep(3)
        train_w = median_power(nvml.window(t0, time.monotonic()))
        result["train_power_w"] = train_w
        holds = [args.hold_s, args.long_hold_x * args.pg_timeout_s, args.hold_s]
        for n, hold_s in enumerate(holds, 1):
            sent = time.monotonic()
            ok, message = send_command(control, "pause", None)
            state = wait_for(lambda: (s := trainer_state(state_file)) and s["phase"] == "paused" and s, 30, f"pause {n}")
            acked = time.monotonic()
            if n == 1:
                status = subprocess.run([sys.executable, "-m", "gpuwatch.cli", "status", "--color", "never", "-c",
                                         str(config)], capture_output=True, text=True, env=env, timeout=30)
                (out / "status-paused.txt").write_text(status.stdout + status.stderr)
            time.sleep(hold_s)
            end = time.monotonic()
            held = trainer_state(state_file) or {}
            send_command(control, "resume", None)
            steps_at = state.get("steps_total") or 0
            resumed = wait_for(lambda: (s := trainer_state(state_file)) and (s.get("steps_total") or 0) > steps_at + 20
                               and s, 90, f"steps after pause {n}")
            threshold = idle_w + 0.25 * ((train_w or idle_w) - idle_w)
            quiet = [s for s in nvml.window(acked, end) if s[1] <= 1 and s[2] <= threshold]
            during = nvml.window(acked + 2.0, end)
            pauses.append({
                "hold_s": hold_s, "ack_s": round(acked - sent, 2),
                "idle_within_s_of_ack": None if not quiet else round(quiet[0][0] - acked, 2),
                "busy_pct_median_during": statistics.median(s[1] for s in during) if during else None,
                "power_w_median_during": median_power(during), "near_idle_threshold_w": round(threshold, 1),
                "ranks_held": f"{state.get('ranks_held')}/{state.get('ranks')}",
                "steps_at_ack": steps_at, "steps_at_end_of_hold": held.get("steps_total"),
                "phase_at_end_of_hold": held.get("phase"), "stepped_on_after": resumed.get("steps_total"),
                "restarts_total": resumed.get("restarts_total"), "reply": message,
            })
            print(json.dumps(pauses[-1]), flush=True)
            time.sleep(args.run_between_s)
    except TimeoutError as exc:
        result["error"] = f"timed out waiting for {exc}"
    finally:
        stop.set()
        daemon.send_signal(signal.SIGTERM)
        try:
            daemon.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(daemon.pid, signal.SIGKILL)
        log.close()
        for path in sorted((work / "logs").glob("*.log")):
            with open(out / "daemon.log", "a") as sink:
                sink.write(f"\n===== {path.name} (last 60 lines) =====\n")
                sink.writelines(path.read_text(errors="replace").splitlines(keepends=True)[-60:])
    result["pauses"] = pauses
    with open(out / "timeline.csv", "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["t_s", "busy_pct", "power_w", "phase", "steps_total", "ranks_held"])
        start = nvml.samples[0][0] if nvml.samples else 0.0
        for t, busy, watts in nvml.samples:
            row = next((r for r in reversed(timeline) if r["t"] <= t), None)
            writer.writerow([round(t - start, 2), busy, round(watts, 1), row and row["phase"], row and row["steps"],
                             row and row["ranks_held"]])
    return result


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--nproc", type=int, default=1)
    parser.add_argument("--gpu-index", type=int, default=0)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--block", type=int, default=40)
    parser.add_argument("--cost-timeout-s", type=float, default=120)
    parser.add_argument("--pg-timeout-s", type=float, default=10.0)
    parser.add_argument("--hold-s", type=float, default=6.0)
    parser.add_argument("--long-hold-x", type=float, default=2.0)
    parser.add_argument("--run-between-s", type=float, default=4.0)
    parser.add_argument("--skip-cost", action="store_true")
    parser.add_argument("--dry-run", action="store_true", help="without a GPU: CPU/gloo, no NVML (checks the flow)")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    nvml: Nvml | FakeNvml = FakeNvml() if args.dry_run else Nvml(args.gpu_index)
    nvml.start()
    time.sleep(3)
    idle_w = median_power(nvml.samples) or 0.0
    summary: dict[str, Any] = {"gpu": nvml.name, "idle_power_w": idle_w, "python": sys.executable}
    print(json.dumps(summary), flush=True)
    if not args.skip_cost:
        try:
            run_cost(args, out)
        except subprocess.TimeoutExpired:
            summary["cost"] = "timed out"
    summary.update(run_pauses(args, out, nvml, idle_w))
    nvml.stop.set()
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    print(json.dumps(summary, indent=1), flush=True)
    return 0 if summary.get("pauses") and "error" not in summary else 1


if __name__ == "__main__":
    raise SystemExit(main())
