"""A fleet of two simulated machines, for real: the Grafana dashboard's every query and variable against a
real Prometheus scraping both through config/prometheus.yml (file_sd targets, `host` relabeling), and
`gpuwatch status --remote` over both live daemons and endpoints that fail in every way a host can.

box1: two GPUs, the second with garbage in its temperature files (read errors, its fan in failsafe),
a supervised trainer "bert" on the first. box2: one GPU and a trainer that crashes at once and is
restarted over and over (an alert, but nothing `gpuwatch status` calls an alarm). Both thus have
alerts firing. Two ports, so two `instance` labels; file_sd gives them the hosts box1 and box2.
Every process is started and stopped by the test, on 127.0.0.1.
"""

from __future__ import annotations

import json
import os
import pwd
import re
import subprocess
import sys
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from gpuwatch.cli.status import exit_code
from tests.support.dashboard import (
    CONDITIONAL_PANELS,
    concrete,
    load,
    panels,
    present_components,
    promql_regex,
    variable_queries,
)
from tests.support.endpoints import http_server, silent_listener
from tests.support.paths import REPO
from tests.support.processes import Processes, free_port, get_json, wait_up
from tests.support.stack import (
    GPUWATCH,
    PROMETHEUS_CONFIG,
    daemon_config,
    missing,
    query,
    shorten_for,
    start_gpuwatch,
    start_prometheus,
    targets_up,
)

BOX1_GPUS = ("0000:28:00.0", "0000:2b:00.0")  # the simulator's first two cards

pytestmark = pytest.mark.timeout(240)


def trainer(name: str, command: list[str], gpus: list[str], extra: str = "") -> str:
    return (f'[[trainer]]\nname = "{name}"\ncommand = {json.dumps(command)}\ngpus = {json.dumps(gpus)}\n'
            # a root daemon runs a trainer as root only when asked (docs/supervisor.md)
            f'grace_s = 5.0\nuser = "{pwd.getpwuid(os.geteuid()).pw_name}"\n{extra}')


def box1(runtime: Path) -> str:
    demo = [sys.executable, str(REPO / "demo" / "train_demo.py"), "--backend", "python", "--step-s", "0.2"]
    return daemon_config(runtime, '[simulate]\nenabled = true\ngpus = 2\ntime_scale = 20.0\n'
                                  '[simulate.faults]\nsensor_garbage = true\ncards = [1]\n'
                         + trainer("bert", demo, [BOX1_GPUS[0]]))


def box2(runtime: Path) -> str:
    crash_loop = 'give_up_after_crashes = 100000\n[trainer.backoff]\ninitial_s = 0.2\nmax_s = 0.5\njitter_ratio = 0.0\n'
    return daemon_config(runtime, '[simulate]\nenabled = true\ngpus = 1\n'
                         + trainer("crashy", [sys.executable, "-c", "raise SystemExit(3)"], [], crash_loop))


@dataclass(frozen=True)
class Fleet:
    hosts: dict[str, str]  # instance (127.0.0.1:PORT) -> name (box1, box2)
    configs: dict[str, Path]  # name -> gpuwatch.toml
    processes: Processes

    def instance(self, name: str) -> str:
        return next(i for i, n in self.hosts.items() if n == name)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    work = tmp_path_factory.mktemp("fleet")
    with Processes(work / "logs") as processes:
        hosts, configs = {}, {}
        for name, config in (("box1", box1), ("box2", box2)):
            configs[name] = work / f"{name}.toml"
            configs[name].write_text(config(work / name))
            hosts[start_gpuwatch(processes, name, configs[name])[1]] = name
        yield Fleet(hosts, configs, processes)
    assert all(child.process.returncode == 0 for child in processes.started), [c.tail() for c in processes.started]


@pytest.fixture
def failing_hosts() -> Iterator[dict[str, str]]:
    """Hosts that fail, and their row: nothing listening, a listener that never answers, a web server
    that is not gpuwatch."""
    web_page = (200, b"<html>a web server, not gpuwatch</html>")
    with silent_listener() as silent, http_server({"/status": web_page, "/healthz": web_page}) as web:
        yield {f"127.0.0.1:{free_port()}": "ERROR unreachable: connection refused",
               silent: "ERROR timeout after 2s",
               web: "ERROR bad response: not JSON (is this gpuwatch's HTTP port?)"}


