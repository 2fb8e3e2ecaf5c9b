"""`gpuwatch --help`, `status`, `pause`, `resume` and `stop` from a normal install, side by side with ``python -c
pass`` (benchmarks/_startup.py says how), printing one table of their times and ratios.

The commands a user types: each a new process, against a running simulated daemon (8 cards, no HTTP) whose
config names no runtime_dir (systemd's RuntimeDirectory says where, as for the service), so `status` shows its
published document and `pause`/`resume`/`stop` make the round trip to its control socket (no run is named: the
daemon answers that there is nothing to act on, exit 2, after the same authorization and lookup). With
``--baseline DIR`` the same commands from another checkout's install, in the same rounds.

The target (issue 52): each under 0.15 s on an idle machine and under 2x ``python -c pass`` side by side (p50;
exit 1 when a ratio is missed). ``--cores N`` pins everything to N CPUs.

    python benchmarks/cli_latency.py [--runs 100] [--cores 2] [--checkout] [--baseline /path/to/checkout]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

from _startup import REPO, from_checkout, install, machine, pin, side_by_side, table

TARGET_RATIO = 2.0
TARGET_S = 0.15
COMMANDS = (["--help"], ["status"], ["pause"], ["resume"], ["stop"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--cores", type=int, help="pin to the first N CPUs (default: all this process may use)")
    parser.add_argument("--checkout", action="store_true", help="run the checkout's package, no install")
    parser.add_argument("--baseline", type=Path, help="another checkout whose install runs side by side")
    args = parser.parse_args()
    where = pin(args.cores)
    from _common import start_daemon, stop, wait_state

    work = Path(tempfile.mkdtemp(prefix="gpuwatch-bench-cli-",
                                 dir="/dev/shm" if os.access("/dev/shm", os.W_OK) else None))
    daemon = None
    try:
        runtime, config = work / "run", work / "gpuwatch.toml"
        config.write_text(f'interval_s = 1.0\nlog_level = "warning"\n[http]\nenabled = false\n'
                          f'[simulate]\nenabled = true\ngpus = 8\ntree_dir = "{work / "tree"}"\n')
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH" and not k.startswith("GPUWATCH_")}
        env.update(RUNTIME_DIRECTORY=str(runtime), COLUMNS="100")
        if args.checkout:
            if args.baseline:
                parser.error("--baseline runs an install of each checkout: not with --checkout")
            prefix, extra = from_checkout(REPO)
            env.update(extra)
            programs = {"": prefix}
            python = sys.executable
        else:
            sources = [("", REPO)] + ([("baseline ", args.baseline.resolve())] if args.baseline else [])
            programs = {label: install(src, work, label.strip() or "this") for label, src in sources}
            python = str(Path(programs[""][0]).with_name("python"))
        daemon = start_daemon(config, work / "daemon.log", env={"RUNTIME_DIRECTORY": str(runtime)})
        wait_state(runtime / "state.json", daemon)
        commands = {"python -c pass": [python, "-c", "pass"]}
        for label, program in programs.items():
            for words in COMMANDS:
                commands[f"{label}gpuwatch {' '.join(words)}"] = [*program, *words]
        seconds, cpu, codes = side_by_side(commands, env, args.runs)
        print(f"# {machine(where)}; simulated daemon, 8 GPUs; {'checkout' if args.checkout else 'install'}; "
              f"{args.runs} rounds; target p50 < {TARGET_S * 1000:.0f} ms (idle machine) and <= {TARGET_RATIO}x "
              "python -c pass")
        table(seconds, cpu, codes)
        base = statistics.median(seconds["python -c pass"])
        missed = [name for name, values in seconds.items() if not name.startswith(("python", "baseline"))
                  and statistics.median(values) > TARGET_RATIO * base]
        print(f"p50 ratio above {TARGET_RATIO}x: {', '.join(missed) or 'none'}")
        return 1 if missed else 0
    finally:
        if daemon is not None:
            stop(daemon)
        import shutil

        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))
    sys.exit(main())
