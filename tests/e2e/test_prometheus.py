"""End to end: `gpuwatch run` on a fake two-GPU tree, scraped by a real Prometheus, every PromQL checked.

Every expression of config/grafana-dashboard.json and config/alerts.yml goes through Prometheus' HTTP
API: each must be valid, and each dashboard panel must return data. The run has the fan controller
and a stand-in trainer reporting steps, so every panel is required; should a component be missing
from the run (read from the daemon's /status), the panels about it are excused:
"Fan mode" and "Fan controller events" need a fan controller publishing state; "Trainer phase" and
"Restarts, pauses, resumes" need a supervised trainer; "Training speed" and "Seconds since last
step, epoch" need a trainer that reports steps. Loopback only, bounded waits, both processes stopped.
"""

from __future__ import annotations

import json
import os
import pwd
import re
import shutil
import sys
from pathlib import Path
from typing import Any, Iterator

import pytest

from tests.support.paths import REPO
from tests.support.processes import Processes, get_json, wait_up
from tests.support.published import GPU_B, two_gpu_tree
from tests.support.stack import daemon_config, missing, query, start_gpuwatch, start_prometheus, targets_up

CONDITIONAL_PANELS = {
    "Fan mode": "fan controller",
    "Fan controller events": "fan controller",
    "Trainer phase": "trainer",
    "Restarts, pauses, resumes": "trainer",
    "Training speed": "trainer steps",
    "Seconds since last step, epoch": "trainer steps",
}
# A stand-in training run: reports a step every 0.1 s through the heartbeat protocol, ends by itself.
TRAINER = (
    "import os, time\n"
    "from gpuwatch.heartbeat import Heartbeat, write_heartbeat\n"
    "path = os.environ['GPUWATCH_HEARTBEAT_FILE']\n"
    "start = time.time()\n"
    "for step in range(1, 600):\n"
    "    now = time.time()\n"
    "    write_heartbeat(path, Heartbeat(pid=os.getpid(), steps_total=step, last_step_unix=now,\n"
    "                                    steps_per_s=step / (now - start + 1e-9), updated_unix=now, epoch=step // 50))\n"
    "    time.sleep(0.1)\n"
)
GRAFANA_VARIABLES = {"$__rate_interval": "1m", "$__interval": "15s", "$__range": "5m", "$instance": ".+", "$gpu": ".+"}

pytestmark = [
    pytest.mark.prometheus,
    pytest.mark.timeout(180),  # three bounded waits on a loaded machine, plus shutdown
    pytest.mark.skipif(bool(missing("prometheus")), reason=missing("prometheus")),
]


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[tuple[str, str]]:
    """gpuwatch on a fake two-GPU tree and Prometheus scraping it: (the daemon's address, Prometheus' URL)."""
    tree = two_gpu_tree(tmp_path / "sys")
    # Garbage in one sensor file so the read-error series (and their panel) exist, as on a flaky card.
    next((tree.root / "devices").rglob(f"{GPU_B}/hwmon/hwmon*/freq1_input")).write_text("garbage\n")
    config = tmp_path / "gpuwatch.toml"
    config.write_text(f'sysfs_root = "{tree.root}"\n' + daemon_config(tmp_path / "run", (
        f'[[trainer]]\nname = "e2e"\ncommand = {json.dumps([sys.executable, "-c", TRAINER])}\ngrace_s = 5.0\n'
        # a root daemon runs a trainer as root only when asked (docs/supervisor.md)
        f'user = "{pwd.getpwuid(os.geteuid()).pw_name}"\n'), interval_s=0.2))
    with Processes(tmp_path / "logs") as processes:
        daemon, instance = start_gpuwatch(processes, "gpuwatch", config)
        shutil.copy(REPO / "config" / "alerts.yml", tmp_path / "alerts.yml")
        prometheus, base = start_prometheus(processes, tmp_path, (
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
            "rule_files: [alerts.yml]\n"
            f"scrape_configs:\n  - job_name: gpuwatch\n    static_configs:\n      - targets: ['{instance}']\n"))
        wait_up("prometheus to scrape gpuwatch", lambda: targets_up(base) == {instance}, prometheus)
        # Enough scrapes for increase()/rate() over the dashboard's windows to have two points.
        wait_up("three scrapes", lambda: query(base, "count_over_time(gpuwatch_ticks_total[1m]) >= 3"), prometheus)
        yield instance, base
    assert daemon.process.returncode == 0, daemon.tail()


def concrete(expr: str) -> str:
    for variable, value in GRAFANA_VARIABLES.items():
        expr = expr.replace(variable, value)
    assert "$" not in expr, f"unhandled Grafana variable in {expr}"
    return expr


def present_components(status: dict[str, Any]) -> set[str]:
    present = set()
    if any(gpu.get("fan_controller") for gpu in status["gpus"]):
        present.add("fan controller")
    if status["trainers"]:
        present.add("trainer")
    if any(t.get("steps_total") is not None for t in status["trainers"]):
        present.add("trainer steps")
    return present


def test_every_dashboard_and_alert_expression_against_real_prometheus(stack: tuple[str, str]) -> None:
    instance, prometheus = stack
    dashboard = json.loads((REPO / "config" / "grafana-dashboard.json").read_text())
    status = get_json(f"http://{instance}/status")
    present = present_components(status)
    titles = {p["title"] for p in dashboard["panels"]}
    assert set(CONDITIONAL_PANELS) <= titles, "CONDITIONAL_PANELS names a panel the dashboard no longer has"
    empty = []
    for panel in dashboard["panels"]:
        if panel["type"] == "row":
            continue
        results = [query(prometheus, concrete(t["expr"])) for t in panel["targets"]]
        needs = CONDITIONAL_PANELS.get(panel["title"])
        if not any(results) and (needs is None or needs in present):
            empty.append(f'{panel["id"]} {panel["title"]}')
    assert not empty, f"dashboard panels without data: {empty}"

    for variable in dashboard["templating"]["list"]:
        if variable["type"] != "query":
            continue
        metric, label = re.fullmatch(r"label_values\((.+), (\w+)\)", variable["definition"]).groups()
        series = query(prometheus, concrete(metric))
        assert series and all(label in s["metric"] for s in series), variable["name"]

    alerts = (REPO / "config" / "alerts.yml").read_text()
    exprs = re.findall(r"^\s+expr: (?:>-\n((?:\s{10}.*\n)+)|(.*)\n)", alerts, re.M)
    assert len(exprs) == alerts.count("- alert:")
    for block, line in exprs:
        query(prometheus, " ".join((block or line).split()))

    rules = get_json(f"{prometheus}/api/v1/rules")["data"]["groups"]
    assert all(rule["health"] != "err" for group in rules for rule in group["rules"]), rules
