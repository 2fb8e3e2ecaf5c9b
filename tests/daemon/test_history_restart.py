"""The history survives a restart (issue 51): a real `gpuwatch run` keeps its points on disk, is stopped, and the
next daemon on the same state directory serves them on /history, with a gap (never a line) between the two runs
and each run's start among the events; `gpuwatch status --history` reads the same files on the box."""

from __future__ import annotations

import json
import subprocess
import urllib.request
from pathlib import Path
from typing import Any

from gpuwatch.sim.tree import FakeSysfsTree
from tests.support.daemon_process import DaemonProcess
from tests.support.processes import Processes
from tests.support.stack import GPUWATCH
from tests.support.trees import capture
from tests.support.waiting import wait_for

CONFIG = 'interval_s = 0.5\n[fan]\nmode = "monitor-only"\n[http]\nenabled = true\nlisten = "127.0.0.1"\nport = 0\n'


def history(port: int) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/history?range=15m", timeout=30) as response:
        document: dict[str, Any] = json.loads(response.read())
    return document


def at_least(port: int, points: int) -> dict[str, Any] | None:
    document = history(port)
    return document if len(document["t"]) >= points else None


def test_points_written_before_a_restart_are_served_after_it(tmp_path: Path) -> None:
    tree = FakeSysfsTree(tmp_path / "sys")
    tree.add_capture(capture("navi10-rx5700xt-sapphire"))
    with Processes(tmp_path / "logs") as processes:
        first = DaemonProcess(processes, tmp_path, tree.root, CONFIG)
        port = first.http_port()
        before = wait_for(lambda: at_least(port, 4), "four points on disk", timeout_s=60, detail=first.child.tail,
                          ignore=(OSError,))
        assert first.stop() == 0
        second = DaemonProcess(processes, tmp_path, tree.root, CONFIG)
        port = second.http_port()
        after = wait_for(lambda: at_least(port, len(before["t"]) + 4), "the second daemon's points", timeout_s=60,
                         detail=second.child.tail, ignore=(OSError,))
        assert second.stop() == 0
    assert set(before["t"]) <= set(after["t"])  # every point of the first run, served by the second
    (gpu,) = after["gpus"]
    temps = after["gpus"][gpu]["hottest_c"]
    seam = after["t"].index(before["t"][-1])
    assert None not in temps[:seam + 1] and None in temps[seam + 1:seam + 3]  # the restart: a gap
    assert [e["kind"] for e in after["events"]].count("start") == 2
    assert len(after["t"]) == len(temps) == len(after["gpus"][gpu]["sclk_mhz"])

    # On the box, as the CLI: the same files, without the daemon.
    shown = subprocess.run([*GPUWATCH, "status", "--history", "15m", "-c", str(first.config), "--color", "never"],
                           capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0, shown.stderr
    assert gpu in shown.stdout and "°C" in shown.stdout and "Traceback" not in shown.stderr
