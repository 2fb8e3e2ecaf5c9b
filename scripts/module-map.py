#!/usr/bin/env python3
"""The package map, read from the code: each module of gpuwatch with the first sentence of its docstring.

docs/architecture.md keeps the packages and the rules; each module says its one job in its own docstring
(tests/test_repo.py checks that every module has one), and this prints them by package, so the map is never
stale: ``python scripts/module-map.py [PACKAGE]`` (e.g. ``power``).
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "gpuwatch"


def first_sentence(path: Path) -> str:
    """The docstring's first paragraph on one line ("" when there is none)."""
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    return " ".join(doc.split("\n\n", 1)[0].split())


def main(argv: list[str]) -> int:
    under = PACKAGE / argv[0] if argv else PACKAGE
    if not under.is_dir():
        print(f"module-map: no package {argv[0]!r} in gpuwatch", file=sys.stderr)
        return 2
    for path in sorted(under.rglob("*.py")):
        if "__pycache__" not in path.parts:
            print(f"{path.relative_to(PACKAGE).as_posix()}: {first_sentence(path)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
