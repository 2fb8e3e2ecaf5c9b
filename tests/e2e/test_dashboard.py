"""config/grafana-dashboard.json: in sync with its generator, and shaped to work unedited on many machines."""

from __future__ import annotations

import json
import subprocess
import sys

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
    assert {"datasource", "host", "instance", "gpu"} <= variables
    panels = [p for p in dashboard["panels"] if p["type"] != "row"]
    assert len({p["id"] for p in dashboard["panels"]}) == len(dashboard["panels"])
    for p in panels:
        assert p["datasource"]["uid"] == "${datasource}"
        for target in p["targets"]:
            assert '$instance' in target["expr"], (p["title"], target["expr"])
            if "gpu" in target["legendFormat"]:
                assert '$gpu' in target["expr"], (p["title"], target["expr"])


def test_host_narrows_the_machines_and_all_means_the_listed_ones() -> None:
    variables = {v["name"]: v for v in load()["templating"]["list"]}
    assert '$host' in variables["instance"]["definition"]
    # With an allValue ".*", "All" machines would ignore the chosen host; without one Grafana lists them.
    assert "allValue" not in variables["instance"]
    assert variables["host"]["allValue"] == ".*"  # matches machines without a host label too


def test_overview_table_has_one_row_per_gpu_of_every_machine() -> None:
    panel = next(p for p in load()["panels"] if p["title"] == "Every GPU of every machine")
    assert panel["type"] == "table" and panel["gridPos"]["w"] == 24
    for target in panel["targets"]:
        # every query keeps exactly the columns the merge joins on (plus label columns of its own)
        assert target["instant"] and target["format"] == "table"
        assert "by (host, instance, gpu" in target["expr"], target["expr"]
    merge, organize = panel["transformations"]
    assert merge["id"] == "merge" and organize["id"] == "organize"
    named = {t["legendFormat"] for t in panel["targets"] if t["legendFormat"]}
    assert set(organize["options"]["renameByName"].values()) == named
    assert {"up", "junction °C", "fan RPM", "power W", "alerts firing"} <= named
