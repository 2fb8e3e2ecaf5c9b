"""An attached run's pid checked against /proc (supervise/peers.py), on a fake tree with the kernel's layout."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuwatch.procfs import Procfs
from gpuwatch.sim.proctree import FakeProcTree
from gpuwatch.supervise.access import Peer
from gpuwatch.supervise.peers import run_refusal, with_groups

ALICE = Peer(pid=100, uid=1001, gid=1001)  # her shell; her wrapper 200 and its torchrun 300 and rank 301


@pytest.fixture
def procfs(tmp_path: Path) -> Procfs:
    tree = FakeProcTree(tmp_path / "proc")
    tree.add_process(100, "bash", ("bash",), ppid=50, uid=1001)
    tree.add_process(200, "gpuwatch", ("gpuwatch", "train"), ppid=100, uid=1001)
    tree.add_process(300, "torchrun", ("torchrun", "train.py"), ppid=200, uid=1001)
    tree.add_process(301, "python3", ("python3", "train.py"), ppid=300, uid=1001)
    tree.add_process(400, "python3", ("python3", "bobs.py"), ppid=1, uid=1002)  # Bob's
    tree.add_process(500, "python3", ("python3", "orphan.py"), ppid=1, uid=1001)  # hers, not below her shell
    (tmp_path / "proc" / "100" / "status").write_text(
        (tmp_path / "proc" / "100" / "status").read_text() + "Groups:\t27 1500\n")
    return Procfs(tmp_path / "proc")


@pytest.mark.parametrize(("peer", "pid", "expected"), [
    (ALICE, 100, None),  # the peer itself
    (ALICE, 301, None),  # a descendant, three levels down
    (Peer(200, 1001, 1001), 300, None),  # the wrapper's own child
    (ALICE, 400, "pid 400 is not yours (uid 1002)"),
    (ALICE, 500, "pid 500 is not the caller's process or a descendant of it"),
    (Peer(300, 1001, 1001), 200, "pid 200 is not the caller's process or a descendant of it"),  # a parent
    (ALICE, 999, "no process 999"),
    (ALICE, 0, "pid 0 is not a process"),
    (Peer(100, 0, 0), 400, "pid 400 is not the caller's process or a descendant of it"),  # root: not its child
])
def test_run_refusal(procfs: Procfs, peer: Peer, pid: int, expected: str | None) -> None:
    assert run_refusal(procfs, peer, pid) == expected


def test_root_may_attach_another_users_process_below_it(tmp_path: Path) -> None:
    tree = FakeProcTree(tmp_path / "proc")
    tree.add_process(10, "sudo", ("sudo",), ppid=1, uid=0)
    tree.add_process(11, "python3", ("python3", "train.py"), ppid=10, uid=1001)
    assert run_refusal(Procfs(tmp_path / "proc"), Peer(10, 0, 0), 11) is None


def test_the_peers_groups_come_from_its_status(procfs: Procfs) -> None:
    assert with_groups(procfs, ALICE).groups == frozenset({27, 1500})
    assert with_groups(procfs, Peer(999, 1, 1)).groups == frozenset()  # gone: no groups, no error
