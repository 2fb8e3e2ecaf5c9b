"""Faults the daemon must survive, injected into a real `gpuwatch run` on a real-topology fake tree
(docs/robustness.md): a sysfs read that never returns (a FIFO stands in for the hung file), a reload
that must reach every consumer, a burst of SIGHUPs, a trainer that ignores SIGTERM at shutdown, and
a trainer's double-forked setsid grandchild."""

from __future__ import annotations

import os
import pwd
import signal
import sys
import textwrap
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from gpuwatch.sim.tree import FakeCard, FakeSysfsTree
from tests.support.daemon_process import DaemonProcess
from tests.support.processes import Processes
from tests.support.trees import capture
from tests.support.waiting import wait_for

SLOT = "0000:28:00.0"  # the RX 5700 XT capture's slot (Navi 10, the RX 5600 XT's chip)


@pytest.fixture
def navi10(tmp_path: Path) -> tuple[FakeSysfsTree, FakeCard]:
    tree = FakeSysfsTree(tmp_path / "sys")
    return tree, tree.add_capture(capture("navi10-rx5700xt-sapphire"))


@pytest.fixture
def processes(tmp_path: Path) -> Iterator[Processes]:
    with Processes(tmp_path / "logs") as started:
        yield started


def _user() -> str:
    return pwd.getpwuid(os.geteuid()).pw_name


def _trainer(tmp: Path, name: str, body: str, **settings: Any) -> str:
    path = tmp / f"{name}.py"
    path.write_text(textwrap.dedent(body))
    lines = [f'[[trainer]]\nname = "{name}"\ncommand = ["{sys.executable}", "{path}"]\ncwd = "{tmp}"\n'
             f'user = "{_user()}"\nhang_timeout_s = 3600\n']
    lines += [f"{key} = {value}\n" for key, value in settings.items()]
    return "".join(lines)


def _gpu(document: dict[str, Any]) -> dict[str, Any]:
    (gpu,) = document["gpus"]
    return gpu


def _fan_mode(document: dict[str, Any]) -> str | None:
    fan = _gpu(document)["fan_controller"]
    return None if fan is None else fan["mode"]


def test_hung_read_leaves_the_loop_running_and_shutdown_hands_the_fan_back(tmp_path, navi10, processes) -> None:
    tree, card = navi10
    hwmon = tree.root / str(card.hwmon_dir)
    daemon = DaemonProcess(processes, tmp_path, tree.root, "interval_s = 0.1\n[http]\nenabled = false\n")
    daemon.wait_state(lambda d: _fan_mode(d) == "curve", "the fan under curve control")
    assert (hwmon / "pwm1_enable").read_text().strip() == "1"

    # The junction file stops answering, as when the driver waits on a stuck SMU message: open()
    # of a FIFO without a writer blocks like that read.
    (hwmon / "temp2_input").unlink()
    os.mkfifo(hwmon / "temp2_input")
    before = daemon.state()["daemon"]["ticks_total"]  # type: ignore[index]
    stuck = daemon.wait_state(
        lambda d: d["daemon"]["ticks_total"] > before + 3 and _fan_mode(d) == "failsafe"
        and any("unresponsive" in e["error"] for e in _gpu(d)["errors"]),
        "ticks going on with the GPU unresponsive and its fan in failsafe")
    assert not _gpu(stuck)["up"]
    assert "unresponsive" in (_gpu(stuck)["fan_controller"]["message"] or "")
    # Fail hot: the write path does not wait on the stuck reader.
    wait_for(lambda: (hwmon / "pwm1").read_text().strip() == "255", "the fan at 100 %")

    assert daemon.stop(timeout_s=20) == 0
    assert (hwmon / "pwm1_enable").read_text().strip() == "2"  # handed back to the firmware
    assert not (daemon.runtime / "fan-restore.json").exists()


def test_reload_reaches_metrics_and_the_supervisor(tmp_path, navi10, processes) -> None:
    tree, card = navi10
    tree.write(f"{card.hwmon_dir}/temp1_input", "60000\n")  # edge 60 °C
    sleeper = _trainer(tmp_path, "sleeper", "import time\nwhile True:\n    time.sleep(0.05)\n",
                       cooperative_pause='"never"', debounce_s=0, min_pause_s=0)
    head = 'interval_s = 0.1\n[fan]\nmode = "monitor-only"\n[http]\nlisten = "127.0.0.1"\nport = 0\n'
    daemon = DaemonProcess(processes, tmp_path, tree.root, head + "[thermal]\nedge_limit_c = 90\n" + sleeper)
    port = daemon.http_port()
    daemon.wait_state(lambda d: d["trainers"][0]["phase"] == "running", "the trainer running")

    daemon.write_config(head + "[thermal]\nedge_limit_c = 50\n" + sleeper)
    daemon.signal(signal.SIGHUP)
    daemon.wait_log("config reloaded")

    def metrics() -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
            return response.read().decode()

    edge = f'{{gpu="{SLOT}",sensor="edge"}}'
    wait_for(lambda: f"gpuwatch_gpu_temperature_limit_celsius{edge} 50.0" in (text := metrics())
             and f"gpuwatch_gpu_thermal_over_limit{edge} 1.0" in text, "/metrics with the new edge limit",
             detail=lambda: "\n".join(line for line in metrics().splitlines() if "edge" in line))
    paused = daemon.wait_state(lambda d: d["trainers"][0]["phase"] == "paused", "the trainer paused")
    assert "50" in paused["trainers"][0]["reason"]
    assert daemon.stop() == 0


