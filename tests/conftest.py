"""Shared fixtures; the helpers behind them are in tests/support."""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuwatch.sim.tree import FakeSysfsTree


def pytest_configure(config: pytest.Config) -> None:
    # The conv2d fallback's compiled host code (gpuwatch/train/conv2d/host.py) is built once per machine
    # into the pytest cache rather than the user's ~/.cache; child processes (launcher tests) inherit it.
    # `-p no:cacheprovider` leaves no `config.cache` attribute at all (not None): then torch's default applies.
    # The suite runs as from the project's activated venv (`make test`): `gpuwatch train -- python ...` takes the
    # `python` of PATH, the caller's shell's (issue 50), which must be this interpreter, with torch.
    os.environ["PATH"] = os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", os.defpath)
    cache = getattr(config, "cache", None)
    if cache is not None:
        os.environ.setdefault("TORCH_EXTENSIONS_DIR", str(cache.mkdir("torch-extensions")))


@pytest.fixture
def fake_sysfs(tmp_path: Path) -> FakeSysfsTree:
    """An empty real-topology tree; add cards with ``add_capture(capture(name))`` (tests.support.trees)."""
    return FakeSysfsTree(tmp_path / "sys")


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A directory under /tmp for unix sockets: a sockaddr_un path holds at most 107 bytes, and pytest's
    tmp_path can be longer. Private (0700), as mkdtemp makes it; a test that lets another user in widens it."""
    with tempfile.TemporaryDirectory(prefix="gw-", dir="/tmp") as name:
        yield Path(name)
