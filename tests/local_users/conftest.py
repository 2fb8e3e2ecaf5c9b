"""What the hostile-user tests share: a working directory every user can traverse (pytest's tmp_path sits under
root's 0700 /tmp/pytest-of-root, which no other user can enter), the root-only target a planted link aims at, and
the real processes a test starts."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.processes import Processes


@pytest.fixture
def tmp_path() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="gwlocal-", dir="/tmp"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def root_only(tmp_path: Path) -> Path:
    """A root-only directory holding a root-only file ``shadow``: what a link a user plants would aim at."""
    secret = tmp_path / "root-only"
    secret.mkdir(mode=0o700)
    (secret / "shadow").write_text("root's\n")
    os.chmod(secret / "shadow", 0o600)
    return secret


@pytest.fixture
def processes(tmp_path: Path) -> Iterator[Processes]:
    with Processes(tmp_path / "logs") as started:
        yield started
