"""`gpuwatch health` end to end, as Slurm's HealthCheckProgram and node-problem-detector run it: the console script
of a normal (non-editable) install, a new process each time, against a running daemon on a real-layout fake tree.

Each round runs one after the other, so the machine's noise hits all alike: the install's own interpreter doing
nothing (``python -c pass``); the check with a config that names no ``runtime_dir`` (the daemon's default, as the
systemd unit's /run/gpuwatch: the config is not parsed); the check with a config that names it (the Kubernetes
ConfigMap's form: tomllib's import on every check); with ``--baseline DIR`` the same two from another checkout's
install (a change measured side by side in one run). What a check adds to Python's own start is gpuwatch's part,
given as the median of each round's difference, and the ratio of the medians.

The install: a wheel built from a copy of the checkout (``pip wheel --no-build-isolation``: this environment's
setuptools, no network), in a venv of its own (``venv --without-pip``), its dependencies seen through a ``.pth``
line naming this environment's site-packages (only ``--cold``'s direct read imports them). Not the development
venv's editable install: its import finder loads pathlib and importlib.util into every start, which is not what
users run, and hides those imports from the check's share.

The budget (docs/cluster.md): p99 under 50 ms on two cores with the daemon up, far inside NPD's 10-15 s timeout and
Slurm's 60 s kill; a direct read without a daemon (``--cold``, fewer runs: about a second each) under 2 s.

    .venv/bin/python benchmarks/health_latency.py [--runs 200] [--gpus 8] [--cold] [--baseline /path/to/checkout]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

from _common import (
    REPO,
    build_tree,
    cleanup,
    fixtures_arg,
    machine,
    median,
    percentile,
    start_daemon,
    stop,
    temp_dir,
    wait_state,
)

from tests.support.paths import copy_source


def install(src: Path, work: Path, name: str) -> Path:
    """A normal install of checkout ``src`` in a venv of its own; its ``bin`` directory."""
    source, wheels, venv = work / f"{name}-src", work / f"{name}-wheel", work / f"{name}-venv"
    source.mkdir()
    copy_source(src, source)  # pip builds in the tree (build/, *.egg-info): never in a checkout in use
    python = venv / "bin" / "python"
    step([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(wheels),
          str(source)])
    step([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    step([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps", "--no-index",
          *map(str, wheels.glob("*.whl"))])
    own = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                         capture_output=True, text=True, check=True, timeout=60).stdout.strip()
    Path(own, "gpuwatch-deps.pth").write_text(sysconfig.get_path("purelib") + "\n")
    return venv / "bin"


def step(argv: list[str]) -> None:
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, timeout=600)


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, int]:
    started = time.perf_counter()
    done = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False, env=env)
    return time.perf_counter() - started, done.returncode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--cold", action="store_true", help="no daemon: the direct read's time instead")
    parser.add_argument("--baseline", type=Path, help="another checkout whose install runs side by side")
    fixtures_arg(parser)
    args = parser.parse_args()
    work = temp_dir("health")
    daemon = None
    try:
        sysfs, runtime = work / "sys", work / "run"
        build_tree(sysfs, args.fixtures, "navi21-rx6900xt-sapphire-nitro", args.gpus, telemetry=True)
        # The static tree's fans never turn: the daemon's verdict would be G007 (fan stalled) after a few ticks.
        body = f'sysfs_root = "{sysfs}"\ninterval_s = 1.0\nbackend = "amdgpu"\nlog_level = "warning"\n' \
               '[http]\nenabled = false\n[health]\nfan_stalled = false\n'
        plain, named = work / "gpuwatch.toml", work / "named.toml"
        plain.write_text(body)
        named.write_text(f'runtime_dir = "{runtime}"\n{body}')
        # The check's environment: no PYTHONPATH (the installed package, not a checkout); the runtime directory
        # where a daemon started without runtime_dir publishes (systemd's RuntimeDirectory, as for the service).
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH" and not k.startswith("GPUWATCH_")}
        env["RUNTIME_DIRECTORY"] = str(runtime)
        sources = [("this", REPO)] + ([("baseline", args.baseline.resolve())] if args.baseline else [])
        bins = {label: install(src, work, label) for label, src in sources}
        if not args.cold:
            daemon = start_daemon(plain, work / "daemon.log", env={"RUNTIME_DIRECTORY": str(runtime)})
            wait_state(runtime / "state.json", daemon)
        commands = {"python -c pass": [str(bins["this"] / "python"), "-c", "pass"]}
        for label in bins:
            health = [str(bins[label] / "gpuwatch"), "health", "--format", "npd", "-c"]
            prefix = "gpuwatch health" if label == "this" else "baseline health"
            commands[prefix] = [*health, str(plain)]
            commands[f"{prefix} (runtime_dir)"] = [*health, str(named)]
        for argv in commands.values():
            timed(argv, env)  # the page cache warm for all
        seconds: dict[str, list[float]] = {name: [] for name in commands}
        codes: dict[str, set[int]] = {name: set() for name in commands}
        for _ in range(args.runs):
            for name, argv in commands.items():
                took, code = timed(argv, env)
                seconds[name].append(took)
                codes[name].add(code)
        print(f"# {machine()}; {args.gpus} GPUs, {'no daemon (direct read)' if args.cold else 'daemon up'}, "
              f"{args.runs} rounds")
        python = seconds["python -c pass"]
        for name, values in seconds.items():
            own = "" if values is python else \
                f"  own p50 {statistics.median(a - b for a, b in zip(values, python, strict=True)) * 1000:6.1f} ms" \
                f"  x{median(values) / median(python):4.2f}"
            print(f"{name:30} p50 {median(values) * 1000:7.1f} ms  p99 {percentile(values, 99) * 1000:7.1f} ms  "
                  f"max {max(values) * 1000:7.1f} ms{own}  exit {'/'.join(map(str, sorted(codes[name])))}")
    finally:
        if daemon is not None:
            stop(daemon)
        cleanup(work)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))
    main()
