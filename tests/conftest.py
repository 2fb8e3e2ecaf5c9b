"""Shared fixtures; the helpers behind them are in tests/support."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuwatch.sim.tree import FakeSysfsTree


@pytest.fixture
def fake_sysfs(tmp_path: Path) -> FakeSysfsTree:
    """An empty real-topology tree; add cards with ``add_capture(capture(name))`` (tests.support.trees)."""
    return FakeSysfsTree(tmp_path / "sys")