def status(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*GPUWATCH, "status", *args], capture_output=True, text=True, timeout=60)


def test_status_remote_shows_both_live_daemons_and_every_failing_host(fleet: Fleet,
                                                                      failing_hosts: dict[str, str]) -> None:
    box1, box2 = fleet.instance("box1"), fleet.instance("box2")
    wait_up("box1's fan failsafe and box2's crash loop", lambda: (
        any((g["fan_controller"] or {}).get("mode") == "failsafe" for g in get_json(f"http://{box1}/status")["gpus"])
        and get_json(f"http://{box2}/status")["trainers"][0]["restarts_total"] >= 1))
    done = status("--remote", box1, box2, *failing_hosts, "--timeout", "2")
    assert done.returncode == 1 and done.stderr == "", done.stderr  # box1's failsafe, and three unreadable hosts
    lines = done.stdout.splitlines()
    assert lines[0].endswith("5 hosts, 3 GPUs, 3 unreadable"), lines[0]
    rows = {tuple(line.split()[:2]): line for line in lines[2:]}
    assert rows[(box1, BOX1_GPUS[0])].split()[-3:] == ["bert", "running", "ok"]
    assert rows[(box1, BOX1_GPUS[1])].endswith("fan failsafe")
    assert "crashy" in rows[(box2, BOX1_GPUS[0])]
    for host, error in failing_hosts.items():
        assert rows[(host, "-")].endswith(error), rows[(host, "-")]

    as_json = json.loads(status("--remote", box1, box2, *failing_hosts, "--timeout", "2", "--json").stdout)
    assert [h["host"] for h in as_json["hosts"]] == [box1, box2, *failing_hosts]
    for host in as_json["hosts"][:2]:
        assert host["error"] is None and host["stale"] is None
        assert host["exit_code"] == exit_code(host["status"]) and host["status"]["schema"] == 1
    assert [h["exit_code"] for h in as_json["hosts"]] == [1, 0, 1, 1, 1] and as_json["exit_code"] == 1


def test_status_remote_exit_code_per_machine_and_from_the_config(fleet: Fleet, tmp_path: Path) -> None:
    box1, box2 = fleet.instance("box1"), fleet.instance("box2")
    assert status("--remote", box2).returncode == 0
    assert status("--remote", f"http://{box1}").returncode == 1
    config = tmp_path / "gpuwatch.toml"
    config.write_text(f'[status]\nremote = ["{box2}", "http://{box1}/status"]\n')
    done = status("-c", str(config), "--remote")
    assert done.returncode == 1 and "2 hosts, 3 GPUs" in done.stdout.splitlines()[0]


def local_prometheus(text: str) -> str:
    """config/prometheus.yml for the test: 1 s intervals, no Alertmanager, and in place of the example
    machines one address where nothing listens, which has no host label (the relabeling must derive
    it); file_sd, its path and the relabeling stay as shipped. Each rewrite must hit."""
    subs = [
        (r"(?m)^(\s+(?:scrape|evaluation)_interval: )\d+s$", r"\g<1>1s"),
        (r"(?ms)^alerting:\n.*?\n(?=\S)", ""),
        (r'(?m)^(\s+- targets: )\["gpu-node-01:9840", "gpu-node-02:9840"\]$', r'\g<1>["127.0.0.1:1"]'),
    ]
    for pattern, replacement in subs:
        text, count = re.subn(pattern, replacement, text)
        assert count, f"config/prometheus.yml no longer has {pattern!r}"
    return text


