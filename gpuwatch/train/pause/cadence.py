"""How often the ranks of a job agree on a pause (pure): about once a second of steps, cheaper if need be.

Every rank proposes a number of steps until the next agreement and the agreement's MAX of the
proposals is what every rank uses, so the cadence is one job-wide decision although each rank
measures its own step and agreement times. A time-based cadence could not work: clocks and step
times differ between ranks, and the ranks must agree at the same step.

The proposal covers ``interval_s`` of steps, raised while the measured agreement time would cost
more than ``budget_ratio`` of the steps between two agreements, but never beyond ``max_latency_s``
of steps (a pause must not wait longer than that). The agreement time a rank measures includes its
wait for the slowest rank, so it over-estimates the cost: the safe side. Measured on the 2-core dev
box (docs/training-patches.md): an agreement costs 0.2 ms bare and 2.5-6 ms inside CPU training
(waking the other processes' threads), hence the bound.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass

INTERVAL_ENV = "GPUWATCH_AGREE_INTERVAL_S"
LATENCY_ENV = "GPUWATCH_PAUSE_LATENCY_S"
POLL_ENV = "GPUWATCH_HOLD_POLL_S"


@dataclass(frozen=True)
class Cadence:
    interval_s: float = 1.0
    budget_ratio: float = 0.002
    max_latency_s: float = 5.0
    max_every: int = 1000
    hold_poll_s: float = 0.05  # how often a held rank looks at the store (release, acknowledgements)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Cadence:
        """Defaults, with ``GPUWATCH_AGREE_INTERVAL_S``, ``GPUWATCH_PAUSE_LATENCY_S`` (max_latency_s) and
        ``GPUWATCH_HOLD_POLL_S`` where set (tests, benchmarks)."""
        env = os.environ if environ is None else environ
        interval, latency, poll = (_positive(env.get(name)) for name in (INTERVAL_ENV, LATENCY_ENV, POLL_ENV))
        return cls(interval_s=interval or cls.interval_s, max_latency_s=latency or cls.max_latency_s,
                   hold_poll_s=poll or cls.hold_poll_s)


def steps_between(cadence: Cadence, step_s: float | None, agree_s: float | None) -> int:
    """This rank's proposal for the number of steps until the next agreement."""
    if step_s is None or step_s <= 0:
        return 1
    k = cadence.interval_s / step_s
    if agree_s is not None and cadence.budget_ratio > 0:
        k = max(k, min(agree_s / (cadence.budget_ratio * step_s), cadence.max_latency_s / step_s))
    return max(1, min(cadence.max_every, math.ceil(k)))


def ewma(previous: float | None, sample: float, weight: float = 0.2) -> float:
    return sample if previous is None else (1 - weight) * previous + weight * sample


def _positive(text: str | None) -> float | None:
    try:
        value = float(text) if text else None
    except ValueError:
        return None
    return value if value is not None and value > 0 else None
