"""End-to-end run on a real NVIDIA GPU: the daemon (NVML backend) supervises a training run and pauses it.

What it does, and what it proves (docs/nvidia.md shows a recorded run):
1. reads the idle core temperature through gpuwatch itself (`gpuwatch sensors --json`, backend nvml);
2. writes a config whose pause line is idle + ``--margin-c`` (thermal.edge_limit_c; NVIDIA's core
   temperature is published as "edge", see gpuwatch/gpus/nvml.py) with one ``[[trainer]]``;
3. runs `gpuwatch run`, samples `gpuwatch status --json` every second and /metrics every few seconds;
4. stops once the trainer was paused and resumed (or at ``--duration-s``), SIGTERMs the daemon;
5. writes timeline.csv, timeline.md, status/metrics captures and summary.json (the checks) to ``--out``.

Exit code 0 when every check passed: paused at/above the limit, temperature and power lower at the
end of the pause than at its start, resumed below the limit, real values in /metrics and status.
Standard library only, plus the installed gpuwatch: run it with the Python that has gpuwatch and torch.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import pwd
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import tomli_w

REPO = Path(__file__).resolve().parent.parent
PAUSED = {"pausing", "paused"}


def main() -> int:
    args = parse_args()
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    # Only what docs need goes to --out (the device tool returns at most 8 files); the rest to --work.
    work = Path(args.work or tempfile.mkdtemp(prefix="gpuwatch-e2e-")).resolve()
    work.mkdir(parents=True, exist_ok=True)
    base = work / "probe.toml"
    base.write_text(tomli_w.dumps({"backend": "nvml", "runtime_dir": str(work / "probe")}))
    idle = idle_reading(base, args.gpu_index)
    gpu_id, idle_c = idle["gpu_id"], idle["temperatures"]["edge"]["temp_c"]
    limit_c = float(round(idle_c + args.margin_c))
    print(f"GPU {gpu_id} {idle['name']}: idle {idle_c:.0f}°C {idle['power_w']:.0f} W -> pause limit {limit_c:.0f}°C",
          flush=True)

    port = free_port()
    config = work / "gpuwatch.toml"
    trainer_cmd = args.trainer_cmd or (plain_trainer(args.steps) if args.plain else default_trainer(args.steps))
    settings: dict[str, Any] = {
        "backend": "nvml",
        "interval_s": 1.0,
        "runtime_dir": str(work / "runtime"),
        "thermal": {"edge_limit_c": limit_c, "hysteresis_c": args.hysteresis_c},
        "http": {"enabled": True, "listen": "127.0.0.1", "port": port},
        "trainer": [{
            "name": "yolov8n",
            "command": trainer_cmd,
            "cwd": str(REPO),
            "gpus": [gpu_id],
            "debounce_s": args.debounce_s,
            "max_pause_s": float(args.duration_s),
            "log_dir": str(work / "logs"),
            "hang_timeout_s": 600.0,
            # a root daemon runs a trainer as root only when asked (docs/supervisor.md)
            "user": pwd.getpwuid(os.geteuid()).pw_name,
        }],
    }
    if os.geteuid() == 0:  # a root daemon starts a trainer as root only when told so (docs/supervisor.md)
        settings["trainer"][0]["user"] = "root"
    if args.no_trainer:  # monitoring only: NVML backend, /metrics and status on the real GPU
        del settings["trainer"]
    config.write_text(tomli_w.dumps(settings))
    print("config:\n" + config.read_text(), flush=True)
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    with open(out / "daemon.log", "wb") as log:
        daemon = subprocess.Popen([sys.executable, "-m", "gpuwatch.cli", "run", "-c", str(config)], stdout=log,
                                  stderr=subprocess.STDOUT, env=env, start_new_session=True)
    rows: list[dict[str, Any]] = []
    try:
        rows = watch(args, config, port, gpu_id, out, work, daemon)
    finally:
        daemon.send_signal(signal.SIGTERM)
        try:
            rc = daemon.wait(timeout=90)
        except subprocess.TimeoutExpired:
            os.killpg(daemon.pid, signal.SIGKILL)
            rc = daemon.wait()
        print(f"daemon exited with {rc}", flush=True)
        append_trainer_logs(work / "logs", out / "daemon.log")
        if (work / "metrics-last.txt").exists():
            append(out / "metrics.txt", (work / "metrics-last.txt").read_text())
    summary = judge(rows, limit_c, args.hysteresis_c, gpu_id, out, trainer=not args.no_trainer)
    summary.update(gpu_id=gpu_id, gpu_name=idle["name"], idle_c=idle_c, idle_power_w=idle["power_w"],
                   limit_c=limit_c, daemon_exit=rc, trainer_command=trainer_cmd)
    write_outputs(rows, summary, out)
    print(json.dumps(summary, indent=2), flush=True)
    return 0 if summary["passed"] else 1


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="e2e-nvidia-out", help="folder for logs, timeline and summary")
    p.add_argument("--work", help="folder for config, runtime dir and trainer logs (default: a temp dir)")
    p.add_argument("--gpu-index", type=int, default=0, help="which NVIDIA GPU (NVML index) to watch")
    p.add_argument("--margin-c", type=float, default=4.0, help="pause limit = idle temperature + this")
    p.add_argument("--hysteresis-c", type=float, default=1.5, help="resume below limit - this")
    p.add_argument("--debounce-s", type=float, default=1.0, help="time over the limit before pausing")
    p.add_argument("--duration-s", type=float, default=300.0, help="give up after this long")
    p.add_argument("--after-resume-s", type=float, default=30.0, help="keep watching this long after a resume")
    p.add_argument("--steps", type=int, default=1_000_000, help="training steps (the run is stopped long before)")
    p.add_argument("--plain", action="store_true", help="a plain PyTorch loop instead of the launcher + YOLOv8n")
    p.add_argument("--no-trainer", action="store_true", help="no [[trainer]]: check monitoring only")
    p.add_argument("--trainer-cmd", nargs=argparse.REMAINDER, help="training command (default: YOLOv8n benchmark)")
    return p.parse_args()


def default_trainer(steps: int) -> list[str]:
    """The YOLOv8n-shaped benchmark under the launcher, conv2d fallback on."""
    return [sys.executable, "-m", "gpuwatch.launch", "--conv2d-fallback", "on",
            str(REPO / "benchmarks/e2e_yolov8n_train.py"), "--steps", str(steps)]


def plain_trainer(steps: int) -> list[str]:
    return [sys.executable, str(REPO / "benchmarks/e2e_plain_trainer.py"), "--steps", str(steps)]


def gpuwatch_json(command: str, config: Path) -> dict[str, Any] | None:
    done = subprocess.run([sys.executable, "-m", "gpuwatch.cli", command, "--json", "-c", str(config)],
                          capture_output=True, text=True, timeout=30)
    try:
        return json.loads(done.stdout)
    except json.JSONDecodeError:
        print(f"gpuwatch {command} --json failed ({done.returncode}): {done.stderr.strip()}", flush=True)
        return None


def gpuwatch_text(config: Path) -> str:
    done = subprocess.run([sys.executable, "-m", "gpuwatch.cli", "status", "--color", "never", "-c", str(config)],
                          capture_output=True, text=True, timeout=30)
    return f"$ gpuwatch status   (exit {done.returncode})\n{done.stdout}{done.stderr}"


def idle_reading(config: Path, index: int) -> dict[str, Any]:
    doc = None
    for _ in range(3):  # a few readings: the first after NVML init can be from before the GPU settled
        doc = gpuwatch_json("sensors", config)
        time.sleep(1)
    if not doc or not doc["gpus"]:
        raise SystemExit("no NVIDIA GPU visible through gpuwatch's NVML backend")
    nvml = [g for g in doc["gpus"] if g["backend"] == "nvml"]
    return nvml[index]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def fetch_metrics(port: int) -> str | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            return response.read().decode()
    except OSError as exc:
        return f"# /metrics unavailable: {exc}\n"


def watch(args: argparse.Namespace, config: Path, port: int, gpu_id: str, out: Path, work: Path,
          daemon: subprocess.Popen[bytes]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    start = time.monotonic()
    resumed_at: float | None = None
    captured: set[str] = set()
    last_metrics = -1e9
    while time.monotonic() - start < args.duration_s:
        if daemon.poll() is not None:
            print(f"daemon exited early ({daemon.returncode}); see daemon.log", flush=True)
            break
        doc = gpuwatch_json("status", config)
        now = time.monotonic() - start
        row = row_from(doc, gpu_id, now) if doc and doc.get("daemon") else None
        if row:
            rows.append(row)
            print(" ".join(f"{k}={v}" for k, v in row.items()), flush=True)
            phase = row["phase"]
            if phase == "running" and "running" not in captured and (row["temp_c"] or 0) > 0:
                captured.add("running")
                (out / "status-running.txt").write_text(gpuwatch_text(config))
            if phase in PAUSED and "paused" not in captured:
                captured.add("paused")
                (out / "status-paused.txt").write_text(gpuwatch_text(config))
                append(out / "metrics.txt", f"# /metrics while paused, t={now:.0f}s\n" + (fetch_metrics(port) or ""))
            if phase == "running" and any(r["phase"] in PAUSED for r in rows) and resumed_at is None:
                resumed_at = now
            if resumed_at is not None and now - resumed_at >= args.after_resume_s:
                break
        if now - last_metrics >= 5:
            last_metrics = now
            text = fetch_metrics(port)
            if text:
                (work / "metrics-last.txt").write_text(f"# /metrics, last sample, t={now:.0f}s\n" + text)
        time.sleep(max(0.0, 1.0 - (time.monotonic() - start - now)))
    return rows


def row_from(doc: dict[str, Any], gpu_id: str, t_s: float) -> dict[str, Any] | None:
    gpu = next((g for g in doc["gpus"] if g["gpu_id"] == gpu_id), None)
    if gpu is None:
        return None
    trainer = doc["trainers"][0] if doc.get("trainers") else {}
    edge = gpu["temperatures"].get("edge", {})
    return {
        "t_s": round(t_s, 1),
        "temp_c": edge.get("temp_c"),
        "mem_temp_c": gpu["temperatures"].get("mem", {}).get("temp_c"),
        "power_w": None if gpu.get("power_w") is None else round(gpu["power_w"], 1),
        "gpu_busy_pct": None if gpu.get("gpu_busy_ratio") is None else round(gpu["gpu_busy_ratio"] * 100),
        "sclk_mhz": None if gpu.get("sclk_hz") is None else round(gpu["sclk_hz"] / 1e6),
        "phase": trainer.get("phase"),
        "pauses": trainer.get("pauses_total"),
        "resumes": trainer.get("resumes_total"),
        "steps": trainer.get("steps_total"),
        "reason": trainer.get("reason"),
    }


def judge(rows: list[dict[str, Any]], limit_c: float, hysteresis_c: float, gpu_id: str, out: Path,
          trainer: bool = True) -> dict[str, Any]:
    """The checks the run must pass, each with the numbers behind it."""
    checks: dict[str, Any] = {}
    first_pause = next((i for i, r in enumerate(rows) if r["phase"] in PAUSED), None)
    if trainer:
        checks["paused"] = first_pause is not None
    if first_pause is not None:
        resume = next((i for i in range(first_pause, len(rows)) if rows[i]["phase"] == "running"), None)
        paused_rows = rows[first_pause: resume if resume is not None else len(rows)]
        before = [r for r in rows[:first_pause] if r["phase"] == "running"]
        peak = max((r["temp_c"] or 0) for r in rows[max(0, first_pause - 3): first_pause + 3])
        checks["pause_at"] = {"t_s": rows[first_pause]["t_s"], "temp_c_peak": peak, "limit_c": limit_c,
                              "over_limit": peak >= limit_c}
        end = paused_rows[-1]
        checks["temp_fell_while_paused"] = {"from_c": peak, "to_c": end["temp_c"], "ok": (end["temp_c"] or 0) < peak}
        busy_power = max((r["power_w"] or 0) for r in before[-5:]) if before else None
        checks["power_fell_while_paused"] = {"running_w": busy_power, "paused_end_w": end["power_w"],
                                             "ok": busy_power is not None and (end["power_w"] or 0) < busy_power}
        checks["resumed"] = resume is not None
        if resume is not None:
            last_paused = rows[resume - 1]
            checks["resume_at"] = {"t_s": rows[resume]["t_s"], "temp_c": last_paused["temp_c"],
                                   "resume_line_c": limit_c - hysteresis_c,
                                   "below_limit": (last_paused["temp_c"] or 999) < limit_c}
    metrics = (out / "metrics.txt").read_text() if (out / "metrics.txt").exists() else ""
    samples = [line for line in metrics.splitlines() if line.startswith("gpuwatch_") and f'"{gpu_id}"' in line]
    checks["metrics_have_values"] = {"lines": samples[:12], "ok": bool(samples)}
    checks["status_has_values"] = any(r["temp_c"] and r["power_w"] for r in rows)
    passed = all(
        v if isinstance(v, bool) else v.get("ok", v.get("over_limit", v.get("below_limit", True)))
        for v in checks.values()
    )
    return {"passed": passed, "checks": checks, "rows": len(rows)}


def append(path: Path, text: str) -> None:
    with open(path, "a") as handle:
        handle.write(text + "\n")


def append_trainer_logs(logs: Path, target: Path) -> None:
    """The trainer's own output, last 200 lines per file, after the daemon's log."""
    for log in sorted(logs.glob("*")) if logs.is_dir() else []:
        if log.is_file():
            tail = log.read_text(errors="replace").splitlines()[-200:]
            append(target, f"\n===== trainer log {log.name} (last {len(tail)} lines) =====\n" + "\n".join(tail))


def write_outputs(rows: list[dict[str, Any]], summary: dict[str, Any], out: Path) -> None:
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    if not rows:
        return
    with open(out / "timeline.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    # The markdown table keeps phase changes and every 5th second, so it stays readable in docs.
    keep = [r for i, r in enumerate(rows)
            if i == 0 or r["phase"] != rows[i - 1]["phase"] or i % 5 == 0 or i == len(rows) - 1]
    cols = ["t_s", "temp_c", "mem_temp_c", "power_w", "gpu_busy_pct", "sclk_mhz", "phase", "pauses", "resumes", "steps"]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join("" if r[c] is None else str(r[c]) for c in cols) + " |" for r in keep]
    (out / "timeline.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    sys.exit(main())
