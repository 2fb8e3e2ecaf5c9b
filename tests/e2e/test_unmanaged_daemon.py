"""`gpuwatch run` with ``[unmanaged] on_hot = "stop"`` against real processes that did not come through gpuwatch.

The daemon is a real child on a fake sysfs tree (a real RX 6900 XT capture) and a fake /proc (sim/proctree.py,
the kernel's layout) in which real ``sleep`` children hold the card's render node; the test drives the card's
junction sensor past its crit (110 °C) and back. What is checked is each REAL process's state in the machine's
/proc/<pid>/stat (T: SIGSTOPped): stopped past crit, continued when cool, at the daemon's shutdown, after a
SIGKILL by `gpuwatch restore` (ExecStopPost) and by the next daemon; "report" never signals; a reload to
"report" continues them; a recorded pid that is another process now is never signalled.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpuwatch.sim.proctree import RENDER_NODE, FakeProcTree, amdgpu_fdinfo
from gpuwatch.sim.tree import FakeSysfsTree
from gpuwatch.supervise.unmanaged_stops import RECORD_NAME
from tests.support.daemon_process import DaemonProcess
from tests.support.processes import Processes
from tests.support.stack import GPUWATCH
from tests.support.trees import capture
from tests.support.waiting import wait_for

SLOT = "0000:03:00.0"
WAIT_S = 60.0  # two busy cores


def real_state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]


def real_start_ticks(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[19])


def toml(proc_root: Path, on_hot: str) -> str:
    return (f'proc_root = "{proc_root}"\ninterval_s = 0.1\n\n[http]\nenabled = false\n\n[power]\nmode = "off"\n\n'
            f'[processes]\nscan_all_every_s = 0.2\n\n[unmanaged]\non_hot = "{on_hot}"\n')


class Box:
    """The fake card and /proc, the real processes on it, the daemon."""

    def __init__(self, tmp: Path, processes: Processes) -> None:
        self.tmp = tmp
        self.processes = processes
        tree = FakeSysfsTree(tmp / "sys")
        card = tree.add_capture(capture("navi21-rx6900xt-sapphire-nitro"), card="card0", pci_slot=SLOT)
        assert card.hwmon_dir
        self.sys_root = tree.root
        self.junction = tree.root / card.hwmon_dir / "temp2_input"
        self.proc = FakeProcTree(tmp / "proc")
        self.pids: list[int] = []
        self.daemon: DaemonProcess | None = None

    def sleeper(self) -> int:
        pid = self.processes.start(f"job{len(self.pids)}", ["sleep", "600"]).process.pid
        self.proc.add_process(pid, comm="python3", cmdline=["python3", "train.py"], uid=1000,
                              start_ticks=real_start_ticks(pid))
        self.proc.set_fd(pid, 5, RENDER_NODE, amdgpu_fdinfo(client_id=len(self.pids) + 1, pdev=SLOT,
                                                            vram_bytes=1 << 30))
        self.pids.append(pid)
        return pid

    def junction_c(self, temp_c: float) -> None:
        self.junction.write_text(f"{int(temp_c * 1000)}\n")

    def start(self, on_hot: str = "stop") -> DaemonProcess:
        self.daemon = DaemonProcess(self.processes, self.tmp, self.sys_root, toml(self.proc.root, on_hot))
        return self.daemon

    @property
    def record(self) -> Path:
        return self.tmp / "run" / RECORD_NAME

    def wait_stopped(self, *pids: int) -> None:
        wait_for(lambda: all(real_state(pid) == "T" for pid in pids), f"{pids} SIGSTOPped", WAIT_S,
                 detail=self.daemon.child.tail if self.daemon else None)

    def wait_running(self, *pids: int) -> None:
        wait_for(lambda: all(real_state(pid) != "T" for pid in pids), f"{pids} continued", WAIT_S,
                 detail=self.daemon.child.tail if self.daemon else None)

    def restore(self) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*GPUWATCH, "restore", "-c", str(self.tmp / "gpuwatch.toml"), "--sysfs-root",
                               str(self.sys_root)], capture_output=True, text=True, timeout=120)


def unmanaged_doc(document: dict[str, Any]) -> dict[str, Any]:
    doc: dict[str, Any] = document["gpus"][0]["unmanaged"]
    return doc


@pytest.fixture
def box(tmp_path: Path) -> Iterator[Box]:
    with Processes(tmp_path / "logs") as processes:
        made = Box(tmp_path, processes)
        try:
            yield made
        finally:
            if made.daemon is not None and made.daemon.proc.poll() is None:
                made.daemon.proc.kill()  # before the SIGCONTs: it must not stop them again
                made.daemon.proc.wait()
            for pid in made.pids:  # a stopped child would wait out the SIGTERM grace
                try:
                    os.kill(pid, signal.SIGCONT)
                except OSError:
                    pass


def test_stopped_past_crit_then_continued_when_cool_and_published(box: Box) -> None:
    a, b = box.sleeper(), box.sleeper()
    box.junction_c(60)
    daemon = box.start()
    daemon.wait_state(lambda d: {p["pid"] for p in d["processes"]} >= {a, b}, "both processes listed", WAIT_S)
    assert real_state(a) != "T"
    box.junction_c(112)
    box.wait_stopped(a, b)
    doc = unmanaged_doc(daemon.wait_state(lambda d: len(unmanaged_doc(d)["stopped_pids"]) == 2, "/status", WAIT_S))
    assert doc["on_hot"] == "stop" and doc["stopped_pids"] == sorted((a, b)) and doc["stops_total"] == 2
    assert "junction 112°C at crit 110°C" in doc["reason"]
    assert sorted(r["pid"] for r in json.loads(box.record.read_text())["stopped"]) == sorted((a, b))
    daemon.wait_log(f"SIGSTOP to process {a}")
    status = subprocess.run([*GPUWATCH, "status", "-c", str(box.tmp / "gpuwatch.toml")], capture_output=True,
                            text=True, timeout=120)
    assert "stopped 2 processes not run under gpuwatch (past crit)" in status.stdout, status.stdout + status.stderr
    box.junction_c(60)
    box.wait_running(a, b)
    daemon.wait_state(lambda d: unmanaged_doc(d)["stopped_pids"] == [], "no process stopped", WAIT_S)
    assert not box.record.exists()
    assert daemon.stop() == 0


def test_report_never_signals(box: Box) -> None:
    a = box.sleeper()
    box.junction_c(115)
    daemon = box.start(on_hot="report")
    daemon.wait_state(lambda d: any(p["pid"] == a for p in d["processes"]), "the process listed", WAIT_S)
    ticks = daemon.wait_state(lambda d: d["daemon"]["ticks_total"] >= 1, "a tick", WAIT_S)["daemon"]["ticks_total"]
    daemon.wait_state(lambda d: d["daemon"]["ticks_total"] >= ticks + 10, "ten more ticks past crit", WAIT_S)
    assert real_state(a) != "T" and not box.record.exists()
    assert unmanaged_doc(daemon.state() or {})["stopped_pids"] == []
    assert daemon.stop() == 0


def test_shutdown_continues_them(box: Box) -> None:
    a = box.sleeper()
    box.junction_c(115)
    daemon = box.start()
    box.wait_stopped(a)
    assert daemon.stop() == 0  # SIGTERM, still past crit
    assert real_state(a) != "T" and not box.record.exists()


def test_after_sigkill_restore_continues_them(box: Box) -> None:
    a = box.sleeper()
    box.junction_c(115)
    daemon = box.start()
    box.wait_stopped(a)
    wait_for(box.record.exists, "the record of stopped processes")
    daemon.signal(signal.SIGKILL)
    daemon.proc.wait(30)
    assert real_state(a) == "T"  # nobody continued it
    status = subprocess.run([*GPUWATCH, "status", "-c", str(box.tmp / "gpuwatch.toml"), "--sysfs-root",
                             str(box.sys_root)], capture_output=True, text=True, timeout=120)
    assert status.returncode == 1
    assert f"holds processes not run under gpuwatch that it SIGSTOPped (pid {a})" in status.stdout + status.stderr
    done = box.restore()
    assert done.returncode == 0, done.stderr
    assert f"process {a} (not run under gpuwatch) continued" in done.stdout
    assert real_state(a) != "T" and not box.record.exists()


def test_after_sigkill_the_next_daemon_continues_them(box: Box) -> None:
    a = box.sleeper()
    box.junction_c(115)
    first = box.start()
    box.wait_stopped(a)
    first.signal(signal.SIGKILL)
    first.proc.wait(30)
    box.junction_c(60)
    second = box.start()
    box.wait_running(a)
    second.wait_log(f"process {a} (not run under gpuwatch) continued")
    assert second.stop() == 0


def test_a_recorded_pid_that_is_another_process_now_is_not_signalled(box: Box) -> None:
    a = box.sleeper()
    os.kill(a, signal.SIGSTOP)  # stopped by its user, say; the record (of a killed daemon) names an older process
    wait_for(lambda: real_state(a) == "T", "stopped")
    (box.tmp / "run").mkdir()
    box.record.write_text(json.dumps({"daemon_pid": 1, "stopped": [
        {"pid": a, "start_ticks": real_start_ticks(a) - 100, "gpu_ids": [SLOT], "since_unix": 0}]}))
    (box.tmp / "gpuwatch.toml").write_text(f'runtime_dir = "{box.tmp / "run"}"\n{toml(box.proc.root, "stop")}')
    done = box.restore()
    assert done.returncode == 0, done.stderr
    assert f"process {a} a daemon left stopped is gone (or its pid is another process now)" in done.stdout
    assert real_state(a) == "T" and not box.record.exists()


def test_reload_to_report_continues_them(box: Box) -> None:
    a = box.sleeper()
    box.junction_c(115)
    daemon = box.start()
    box.wait_stopped(a)
    daemon.write_config(toml(box.proc.root, "report"))
    daemon.signal(signal.SIGHUP)
    box.wait_running(a)  # still past crit
    daemon.wait_state(lambda d: unmanaged_doc(d)["on_hot"] == "report", "report published", WAIT_S)
    assert real_state(a) != "T" and not box.record.exists()
    assert daemon.stop() == 0
