"""procfs.Procfs.descendants: a real process tree walked by the kernel's lists of children, as psutil walks it by
parent pid, a child forked by a thread other than the main one included; a kernel without the lists says so."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import psutil

from gpuwatch.procfs import Procfs

# A leader with a child and a grandchild from its main thread, and a child forked by a second thread (listed under
# that thread's task/<tid>/children only).
TREE = """
import subprocess, threading, time
subprocess.Popen(["sh", "-c", "sleep 60 & wait"])
threading.Thread(target=lambda: subprocess.Popen(["sleep", "60"]), daemon=True).start()
time.sleep(60)
"""


def test_descendants_are_the_tree_psutil_walks() -> None:
    leader = subprocess.Popen([sys.executable, "-c", TREE])
    try:
        expected: set[int] = set()
        deadline = time.monotonic() + 30
        while len(expected) < 3 and time.monotonic() < deadline:  # sh, its sleep, the thread's sleep
            time.sleep(0.1)
            expected = {child.pid for child in psutil.Process(leader.pid).children(recursive=True)}
        assert len(expected) == 3
        found = Procfs("/proc").descendants(leader.pid)
        assert found is not None and set(found) == expected and len(found) == 3
        sh = next(child.pid for child in psutil.Process(leader.pid).children() if child.name() == "sh")
        assert found.index(sh) < found.index(psutil.Process(sh).children()[0].pid)  # parents first
    finally:
        for child in psutil.Process(leader.pid).children(recursive=True):
            child.kill()
        leader.kill()
        leader.wait()


def test_a_gone_process_has_none_and_a_kernel_without_lists_says_so(tmp_path: Path) -> None:
    real = Procfs("/proc")
    assert real.descendants(2**22 + 1) == []  # above pid_max's ceiling: never a process
    (tmp_path / "42" / "task" / "42").mkdir(parents=True)  # a tree without the children files
    assert Procfs(tmp_path).descendants(42) is None