def _ticks(daemon: DaemonProcess) -> int:
    document = daemon.state()
    assert document is not None
    return int(document["daemon"]["ticks_total"])


def test_sighup_burst_is_coalesced_and_the_schedule_holds(tmp_path, navi10, processes) -> None:
    tree, _ = navi10
    daemon = DaemonProcess(processes, tmp_path, tree.root, 'interval_s = 1.0\n[fan]\nmode = "monitor-only"\n'
                                                '[http]\nenabled = false\n')
    daemon.wait_state(lambda d: d["daemon"]["ticks_total"] >= 2, "two ticks")
    before = _ticks(daemon)
    for _ in range(20):
        daemon.signal(signal.SIGHUP)
        time.sleep(0.02)
    # A reload never adds a tick (each used to run one and push the schedule by an interval).
    assert _ticks(daemon) <= before + 2
    after = _ticks(daemon)
    daemon.wait_state(lambda d: d["daemon"]["ticks_total"] >= after + 2, "ticks on schedule after the burst",
                      timeout_s=8)
    reloads = daemon.log().count("config reloaded")
    assert 1 <= reloads <= 3, f"{reloads} reloads for one burst"
    assert daemon.stop() == 0


STUBBORN = """
import pathlib, signal, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
pathlib.Path("stubborn.ready").touch()  # only now does SIGTERM not end it: the test waits for this
while True:
    time.sleep(0.05)
"""


def test_stubborn_trainer_is_killed_after_its_own_grace_at_shutdown(tmp_path, navi10, processes) -> None:
    tree, _ = navi10
    stubborn = _trainer(tmp_path, "stubborn", STUBBORN, grace_s=1)
    daemon = DaemonProcess(processes, tmp_path, tree.root, 'interval_s = 0.1\n[fan]\nmode = "monitor-only"\n'
                                                '[http]\nenabled = false\n' + stubborn)
    document = daemon.wait_state(lambda d: d["trainers"][0]["pid"], "the trainer running")
    pid = document["trainers"][0]["pid"]
    wait_for(lambda: psutil.Process(pid).cmdline()[-1].endswith("stubborn.py"), "the trainer's own program",
             ignore=(psutil.Error,))
    # A SIGTERM before the script ignores it would end it at once, and no grace would be needed.
    wait_for(lambda: (tmp_path / "stubborn.ready").exists(), "the trainer ignoring SIGTERM")
    assert daemon.stop() == 0
    log = daemon.log()
    assert "SIGKILL after 1s grace" in log
    assert "still running at the end of shutdown" not in log  # the global backstop (grace + 10 s) did not act


ORPHANER = """
import os, sys, time
pid_file = sys.argv[1]
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:  # the grandchild: its own session, its parent gone, init (or a subreaper) adopts it
        with open(pid_file + ".tmp", "w") as f:
            f.write(str(os.getpid()))
        os.replace(pid_file + ".tmp", pid_file)
        while True:
            time.sleep(0.05)
    os._exit(0)
os.wait()
while not os.path.exists(pid_file):
    time.sleep(0.01)
if len(sys.argv) > 2:
    sys.exit(int(sys.argv[2]))
while True:
    time.sleep(0.05)
"""


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _orphaner(tmp: Path, name: str, *args: str, **settings: Any) -> str:
    body = _trainer(tmp, name, ORPHANER, **settings)
    extra = "".join(f', "{arg}"' for arg in (str(tmp / f"{name}.pid"), *args))
    return body.replace(f'{name}.py"]', f'{name}.py"{extra}]')


def test_setsid_grandchild_does_not_outlive_its_trainer(tmp_path, navi10, processes) -> None:
    tree, _ = navi10
    trainers = (_orphaner(tmp_path, "crasher", "3", give_up_after_crashes=1)
                + _orphaner(tmp_path, "runner", grace_s=5))
    daemon = DaemonProcess(processes, tmp_path, tree.root, 'interval_s = 0.1\n[fan]\nmode = "monitor-only"\n'
                                                '[http]\nenabled = false\n' + trainers)
    pids = {}
    for name in ("crasher", "runner"):
        pid_file = tmp_path / f"{name}.pid"
        pids[name] = int(wait_for(lambda pid_file=pid_file: pid_file.exists() and pid_file.read_text(),
                                  f"{name}'s grandchild"))
    try:
        # The crasher's run ended: what its tree left behind goes with it, the daemon running on.
        daemon.wait_state(lambda d: d["trainers"][0]["phase"] == "failed", "the crasher failed")
        wait_for(lambda: not _alive(pids["crasher"]), "the crasher's setsid grandchild to be gone", 5)
        assert _alive(pids["runner"])
        assert daemon.stop() == 0
        wait_for(lambda: not _alive(pids["runner"]), "the runner's setsid grandchild to be gone", 5)
    finally:
        for pid in pids.values():
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
