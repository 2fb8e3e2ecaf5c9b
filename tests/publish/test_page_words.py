"""The live page's own words (gpuwatch/publish/page/index.html), run in node as the browser runs them: a GPU's
cap range says what is known of it, never "of n/a, floor n/a" (first contact, issue 50 item 15)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

PAGE = Path(__file__).resolve().parents[2] / "gpuwatch/publish/page/index.html"
NODE = shutil.which("node")


def _page_function(source: str, name: str) -> str:
    """One top-level definition of the page's script: from its line to the next top-level line."""
    match = re.search(rf"^(?:const {name} = .*?;|function {name}\(.*?^}})$", source, re.M | re.S)
    assert match, name
    return match.group(0)


@pytest.mark.skipif(NODE is None, reason="node is not installed")
@pytest.mark.parametrize(("power", "expected"), [
    ({"original_cap_w": 150.0, "floor_cap_w": 90.0}, "of 150 W, floor 90 W"),
    ({"original_cap_w": 150.0, "floor_cap_w": None}, "of 150 W"),
    ({"original_cap_w": None, "floor_cap_w": 90.0}, "floor 90 W"),
    ({"original_cap_w": None, "floor_cap_w": None}, ""),  # the review's "cap 150 W of n/a, floor n/a"
])
def test_a_cap_range_says_only_what_is_known(power: dict[str, Any], expected: str) -> None:
    source = PAGE.read_text()
    script = "\n".join(_page_function(source, name) for name in ("na", "fmt", "capRange"))
    script += f"\nprocess.stdout.write(JSON.stringify(capRange({json.dumps(power)})));"
    done = subprocess.run([str(NODE), "-e", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == expected
