"""Rules that live in model.py, as tables."""

from __future__ import annotations

import pytest

from gpuwatch.model import at_crit


@pytest.mark.parametrize("temp_c, crit_c, expected", [
    (109.9, 110.0, False),
    (110.0, 110.0, True),  # at crit counts: the fan goes to full speed and the trainer stops
    (115.0, 110.0, True),
    (None, 110.0, False),  # unknown temperature: the failsafe rules handle it, not crit
    (120.0, None, False),  # a sensor without crit never is at it
])
def test_at_crit(temp_c: float | None, crit_c: float | None, expected: bool) -> None:
    assert at_crit(temp_c, crit_c) is expected
