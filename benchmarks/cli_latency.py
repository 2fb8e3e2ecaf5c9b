"""`gpuwatch --help`, `status`, `pause`, `resume` and `stop` from a normal install, side by side with ``python -c
pass`` (benchmarks/_startup.py says how), printing one table of their times and ratios.

The commands a user types: each a new process, against a running simulated daemon (8 cards, no HTTP) whose
config names no runtime_dir (systemd's RuntimeDirectory says where, as for the service), so `status` shows its
published document and `pause`/`resume`/`stop` make the round trip to its control socket (no run is named: the
daemon answers that there is nothing to act on, exit 2, after the same authorization and lookup). With
``--baseline DIR`` the same commands from another checkout's install, in the same rounds. With
``--fake-runtime-dir``, no daemon: its 8-GPU state file (state-8gpus.json) stamped afresh each round and a control
socket this script answers on, as a daemon with nothing to act on does: the commands' own work without gpuwatch's
dependencies installed (their fast paths import none). ``--checkout`` runs the checkout's package instead of
building an install.

The target (issue 52): each under 0.15 s on an idle machine and under 2x ``python -c pass`` side by side (p50 of
the wall time and of the CPU time; exit 1 when a ratio is missed). ``--cores N`` pins everything to N CPUs.

    python benchmarks/cli_latency.py [--runs 100] [--cores 2] [--fake-runtime-dir] [--checkout]
                                     [--baseline /path/to/checkout]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

from _startup import (
    REPO,
    fake_control,
    fake_state,
    finish,
    from_checkout,
    install,
    machine,
    pin,
    side_by_side,
    table,
    temp_dir,
)

TARGET_RATIO = 2.0
TARGET_S = 0.15
COMMANDS = (["--help"], ["status"], ["pause"], ["resume"], ["stop"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--cores", type=int, help="pin to the first N CPUs (default: all this process may use)")
    parser.add_argument("--checkout", action="store_true", help="run the checkout's package, no install")
    parser.add_argument("--baseline", type=Path, help="another checkout whose install runs side by side")
    parser.add_argument("--fake-runtime-dir", action="store_true",
                        help="no daemon: an 8-GPU state file stamped afresh each round, a control socket served here")
    args = parser.parse_args()
    where = pin(args.cores)
    work = temp_dir("cli")
    daemon = control = None
    try:
        runtime, config = work / "run", work / "gpuwatch.toml"
        config.write_text(f'interval_s = 1.0\nlog_level = "warning"\n[http]\nenabled = false\n'
                          f'[simulate]\nenabled = true\ngpus = 8\ntree_dir = "{work / "tree"}"\n')
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH" and not k.startswith("GPUWATCH_")}
        env.update(RUNTIME_DIRECTORY=str(runtime), COLUMNS="100")
        # A simulator publishes beside $RUNTIME_DIRECTORY (issue 50); the fake, as the system daemon, in it.
        published = runtime if args.fake_runtime_dir else runtime.with_name(runtime.name + "-simulate")
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
        refresh = None
        if args.fake_runtime_dir:
            fake_state(published)
            control = fake_control(published)
            refresh = lambda: fake_state(published)  # noqa: E731
        else:
            from _common import start_daemon, wait_state

            daemon = start_daemon(config, work / "daemon.log", env={"RUNTIME_DIRECTORY": str(runtime)})
            wait_state(published / "state.json", daemon)
        commands = {"python -c pass": [python, "-c", "pass"]}
        for label, program in programs.items():
            for words in COMMANDS:
                commands[f"{label}gpuwatch {' '.join(words)}"] = [*program, *words]
        seconds, cpu, codes = side_by_side(commands, env, args.runs, refresh)
        what = "fake runtime dir (8 GPUs)" if args.fake_runtime_dir else "simulated daemon, 8 GPUs"
        print(f"# {machine(where)}; {what}; {'checkout' if args.checkout else 'install'}; {args.runs} rounds; "
              f"target p50 < {TARGET_S * 1000:.0f} ms (idle machine) and <= {TARGET_RATIO}x python -c pass, "
              "wall and CPU")
        table(seconds, cpu, codes)
        missed = [name for name in seconds if not name.startswith(("python", "baseline"))
                  and any(statistics.median(kind[name]) > TARGET_RATIO * statistics.median(kind["python -c pass"])
                          for kind in (seconds, cpu))]
        print(f"p50 or CPU ratio above {TARGET_RATIO}x: {', '.join(missed) or 'none'}")
        return 1 if missed else 0
    finally:
        if control is not None:
            control.close()
        finish(daemon, work)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))
    sys.exit(main())
