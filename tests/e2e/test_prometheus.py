"""End to end: `gpuwatch run` on a fake two-GPU tree, scraped by a real Prometheus, every PromQL checked.

Every expression of config/grafana-dashboard.json and config/alerts.yml goes through Prometheus' HTTP
API: each must be valid, and each dashboard panel must return data. The run has the fan controller
and a stand-in trainer reporting steps, so every panel is required; should a component be missing
from the run (read from the daemon's /status), the panels about it are excused:
"Fan mode" and "Fan controller events" need a fan controller publishing state, the power governor's
panels a governor; "Trainer phase" and
"Restarts, pauses, resumes" need a supervised trainer; "Training speed" and "Seconds since last
step, epoch" need a trainer that reports steps; the energy panels of training likewise
(tests/support/dashboard.py). The fake tree's cards have gpu_metrics tables, AER files and their PCIe
switch (tests/support/published.py), so the throttling, energy and PCIe panels are required. The scrape job has
config/prometheus.yml's relabeling, so the `host` variable has values. Loopback only, bounded waits,
both processes stopped.
"""

from __future__ import annotations

import json
import os
import pwd
import re
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.dashboard import CONDITIONAL_PANELS, concrete, load, panels, present_components, variable_queries
from tests.support.paths import REPO
from tests.support.processes import Processes, get_json, wait_up
from tests.support.published import GPU_B, two_gpu_tree
from tests.support.stack import (
    daemon_config,
    missing,
    query,
    shipped_relabeling,
    start_gpuwatch,
    start_prometheus,
    targets_up,
)

# A stand-in training run: reports a step every 0.1 s through the heartbeat protocol, ends by itself.
TRAINER = (
    "import os, time\n"
    "from gpuwatch.heartbeat import Heartbeat, write_heartbeat\n"
    "path = os.environ['GPUWATCH_HEARTBEAT_FILE']\n"
    "start = time.time()\n"
    "for step in range(1, 600):\n"
    "    now = time.time()\n"
    "    write_heartbeat(path, Heartbeat(pid=os.getpid(), steps_total=step, last_step_unix=now,\n"
    "                                    steps_per_s=step / (now - start + 1e-9), "
    "updated_unix=now, epoch=step // 50))\n"
    "    time.sleep(0.1)\n"
)

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
            f"scrape_configs:\n  - job_name: gpuwatch\n    static_configs:\n      - targets: ['{instance}']\n"
            + shipped_relabeling()))
        wait_up("prometheus to scrape gpuwatch", lambda: targets_up(base) == {instance}, prometheus)
        # Enough scrapes for increase()/rate() over the dashboard's windows to have two points.
        wait_up("three scrapes", lambda: query(base, "count_over_time(gpuwatch_ticks_total[1m]) >= 3"), prometheus)
        # The garbage sensor's read errors (one a tick) make GpuSensorReadErrors fire: the alerts panel's data.
        wait_up("an alert to fire", lambda: query(base, 'ALERTS{alertstate="firing"}'), prometheus)
        yield instance, base
    assert daemon.process.returncode == 0, daemon.tail()


def test_every_dashboard_and_alert_expression_against_real_prometheus(stack: tuple[str, str]) -> None:
    instance, prometheus = stack
    dashboard = load()
    present = present_components(get_json(f"http://{instance}/status"))
    titles = {p["title"] for p in panels(dashboard)}
    assert set(CONDITIONAL_PANELS) <= titles, "CONDITIONAL_PANELS names a panel the dashboard no longer has"
    empty = []
    for panel in panels(dashboard):
        results = [query(prometheus, concrete(t["expr"])) for t in panel["targets"]]
        needs = CONDITIONAL_PANELS.get(panel["title"])
        if not any(results) and (needs is None or needs in present):
            empty.append(f'{panel["id"]} {panel["title"]}')
    assert not empty, f"dashboard panels without data: {empty}"

    for name, selector, label in variable_queries(dashboard):
        series = query(prometheus, concrete(selector))
        assert series and all(label in s["metric"] for s in series), name

    alerts = (REPO / "config" / "alerts.yml").read_text()
    exprs = re.findall(r"^\s+expr: (?:>-\n((?:\s{10}.*\n)+)|(.*)\n)", alerts, re.M)
    assert len(exprs) == alerts.count("- alert:")
    for block, line in exprs:
        query(prometheus, " ".join((block or line).split()))

    rules = get_json(f"{prometheus}/api/v1/rules")["data"]["groups"]
    assert all(rule["health"] != "err" for group in rules for rule in group["rules"]), rules
