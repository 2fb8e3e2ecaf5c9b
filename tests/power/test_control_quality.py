"""Issue 26's, 36's and 49's targets hold with the real curve, governor, clock law and supervisor policy: the
control-quality benchmark (simulated time, deterministic for its seed, no timing) checks them and exits 1 when one
is missed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARK = Path(__file__).resolve().parents[2] / "benchmarks/control_quality.py"


@pytest.mark.timeout(600)  # 36 closed-loop runs of 2 simulated hours: about a minute alone, minutes on a loaded box
def test_the_ladder_meets_the_targets_of_the_issue() -> None:
    done = subprocess.run([sys.executable, str(BENCHMARK), "--jobs", "2"], capture_output=True, text=True,
                          timeout=590)
    assert done.returncode == 0, done.stdout + done.stderr
    targets = done.stdout.split("targets (the ladder):\n")[1].splitlines()
    assert len(targets) == 3 and all(line.startswith("met") for line in targets), targets
    # Issue 49: the true junction at most 1 °C over the limit after the first minute in every scenario (the stalled
    # fan, the hot start and the power-limited card included), no pause where a ceiling can hold (the comparison
    # with the best constant clock is --best-clock's: minutes of runs, its table is in docs/power.md).
    law = done.stdout.split("targets (the clock rung as the kernel behaves, issue 49):\n")[1].split("\n\n")[0]
    lines = law.splitlines()
    assert len(lines) == 8 and all(line.startswith("met") for line in lines), lines
    assert any("N31 fan stalled" in line for line in lines) and any("N31 hot start" in line for line in lines)
