"""The hand-off of a round of per-GPU calls (``deadline.Workers.run_all``): this checkout's against a baseline
checkout's, in one process, on the same calls, interleaved.

Two kinds of round, each of 8 calls (one per GPU): trivial calls (the hand-off alone) and the daemon's real
``read_card`` on an 8-GPU fake tree (the tick's reads). Per kind and build: CPU of the whole process
(``getrusage(RUSAGE_SELF)``: every thread's, user + system) per round, and voluntary and involuntary context
switches per round. The builds alternate in blocks, so load from other processes hits both alike.

    .venv/bin/python benchmarks/round_handoff.py --baseline /work/main [--rounds 2000] [--blocks 4]
"""

from __future__ import annotations

import argparse
import importlib.util
import resource
import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path
from types import ModuleType
from typing import Any

from _common import REPO, build_tree, cleanup, fixtures_arg, machine, median, temp_dir

from gpuwatch.gpus.amdgpu import discover, read_card
from gpuwatch.gpus.telemetry import GpuMetricsReader
from gpuwatch.sysfs import Sysfs

DEADLINE_S = 1.0  # the default sysfs_deadline_s


def load_deadline(checkout: Path, name: str) -> ModuleType:
    """A checkout's ``gpuwatch/deadline.py`` under its own module name (it imports the standard library only)."""
    spec = importlib.util.spec_from_file_location(name, checkout / "gpuwatch" / "deadline.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def measure(workers: Any, calls: dict[str, Callable[[], object]], rounds: int) -> tuple[float, float, float]:
    """CPU ms, voluntary and involuntary context switches, each per round."""
    before = resource.getrusage(resource.RUSAGE_SELF)
    for _ in range(rounds):
        workers.run_all(calls, DEADLINE_S)
    after = resource.getrusage(resource.RUSAGE_SELF)
    cpu_s = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return (cpu_s * 1000 / rounds, (after.ru_nvcsw - before.ru_nvcsw) / rounds,
            (after.ru_nivcsw - before.ru_nivcsw) / rounds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline", type=Path, required=True, help="a checkout to compare with (e.g. /work/main)")
    parser.add_argument("--rounds", type=int, default=2000, help="rounds per block")
    parser.add_argument("--blocks", type=int, default=4, help="alternating blocks per build and kind")
    fixtures_arg(parser)
    args = parser.parse_args()
    builds = {"this": load_deadline(REPO, "deadline_this"), "baseline": load_deadline(args.baseline, "deadline_base")}
    root = temp_dir("handoff")
    try:
        build_tree(root / "sys", args.fixtures, args.capture, 8, telemetry=True)
        sysfs = Sysfs(root / "sys")
        cards = discover(sysfs).cards
        assert len(cards) == 8, cards
        metrics = GpuMetricsReader()
        statics: dict[str, dict[str, str | None]] = {card.gpu_id: {} for card in cards}
        kinds: dict[str, dict[str, Callable[[], object]]] = {
            "8 trivial calls": {card.gpu_id: (lambda: None) for card in cards},
            "8 read_card": {card.gpu_id: partial(read_card, sysfs, card, statics[card.gpu_id], metrics)
                            for card in cards},
        }
        samples: dict[tuple[str, str], list[tuple[float, float, float]]] = {}
        for kind, calls in kinds.items():
            workers = {build: module.Workers(f"bench-{build}") for build, module in builds.items()}
            for build in builds:  # warm: threads started, the cards' fixed attributes remembered
                workers[build].run_all(calls, DEADLINE_S)
            for _ in range(args.blocks):
                for build in builds:
                    samples.setdefault((kind, build), []).append(measure(workers[build], calls, args.rounds))
        print(f"{machine()}; {args.rounds} rounds x {args.blocks} blocks per row, medians of the blocks")
        print(f"{'round':>16} {'build':>9} {'CPU ms/round':>13} {'vol. cs/round':>14} {'invol. cs/round':>16}")
        for kind in kinds:
            cpu_ms = {}
            for build in builds:
                rows = samples[(kind, build)]
                cpu_ms[build] = median([r[0] for r in rows])
                print(f"{kind:>16} {build:>9} {cpu_ms[build]:13.3f} {median([r[1] for r in rows]):14.1f} "
                      f"{median([r[2] for r in rows]):16.1f}")
            ratio = cpu_ms["this"] / cpu_ms["baseline"]
            print(f"{kind:>16}  CPU per round this/baseline = {ratio:.2f}")
    finally:
        cleanup(root)


if __name__ == "__main__":
    main()
