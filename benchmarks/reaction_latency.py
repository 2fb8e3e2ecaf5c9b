"""Reaction latency: from a temperature file crossing a limit to the daemon acting on it.

* crit -> fan 100 %: the junction temperature file of a pwm1 card (RDNA2 capture) is set to its
  crit at t0; the fake tree's ``pwm1`` is polled every ms until it reads pwm1_max.
* pause limit -> trainer stopped: a supervised trainer (a real child process) runs under the
  daemon; the junction is set above the pause limit at t0; the trainer's process state is polled
  until it is stopped ('T') or the pause file is written. Needs the supervisor ([[trainer]]).

t0 is placed at a random phase of the tick, so latencies spread over one tick; the target is one
tick + 50 ms for every trial. Between trials the temperature goes back down and the daemon is
given time to recover (fan back to the curve, trainer resumed).

    .venv/bin/python benchmarks/reaction_latency.py [--trials 10] [--interval-s 1] [--only fan|trainer]
"""

from __future__ import annotations

import argparse
import json
import os
import pwd
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psutil
from _common import (
    build_tree,
    cleanup,
    fixtures_arg,
    free_port,
    machine,
    median,
    percentile,
    start_daemon,
    stop,
    temp_dir,
    wait_state,
    write_config,
)

FAN_CAPTURE = "navi21-rx6900xt-sapphire-nitro"  # pwm1 backend, junction crit 110 °C
SLACK_S = 0.050
COOL_MC = 59000


