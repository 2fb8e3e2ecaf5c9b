"""The suite under pytest's own options: tests/conftest.py must not depend on a plugin being loaded."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_suite_collects_without_the_cache_plugin() -> None:
    """`-p no:cacheprovider` (a read-only checkout) leaves pytest's config without a ``cache`` attribute at
    all; conftest's pytest_configure once read ``config.cache`` and crashed pytest before any test ran."""
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--collect-only", "-q",
                           "tests/test_deadline.py"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "INTERNALERROR" not in done.stdout + done.stderr and "test_deadline.py::" in done.stdout
