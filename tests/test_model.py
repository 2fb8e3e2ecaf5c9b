"""Rules that live in model.py, as tables."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import pytest

from gpuwatch.model import GpuReading, ReadError, TempReading, at_crit, replaced


@pytest.mark.parametrize("temp_c, crit_c, expected", [
    (109.9, 110.0, False),
    (110.0, 110.0, True),  # at crit counts: the fan goes to full speed and the trainer stops
    (115.0, 110.0, True),
    (None, 110.0, False),  # unknown temperature: the failsafe rules handle it, not crit
    (120.0, None, False),  # a sensor without crit never is at it
])
def test_at_crit(temp_c: float | None, crit_c: float | None, expected: bool) -> None:
    assert at_crit(temp_c, crit_c) is expected


@dataclass(frozen=True)
class _Checked:
    value: int

    def __post_init__(self) -> None:
        if self.value < 0:
            raise ValueError("negative")


def test_replaced_is_dataclasses_replace() -> None:
    """``model.replaced``: the fields copied, the changes set, equal to what replace gives; a class with a
    ``__post_init__`` still goes through it (its check runs), and a name that is no field is replace's TypeError."""
    from gpuwatch.fan.curve import CurveState
    from gpuwatch.power.governor import GovernorState

    reading = GpuReading("0000:03:00.0", "card0", "amdgpu", power_w=100.0, temps=(TempReading("edge", 50.0),))
    for instance, changes in ((reading, {"power_w": None, "errors": (ReadError("x", "EIO"),)}),
                              (CurveState(), {"bad_ticks": 2, "last_temp_c": 71.0}),
                              (GovernorState(), {"last_now": 5.0})):
        got = replaced(instance, **changes)
        assert got == dataclasses.replace(instance, **changes) and type(got) is type(instance)
        assert got != instance and replaced(instance) == instance  # the original untouched
    with pytest.raises(ValueError, match="negative"):
        replaced(_Checked(1), value=-1)
    with pytest.raises(TypeError):
        replaced(reading, no_such_field=1)