@pytest.fixture(scope="module")
def prometheus(fleet: Fleet, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Prometheus on the shipped config, the two daemons in a file_sd file in the shipped format."""
    if missing("prometheus"):
        pytest.skip(missing("prometheus"))
    work = tmp_path_factory.mktemp("prom")
    example = json.loads((REPO / "config" / "targets.example.json").read_text())
    assert all(set(group) == {"targets", "labels"} for group in example)
    (work / "targets").mkdir()
    (work / "targets" / "gpuwatch-fleet.json").write_text(json.dumps(
        [{"targets": [instance], "labels": {"host": name, "cluster": "lab"}}
         for instance, name in fleet.hosts.items()]))
    # Only the alert this run provokes with a `for:` (box1's failsafe fan) is shortened.
    (work / "alerts.yml").write_text(
        shorten_for((REPO / "config" / "alerts.yml").read_text(), "2s", {"GpuFanFailsafe"}))
    child, base = start_prometheus(fleet.processes, work, local_prometheus(PROMETHEUS_CONFIG.read_text()))
    wait_up("prometheus to scrape both machines", lambda: targets_up(base) == set(fleet.hosts), child)
    wait_up("three scrapes of each",
            lambda: len(query(base, "count_over_time(gpuwatch_ticks_total[1m]) >= 3")) == 2, child)
    # <=: 127.0.0.1:1 (nothing listens) fires GpuwatchDown too, 30 s after the start (issue 39 made it fast).
    wait_up("alerts firing on both machines", lambda: set(fleet.hosts) <= {
        r["metric"]["instance"] for r in query(base, 'ALERTS{alertstate="firing"}')}, child)
    yield base


def test_targets_get_their_host_from_file_sd_or_their_address(fleet: Fleet, prometheus: str) -> None:
    targets = get_json(f"{prometheus}/api/v1/targets")["data"]["activeTargets"]
    assert {t["labels"]["instance"]: t["labels"].get("host") for t in targets} == {
        **fleet.hosts, "127.0.0.1:1": "127.0.0.1"}


# The parts of gpuwatch each machine is built to run (tests/support/dashboard.py's names): a panel about a
# part a machine lacks by design may be empty for it; every other panel must have data. The daemons' own
# /status must report exactly these parts: it never decides what is checked.
ALL_PARTS = frozenset(CONDITIONAL_PANELS.values())
PARTS = {
    "box1": ALL_PARTS,
    # crashy exits at once: never a step, never a process on a GPU; no sensor fault on box2.
    "box2": ALL_PARTS - {"trainer steps", "processes", "failures"},
}


def test_every_panel_has_data_for_each_machine_alone(fleet: Fleet, prometheus: str) -> None:
    dashboard = load()
    overview = next(p for p in panels(dashboard) if p["title"] == "Every GPU of every machine")
    missing_data = []
    for instance, name in fleet.hosts.items():
        present = PARTS[name]
        assert present_components(get_json(f"http://{instance}/status")) == present, name
        for panel in panels(dashboard):
            results = [query(prometheus, concrete(t["expr"], instance=promql_regex(instance)))
                       for t in panel["targets"]]
            for target, series in zip(panel["targets"], results, strict=True):
                assert all(s["metric"].get("instance", instance) == instance for s in series), (name, target["expr"])
                if "{{host}}" in target["legendFormat"]:
                    assert all(s["metric"].get("host") == name for s in series), (name, target["expr"])
            # the overview table needs every column on every machine; other panels any of their queries
            has_data = all(results) if panel is overview else any(results)
            needs = CONDITIONAL_PANELS.get(panel["title"])
            if not has_data and (needs is None or needs in present):
                missing_data.append(f'{name}: {panel["title"]}')
    assert not missing_data, f"panels without data for a machine: {missing_data}"


def test_variables_list_both_machines_and_narrow_down(fleet: Fleet, prometheus: str) -> None:
    """label_values(selector, label) as Grafana asks Prometheus: /api/v1/label/<label>/values?match[]=."""

    def values(selector: str, label: str, **chosen: str) -> set[str]:
        url = f"{prometheus}/api/v1/label/{label}/values?match[]=" + urllib.parse.quote(concrete(selector, **chosen))
        return set(get_json(url)["data"])

    queries = {name: (selector, label) for name, selector, label in variable_queries(load())}
    assert set(queries) == {"host", "instance", "gpu"}
    assert values(*queries["host"]) == {"box1", "box2"}
    assert values(*queries["instance"]) == set(fleet.hosts)
    assert values(*queries["instance"], host="box1") == {fleet.instance("box1")}
    assert values(*queries["gpu"], instance=promql_regex(fleet.instance("box1"))) == set(BOX1_GPUS)
