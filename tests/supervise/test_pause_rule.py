"""The one pause rule of configured trainers and attached runs (``machine.hot_pause``, ``machine.may_resume``), as
tables; tests/supervise/test_policy_transitions.py and test_attached.py check each caller through it."""

from __future__ import annotations

import pytest

from gpuwatch.supervise.actions import Command, Thermal
from gpuwatch.supervise.machine import hot_pause, may_resume

HOT = Thermal(hot=True, cool=False, reason="hot: g0 junction 96°C >= 95°C")
GOVERNED = Thermal(hot=True, cool=False, reason="hot (governed)", governed_backstop_s=60.0)
CRIT = Thermal(hot=True, cool=False, critical=True, reason="emergency: g0 fan failsafe")
WARM = Thermal(hot=False, cool=False)  # below the limit, above limit - hysteresis
COOL = Thermal()


@pytest.mark.parametrize(("hot_since", "thermal", "now", "expected"), [
    (None, COOL, 10.0, (None, None)),
    (5.0, COOL, 10.0, (None, None)),  # cooled: the hot spell is over
    (None, HOT, 10.0, (10.0, None)),  # starts now
    (5.0, HOT, 14.0, (5.0, None)),  # hot 9 s of debounce_s 10
    (5.0, HOT, 15.0, (5.0, HOT.reason)),  # hot debounce_s: due
    (5.0, GOVERNED, 15.0, (5.0, None)),  # the governor still holds it: its backstop first
    (5.0, GOVERNED, 65.0, (5.0, GOVERNED.reason)),
    (None, CRIT, 10.0, (None, CRIT.reason)),  # at once
    (None, Thermal(hot=True, cool=False), 10.0, (10.0, None)),
    (0.0, Thermal(hot=True, cool=False), 10.0, (0.0, "hot")),  # no reason given
])
def test_hot_pause(hot_since: float | None, thermal: Thermal, now: float,
                   expected: tuple[float | None, str | None]) -> None:
    assert hot_pause(hot_since, thermal, now, debounce_s=10.0) == expected


@pytest.mark.parametrize(("command", "thermal", "manual", "held_s", "expected"), [
    (None, COOL, False, 30.0, True),
    (None, COOL, False, 29.0, False),  # not min_pause_s yet
    (None, WARM, False, 300.0, False),  # within the hysteresis
    (None, HOT, False, 300.0, False),
    (None, Thermal(critical=True), False, 300.0, False),  # a fan failsafe with cool sensors
    (None, COOL, True, 300.0, False),  # a manual pause ends by hand only
    ("resume", HOT, True, 0.0, True),
    ("pause", COOL, False, 300.0, True),
])
def test_may_resume(command: Command | None, thermal: Thermal, manual: bool, held_s: float, expected: bool) -> None:
    assert may_resume(command, thermal, manual, held_s, min_pause_s=30.0) is expected