def poll_until(check: Callable[[], bool], timeout_s: float, step_s: float = 0.001) -> float | None:
    """Monotonic time at which ``check()`` first held, or None after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return time.monotonic()
        time.sleep(step_s)
    return None


def read_int(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def fan_trials(args: argparse.Namespace, work: Path) -> list[float]:
    root = work / "fan"
    (hwmon,) = build_tree(root / "sys", args.fixtures, FAN_CAPTURE, 1)
    (root / "run").mkdir()
    extra = (
        f'[http]\nlisten = "127.0.0.1"\nport = {free_port()}\n'
        "[fan]\nspindown_delay_s = 0\ndead_band_c = 0\n"
    )
    config = write_config(root / "gpuwatch.toml", root / "sys", root / "run", extra, args.interval_s)
    temp = root / "sys" / hwmon / "temp2_input"
    pwm = root / "sys" / hwmon / "pwm1"
    pwm_max = read_int(root / "sys" / hwmon / "pwm1_max") or 255
    crit_mc = read_int(root / "sys" / hwmon / "temp2_crit") or 110000
    temp.write_text(f"{COOL_MC}\n")
    daemon = start_daemon(config, root / "daemon.log")
    latencies = []
    try:
        wait_state(root / "run" / "state.json", daemon)
        if poll_until(lambda: (read_int(pwm) or 0) not in (0, pwm_max), 10 * args.interval_s) is None:
            raise RuntimeError(f"the fan controller never took the fan (pwm1 = {read_int(pwm)}); see {root}/daemon.log")
        for _ in range(args.trials):
            time.sleep(random.uniform(0, args.interval_s))
            t0 = time.monotonic()
            temp.write_text(f"{crit_mc}\n")
            hit = poll_until(lambda: read_int(pwm) == pwm_max, args.interval_s * 5)
            latencies.append(float("inf") if hit is None else hit - t0)
            temp.write_text(f"{COOL_MC}\n")
            if poll_until(lambda: (read_int(pwm) or pwm_max) < pwm_max, args.interval_s * 5) is None:
                raise RuntimeError("fan did not come down after cooling; check spindown settings")
    finally:
        stop(daemon)
    return latencies


TRAINER = "import time\nwhile True:\n    time.sleep(0.05)\n"


def trainer_trials(args: argparse.Namespace, work: Path) -> list[float]:
    """SIGSTOP pause (cooperative_pause = never, debounce 0): the reaction the supervisor owns."""
    root = work / "trainer"
    (hwmon,) = build_tree(root / "sys", args.fixtures, FAN_CAPTURE, 1)
    (root / "run").mkdir()
    pause_c = 90.0
    extra = (
        f'[http]\nlisten = "127.0.0.1"\nport = {free_port()}\n'
        '[fan]\nmode = "monitor-only"\n'
        "[[trainer]]\n"
        'name = "bench"\n'
        f"command = {json.dumps([sys.executable, '-c', TRAINER])}\n"
        f"junction_limit_c = {pause_c}\nhysteresis_c = 5\ndebounce_s = 0\n"
        'cooperative_pause = "never"\ngrace_s = 2\n'
        # A root daemon insists on an explicit user; the benchmark's trainer runs as whoever runs it.
        f'user = "{pwd.getpwuid(os.geteuid()).pw_name}"\n'
    )
    config = write_config(root / "gpuwatch.toml", root / "sys", root / "run", extra, args.interval_s)
    temp = root / "sys" / hwmon / "temp2_input"
    temp.write_text(f"{COOL_MC}\n")
    daemon = start_daemon(config, root / "daemon.log")
    latencies = []
    try:
        wait_state(root / "run" / "state.json", daemon)
        trainer = _trainer_process(daemon.pid, 10 * args.interval_s, root / "daemon.log")
        for _ in range(args.trials):
            time.sleep(random.uniform(0, args.interval_s))
            t0 = time.monotonic()
            temp.write_text(f"{int((pause_c + 1) * 1000)}\n")
            hit = poll_until(lambda: trainer.status() == psutil.STATUS_STOPPED, args.interval_s * 5)
            latencies.append(float("inf") if hit is None else hit - t0)
            temp.write_text(f"{COOL_MC}\n")
            if poll_until(lambda: trainer.status() != psutil.STATUS_STOPPED, args.interval_s * 10) is None:
                raise RuntimeError(f"trainer not resumed after cooling; see {root}/daemon.log")
    finally:
        stop(daemon, timeout_s=15)
    return latencies


def _trainer_process(daemon_pid: int, timeout_s: float, log_path: Path) -> psutil.Process:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for child in psutil.Process(daemon_pid).children(recursive=True):
            try:
                if TRAINER in " ".join(child.cmdline()) or "while True" in " ".join(child.cmdline()):
                    return child
            except psutil.Error:
                continue
        time.sleep(0.05)
    raise RuntimeError(f"the daemon started no trainer; see {log_path}")


def report(name: str, latencies: list[float], interval_s: float) -> bool:
    target = interval_s + SLACK_S
    ok = all(lat <= target for lat in latencies)
    print(
        f"{name:<22} {len(latencies):>6} {median(latencies) * 1e3:>8.1f} {percentile(latencies, 99) * 1e3:>8.1f} "
        f"{max(latencies) * 1e3:>8.1f} {target * 1e3:>9.0f} {max(latencies) / target:>11.2f}"
    )
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--interval-s", type=float, default=1.0)
    parser.add_argument("--only", choices=("fan", "trainer"))
    fixtures_arg(parser)
    args = parser.parse_args()
    work = temp_dir("reaction")
    results: dict[str, list[float]] = {}
    missing: list[str] = []
    try:
        for name, run in (("crit -> fan 100%", fan_trials), ("pause limit -> stopped", trainer_trials)):
            if args.only and not name.startswith({"fan": "crit", "trainer": "pause"}[args.only]):
                continue
            try:
                results[name] = run(args, work)
            except (RuntimeError, TimeoutError) as exc:
                missing.append(f"{name}: not measured ({exc})")
        print(f"machine: {machine()}")
        print(f"tick {args.interval_s} s; t0 at a random phase of the tick; "
              f"target = one tick + {SLACK_S * 1e3:.0f} ms\n")
        print(f"{'reaction':<22} {'trials':>6} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} "
              f"{'target ms':>9} {'max/target':>11}")
        ok = all([report(name, lat, args.interval_s) for name, lat in results.items()])
        for line in missing:
            print(line)
        return 0 if ok and not missing else 1
    finally:
        cleanup(work)


if __name__ == "__main__":
    sys.exit(main())
