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
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from tests.support.paths import REPO
from tests.support.published import GPU_B, two_gpu_tree
from tests.support.waiting import wait_for

PROMETHEUS = shutil.which("prometheus")
WAIT_S = 30.0
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
    pytest.mark.timeout(180),  # three bounded waits of WAIT_S each on a loaded machine, plus shutdown
    pytest.mark.skipif(PROMETHEUS is None, reason="prometheus missing: apt-get install prometheus "
                       "(scripts/install-system-deps.sh does it for make test / CI)"),
]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_up(what: str, check: Callable[[], Any], log: Path) -> Any:
    """wait_for with this module's budget; a server not answering yet (OSError) is "not yet"."""
    return wait_for(check, what, WAIT_S, interval_s=0.2, ignore=(OSError,),
                    detail=lambda: log.read_text()[-3000:] if log.exists() else "")


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as response:
        return json.loads(response.read())


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=5)


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[tuple[int, Path]]:
    tree = two_gpu_tree(tmp_path / "sys")
    # Garbage in one sensor file so the read-error series (and their panel) exist, as on a flaky card.
    next((tree.root / "devices").rglob(f"{GPU_B}/hwmon/hwmon*/freq1_input")).write_text("garbage\n")
    config = tmp_path / "gpuwatch.toml"
    config.write_text(
        f'sysfs_root = "{tree.root}"\nruntime_dir = "{tmp_path / "run"}"\ninterval_s = 0.2\n'
        '[http]\nlisten = "127.0.0.1"\nport = 0\n'
        f'[[trainer]]\nname = "e2e"\ncommand = {json.dumps([sys.executable, "-c", TRAINER])}\ngrace_s = 5.0\n'
        # a root daemon runs a trainer as root only when asked (docs/supervisor.md)
        f'user = "{pwd.getpwuid(os.geteuid()).pw_name}"\n'
    )
    log = tmp_path / "gpuwatch.log"
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [sys.executable, "-c", "import sys; from gpuwatch.cli import main; sys.exit(main())", "run", "-c",
             str(config)], stdout=sink, stderr=subprocess.STDOUT)
    try:
        pattern = re.compile(r"HTTP listening on 127\.0\.0\.1:(\d+)")
        port = int(wait_up("gpuwatch to listen", lambda: (m := pattern.search(log.read_text())) and m.group(1), log))
        yield port, log
    finally:
        stop(process)
    assert process.returncode == 0, log.read_text()[-3000:]


@pytest.fixture
def prometheus(tmp_path: Path, daemon: tuple[int, Path]) -> Iterator[str]:
    gpuwatch_port, _ = daemon
    port = free_port()
    shutil.copy(REPO / "config" / "alerts.yml", tmp_path / "alerts.yml")
    (tmp_path / "prometheus.yml").write_text(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        "rule_files: [alerts.yml]\n"
        f"scrape_configs:\n  - job_name: gpuwatch\n    static_configs:\n"
        f"      - targets: ['127.0.0.1:{gpuwatch_port}']\n"
    )
    log = tmp_path / "prometheus.log"
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [PROMETHEUS, f"--config.file={tmp_path / 'prometheus.yml'}",
             f"--storage.tsdb.path={tmp_path / 'tsdb'}", f"--web.listen-address=127.0.0.1:{port}"],
            stdout=sink, stderr=subprocess.STDOUT, cwd=tmp_path)
    base = f"http://127.0.0.1:{port}"
    try:
        def target_up() -> bool:
            targets = get_json(f"{base}/api/v1/targets")["data"]["activeTargets"]
            return any(t["health"] == "up" for t in targets)

        wait_up("prometheus to scrape gpuwatch", target_up, log)
        # Enough scrapes for increase()/rate() over the dashboard's windows to have two points.
        wait_up("three scrapes", lambda: query(base, "count_over_time(gpuwatch_ticks_total[1m]) >= 3"), log)
        yield base
    finally:
        stop(process)


def query(base: str, expr: str) -> list[dict[str, Any]]:
    url = f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    try:
        body = get_json(url)
    except urllib.error.HTTPError as exc:
        body = json.loads(exc.read())
    assert body["status"] == "success", f"{expr}: {body.get('errorType')}: {body.get('error')}"
    return body["data"]["result"]


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


def test_every_dashboard_and_alert_expression_against_real_prometheus(
    prometheus: str, daemon: tuple[int, Path]
) -> None:
    dashboard = json.loads((REPO / "config" / "grafana-dashboard.json").read_text())
    status = get_json(f"http://127.0.0.1:{daemon[0]}/status")
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
