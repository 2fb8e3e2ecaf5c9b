"""config/grafana-dashboard.json: in sync with its generator, and shaped to work unedited on many machines."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.support.paths import REPO

DASHBOARD = REPO / "config" / "grafana-dashboard.json"


def load() -> dict:
    return json.loads(DASHBOARD.read_text())


def test_in_sync_with_generator() -> None:
    done = subprocess.run([sys.executable, str(REPO / "scripts" / "make-dashboard.py"), "--check"], timeout=30)
    assert done.returncode == 0, "config/grafana-dashboard.json differs: run python3 scripts/make-dashboard.py"


def test_panels_use_the_datasource_and_instance_variables() -> None:
    dashboard = load()
    variables = {v["name"] for v in dashboard["templating"]["list"]}
    assert {"datasource", "instance", "gpu"} <= variables
    panels = [p for p in dashboard["panels"] if p["type"] != "row"]
    assert len({p["id"] for p in dashboard["panels"]}) == len(dashboard["panels"])
    for p in panels:
        assert p["datasource"]["uid"] == "${datasource}"
        for target in p["targets"]:
            assert '$instance' in target["expr"], (p["title"], target["expr"])
            if "gpu" in target["legendFormat"]:
                assert '$gpu' in target["expr"], (p["title"], target["expr"])
