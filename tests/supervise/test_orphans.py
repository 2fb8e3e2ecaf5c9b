"""supervise/orphans.py: finding a run's processes where orphans go (the unit's cgroup, or the daemon's
descendants), by the run mark in their environment; real child processes, a fake cgroup directory."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from gpuwatch.procfs import Procfs
from gpuwatch.supervise import orphans
from gpuwatch.supervise.orphans import RUN_ENV, candidates, descendant_pids, of_run, unified_path, unit_cgroup
from tests.support.waiting import wait_for


@pytest.mark.parametrize(
    "text, path",
    [
        ("0::/system.slice/gpuwatch.service\n", "/system.slice/gpuwatch.service"),  # cgroup v2
        ("12:pids:/system.slice/x.service\n1:name=systemd:/system.slice/gpuwatch.service\n0::/\n",
         "/system.slice/gpuwatch.service"),  # hybrid: the v2 root, the unit in name=systemd
        ("4:memory:/process_api/34960f\n0::/\n", None),  # a container's root: no unit
        ("", None),
    ],
)
def test_unified_path(text: str, path: str | None) -> None:
    assert unified_path(text) == path


def _fake(tmp_path: Path, own: str) -> tuple[Path, Path]:
    proc, cgroupfs = tmp_path / "proc", tmp_path / "cgroup"
    (proc / "self").mkdir(parents=True)
    (proc / "self/cgroup").write_text(f"0::{own}\n")
    unit = cgroupfs / own.lstrip("/")
    unit.mkdir(parents=True)
    (unit / "cgroup.procs").write_text("")
    return proc, cgroupfs


@pytest.mark.parametrize(
    "environ, own, found",
    [
        ({"INVOCATION_ID": "abc"}, "/system.slice/gpuwatch.service", True),
        ({}, "/system.slice/gpuwatch.service", False),  # not started by systemd as a unit
        ({"INVOCATION_ID": "abc"}, "/user.slice/user-1000.slice/session-3.scope", False),  # a login session
    ],
)
def test_unit_cgroup_only_for_a_service(tmp_path: Path, environ: dict[str, str], own: str, found: bool) -> None:
    proc, cgroupfs = _fake(tmp_path, own)
    got = unit_cgroup(environ, proc, cgroupfs)
    assert got == (cgroupfs / own.lstrip("/") if found else None)


def test_members_of_a_run_in_the_cgroup(tmp_path: Path) -> None:
    proc, cgroupfs = _fake(tmp_path, "/system.slice/gpuwatch.service")
    unit = unit_cgroup({"INVOCATION_ID": "x"}, proc, cgroupfs)
    assert unit is not None
    sleep = [sys.executable, "-c", "import time; time.sleep(60)"]
    children = [subprocess.Popen(sleep, env={**os.environ, RUN_ENV: mark}) for mark in ("d1/t/1", "d1/t/2")]
    stranger = subprocess.Popen(sleep)
    try:
        (unit / "cgroup.procs").write_text("".join(f"{p.pid}\n" for p in [*children, stranger]) + f"{os.getpid()}\n")
        members = candidates(unit)
        assert {p.pid for p in members} == {p.pid for p in [*children, stranger]}  # never the daemon itself
        assert [p.pid for p in of_run(members, lambda mark: mark == "d1/t/2")] == [children[1].pid]
        assert {p.pid for p in of_run(members, lambda mark: mark.startswith("d1/"))} == {p.pid for p in children}
    finally:
        for child in [*children, stranger]:
            child.kill()
            child.wait()


def test_without_a_cgroup_the_candidates_are_our_descendants() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert child.pid in {p.pid for p in candidates(None)}
        assert psutil.Process().pid not in {p.pid for p in candidates(None)}
    finally:
        child.kill()
        child.wait()


@pytest.mark.parametrize("lists", [True, False])
def test_descendant_pids_with_and_without_the_kernels_children_lists(
        lists: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same tree from the kernel's lists of children or, on a kernel without them (a /proc tree that has
    none), from psutil's walk by parent pid."""
    if not lists:
        monkeypatch.setattr(orphans, "_PROC", Procfs(tmp_path))
    leader = subprocess.Popen(["sh", "-c", "sleep 60 & sleep 60 & wait"])
    try:
        wait_for(lambda: len(descendant_pids(psutil.Process(leader.pid))) == 2, "both sleeps started")
        walked = descendant_pids(psutil.Process(leader.pid))
        assert sorted(walked) == sorted(c.pid for c in psutil.Process(leader.pid).children(recursive=True))
        assert len(walked) == 2
    finally:
        for child in psutil.Process(leader.pid).children(recursive=True):
            child.kill()
        leader.kill()
        leader.wait()


DOUBLE_FORK = """
import os, sys, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        print(os.getpid(), flush=True)
        time.sleep(0.2)
        os._exit(0)
    os._exit(0)
os.wait()
"""


def test_a_subreaper_adopts_the_orphan_and_reaps_it() -> None:
    from gpuwatch.supervise.orphans import become_subreaper, reap_adopted
    from tests.support.waiting import wait_for

    assert become_subreaper()
    try:
        child = subprocess.Popen([sys.executable, "-c", DOUBLE_FORK], stdout=subprocess.PIPE)
        assert child.stdout is not None
        grandchild = int(child.stdout.readline())
        child.wait()
        child.stdout.close()
        assert psutil.Process(grandchild).ppid() == os.getpid()  # adopted by us, not by init
        wait_for(lambda: psutil.Process(grandchild).status() == psutil.STATUS_ZOMBIE, "the orphan to exit")
        reap_adopted(keep=set())
        assert not psutil.pid_exists(grandchild)
    finally:
        become_subreaper(False)
