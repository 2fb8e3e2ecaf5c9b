"""The hostile-user tests' working directory: pytest's tmp_path sits under root's 0700 /tmp/pytest-of-root, which
no other user can enter, so each test gets a fresh directory under /tmp that every user can traverse."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def tmp_path() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="gwlocal-", dir="/tmp"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
