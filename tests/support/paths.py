"""Where things are in the repository."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TESTS = REPO / "tests"
# The real captures (format in their README.md, facts and quirks in SYSFS_FACTS.md).
FIXTURES = TESTS / "fixtures" / "amdgpu"
CARD_FILES = sorted(p for p in (FIXTURES / "cards").glob("*.json") if not p.name.endswith(".expected.json"))


def copy_source(repo: Path, dest: Path) -> None:
    """The checkout's working tree (tracked and untracked-not-ignored files, uncommitted changes
    included): what a clone holds, never .venv, .git or build outputs."""
    listing = subprocess.run(["git", "-C", str(repo), "ls-files", "-z", "-co", "--exclude-standard"],
                             capture_output=True, check=True, timeout=60).stdout.decode()
    for rel in filter(None, listing.split("\0")):
        if (repo / rel).exists():  # not deleted in the working tree
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(repo / rel, dest / rel, follow_symlinks=False)
