"""End to end: `gpuwatch run` on a fake two-GPU tree, scraped by a real Prometheus, every PromQL checked.

Every expression of config/grafana-dashboard.json and config/alerts.yml goes through Prometheus' HTTP
API: each must be valid, and every dashboard panel must return data, every run. The run is built to
have every part a panel needs (tests/support/dashboard.py's CONDITIONAL_PANELS): the fan controller and
the power governor on the fake cards, a stand-in trainer reporting steps, garbage in one sensor file
(read errors), cards with gpu_metrics tables, AER files and their PCIe switch
(tests/support/published.py), and the trainer's process seen holding GPU A: the daemon's proc_root is a
fake /proc where the test mirrors the trainer's real pid with an amdgpu render-node fdinfo, as the
simulator does (gpuwatch/sim/clients.py). The test asserts the daemon's /status reports each of those
parts; it never lets that report excuse a panel. The scrape job has config/prometheus.yml's relabeling,
so the `host` variable has values. Loopback only, bounded waits, both processes stopped.
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

from gpuwatch.sim.proctree import RENDER_NODE, FakeProcTree, amdgpu_fdinfo
from tests.support.dashboard import CONDITIONAL_PANELS, concrete, load, panels, present_components, variable_queries
from tests.support.paths import REPO
from tests.support.processes import Processes, get_json, wait_up
from tests.support.published import GPU_A, GPU_B, two_gpu_tree
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
    # The daemon's /proc: the test mirrors the trainer's pid there once it runs, holding GPU A.
    proc = FakeProcTree(tmp_path / "proc")
    config = tmp_path / "gpuwatch.toml"
    config.write_text(f'sysfs_root = "{tree.root}"\nproc_root = "{proc.root}"\n' + daemon_config(tmp_path / "run", (
        f'[[trainer]]\nname = "e2e"\ncommand = {json.dumps([sys.executable, "-c", TRAINER])}\ngrace_s = 5.0\n'
        # a root daemon runs a trainer as root only when asked (docs/supervisor.md)
        f'user = "{pwd.getpwuid(os.geteuid()).pw_name}"\n'), interval_s=0.2))
    with Processes(tmp_path / "logs") as processes:
        daemon, instance = start_gpuwatch(processes, "gpuwatch", config)
        pid = wait_up("the trainer to run", lambda: get_json(f"http://{instance}/status")["trainers"][0]["pid"], daemon)
        proc.add_process(pid, comm="python3", cmdline=[sys.executable, "-c", "train"], uid=os.geteuid())
        proc.set_fd(pid, 7, RENDER_NODE, amdgpu_fdinfo(1, GPU_A, vram_bytes=512 << 20, engines_ns={"gfx": 10**9}))
        wait_up("the trainer seen on GPU A",
                lambda: get_json(f"http://{instance}/status")["trainers"][0]["gpu_use"], daemon)
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
    titles = {p["title"] for p in panels(dashboard)}
    assert set(CONDITIONAL_PANELS) <= titles, "CONDITIONAL_PANELS names a panel the dashboard no longer has"
    # The run was built with every part; a part the daemon does not report is a failure, not an excuse.
    assert present_components(get_json(f"http://{instance}/status")) == set(CONDITIONAL_PANELS.values())
    empty = []
    for panel in panels(dashboard):
        if not any(query(prometheus, concrete(t["expr"])) for t in panel["targets"]):
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
