"""The governor's choices hold wherever the truth lies between a cube-root and a linear speed/power law (issue 38).

How much step rate a power cap costs is measured to lie between (P/P_demand)^(1/3) and linear
(docs/power.md). The closed-loop benchmark's hot case and stuck fan run under each exponent: the
ladder (fan -> cap -> pause) decides exactly alike (its inputs are temperatures and power, never the
throughput model), never pauses, and keeps at least what pause-only keeps under every exponent.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCHMARK = Path(__file__).resolve().parents[2] / "benchmarks/control_quality.py"


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("control_quality", BENCHMARK)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["control_quality"] = module
    spec.loader.exec_module(module)
    return module


def test_the_ladder_decides_alike_and_beats_pausing_for_exponents_one_third_to_one(bench: ModuleType) -> None:
    from gpuwatch.config.file import Config
    from gpuwatch.sim.physics import ThermalParams

    found = bench.sensitivity(Config(), ThermalParams(), hours=1.0, tick_s=1.0, seed=1)
    assert {x for _, x, _ in found} == {1 / 3, 1 / 2, 2 / 3, 1.0}
    for name in bench.SENSITIVE:
        ladders = [found[(name, x, True)] for x in bench.EXPONENTS]
        assert len({bench.decisions(r) for r in ladders}) == 1, name  # the throughput model changes nothing
        assert all(r.pauses == 0 for r in ladders), name
        kept = [r.kept_percent for r in ladders]
        assert kept == sorted(kept, reverse=True), kept  # a steeper law keeps less, never more
        for x in bench.EXPONENTS:
            assert found[(name, x, True)].kept_percent >= found[(name, x, False)].kept_percent, (name, x)
    assert all(line.startswith("met") for line in bench.check_robust(found))


def test_capping_never_keeps_less_than_pausing_to_the_same_average_power() -> None:
    # Why the ladder's order holds for every exponent up to 1: holding a power P_s steadily keeps
    # (P_s/P_d)^x of the speed; pausing to the same average power runs at full speed a share P_s/P_d
    # of the time. For 0 < x <= 1, (P_s/P_d)^x >= P_s/P_d.
    from dataclasses import replace

    from gpuwatch.sim.physics import ThermalParams, speed_ratio

    for exponent in (1 / 3, 1 / 2, 2 / 3, 1.0):
        params = replace(ThermalParams(), speed_exponent=exponent)
        for cap_w in (90.0, 108.0, 126.0, 140.0):
            assert speed_ratio(params, 1.0, cap_w) >= cap_w / params.load_power_w - 1e-12
