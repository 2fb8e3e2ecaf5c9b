"""Where things are in the repository."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TESTS = REPO / "tests"
# The real captures (format in their README.md, facts and quirks in SYSFS_FACTS.md).
FIXTURES = TESTS / "fixtures" / "amdgpu"
CARD_FILES = sorted(p for p in (FIXTURES / "cards").glob("*.json") if not p.name.endswith(".expected.json"))
