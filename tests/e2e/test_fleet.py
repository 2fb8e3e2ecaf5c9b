"""A fleet of two simulated machines, for real: `gpuwatch status --remote` over both live daemons and
endpoints that fail in every way a host can.

box1: two GPUs, the second with garbage in its temperature files (read errors, its fan in failsafe),
a supervised trainer "bert" on the first. box2: one GPU and a trainer that crashes at once and is
restarted over and over (an alert, but nothing `gpuwatch status` calls an alarm). Every process is
started and stopped by the test, on 127.0.0.1.
"""

from __future__ import annotations

import json
import os
import pwd
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from gpuwatch.cli.status import exit_code
from tests.support.paths import REPO
from tests.support.processes import Processes, free_port, get_json, wait_up
from tests.support.stack import GPUWATCH, daemon_config, start_gpuwatch

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
    """Endpoints that fail: nothing listening, a listener that never answers, a server that is not gpuwatch."""

    class NotGpuwatch(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = b"<html>a web server, not gpuwatch</html>"
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    web = ThreadingHTTPServer(("127.0.0.1", 0), NotGpuwatch)
    threading.Thread(target=web.serve_forever, daemon=True).start()
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        yield {f"127.0.0.1:{free_port()}": "ERROR unreachable: connection refused",
               f"127.0.0.1:{silent.getsockname()[1]}": "ERROR timeout after 2s",
               f"127.0.0.1:{web.server_address[1]}": "ERROR bad response: not JSON (is this gpuwatch's HTTP port?)"}
    web.shutdown()
    web.server_close()


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
