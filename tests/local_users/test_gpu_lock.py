"""Issue 46 item 10: one daemon per GPU across runtime directories. Two real daemons, two runtime directories,
one (fake) card: the second exits 2 naming the GPU and the first's pid, and never touches the card; once the
first is gone (SIGKILL: the kernel drops its flock) a new one starts."""

from __future__ import annotations

import subprocess
from pathlib import Path

from gpuwatch.sim.tree import FakeSysfsTree
from tests.support.processes import Processes
from tests.support.stack import GPUWATCH
from tests.support.trees import capture
from tests.support.waiting import wait_for

CONFIG = 'runtime_dir = "{run}"\ninterval_s = 0.1\n[http]\nenabled = false\n'


def _config(tmp: Path, name: str) -> Path:
    config = tmp / f"{name}.toml"
    config.write_text(CONFIG.format(run=tmp / name))
    return config


def test_a_second_daemon_on_the_same_card_exits_2_naming_the_first(tmp_path: Path, processes: Processes) -> None:
    tree = FakeSysfsTree(tmp_path / "sys")
    card = tree.add_capture(capture("navi10-rx5700xt-sapphire"))
    argv = [*GPUWATCH, "run", "--sysfs-root", str(tree.root), "-c"]
    first = processes.start("first", [*argv, str(_config(tmp_path, "a"))])
    wait_for((tmp_path / "a/state.json").exists, "the first daemon's state file", 60, detail=first.tail)
    cap = tree.root / card.hwmon_dir / "power1_cap"
    before = cap.read_text() if cap.exists() else None
    second = subprocess.run([*argv, str(_config(tmp_path, "b"))], capture_output=True, text=True, timeout=120)
    assert second.returncode == 2, second.stderr
    lines = [line for line in second.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in second.stderr, second.stderr
    assert f"pid {first.process.pid}" in lines[0] and "one daemon per GPU" in lines[0]
    assert not (tmp_path / "b/power-restore.json").exists() and not (tmp_path / "b/fan-restore.json").exists()
    assert (cap.read_text() if cap.exists() else None) == before
    assert first.process.poll() is None
    first.process.kill()
    first.process.wait(30)
    third = processes.start("third", [*argv, str(_config(tmp_path, "b"))])
    wait_for((tmp_path / "b/state.json").exists, "a daemon on the card after the first's SIGKILL", 60,
             detail=third.tail)
