"""How often a job's ranks agree on a pause (pure)."""

from __future__ import annotations

import pytest

from gpuwatch.train.pause.cadence import Cadence, ewma, steps_between

DEFAULT = Cadence()


@pytest.mark.parametrize("step_s, agree_s, expect", [
    (None, None, 1),  # no step time yet: agree at the next step
    (0.030, None, 34),  # about a second of 30 ms GPU steps
    (0.030, 0.0002, 34),  # a 0.2 ms agreement is within 0.2 % of 34 steps
    (0.030, 0.004, 67),  # a 4 ms agreement (a busy host): k raised until it costs 0.2 %
    (0.030, 0.1, 167),  # ...but never more than 5 s of steps before a pause holds
    (0.150, 0.004, 14),  # CPU steps: about a second
    (2.0, 0.004, 1),  # steps longer than the interval: every step
    (0.0001, None, 1000),  # capped
])
def test_steps_between(step_s: float | None, agree_s: float | None, expect: int) -> None:
    assert steps_between(DEFAULT, step_s, agree_s) == expect


def test_cost_bound_off_and_the_environment() -> None:
    assert steps_between(Cadence(budget_ratio=0.0), 0.030, 0.1) == 34
    env = {"GPUWATCH_AGREE_INTERVAL_S": "0.05", "GPUWATCH_PAUSE_LATENCY_S": "0.1", "GPUWATCH_HOLD_POLL_S": "bad"}
    assert Cadence.from_env(env) == Cadence(interval_s=0.05, max_latency_s=0.1)
    assert Cadence.from_env({}) == DEFAULT
    assert ewma(None, 2.0) == 2.0 and ewma(1.0, 2.0) == pytest.approx(1.2)
