"""Issue 26's targets hold with the real curve, governor and supervisor policy: the control-quality benchmark
(simulated time, deterministic for its seed, no timing) checks them and exits 1 when one is missed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCHMARK = Path(__file__).resolve().parents[2] / "benchmarks/control_quality.py"


def test_the_ladder_meets_the_targets_of_the_issue() -> None:
    done = subprocess.run([sys.executable, str(BENCHMARK)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    targets = done.stdout.split("targets (the ladder):\n")[1].splitlines()
    assert len(targets) == 3 and all(line.startswith("met") for line in targets), targets
