"""Fixtures of the training-patch tests (torch is imported inside them: the tests skip without it)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture
def tuner(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """The process tuner timing CPU convolutions; the plans (and the choices kept on them) start empty."""
    from gpuwatch.train.conv2d import tune as conv_tune
    from gpuwatch.train.conv2d.plan import plan_for

    fresh = conv_tune.Tuner(devices=frozenset({"cpu"}))
    monkeypatch.setattr(conv_tune, "TUNER", fresh)
    monkeypatch.setattr("gpuwatch.train.conv2d.function.TUNER", fresh)
    plan_for.cache_clear()
    yield fresh
    plan_for.cache_clear()
