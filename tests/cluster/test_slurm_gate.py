"""`gpuwatch health --slurm` (cli/health/slurm.py): N unhealthy checks drain, M healthy resume, never an admin's
drain."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuwatch.cli.health.slurm import Checks, Node, decide, parse_node, read_checks, write_checks
from tests.support.tmpfs import fill, tmpfs

OURS = Node(drained=True, reason="gpuwatch:G006 0000:03:00.0 fan failsafe")
ADMIN = Node(drained=True, reason="maint: new PSU")
UP = Node(drained=False, reason=None)

# (checks before, healthy now, node, checks after, action) with drain_after 2, resume_after 3
TABLE = [
    (Checks(), False, UP, Checks(unhealthy=1), None),
    (Checks(unhealthy=1), False, UP, Checks(unhealthy=2), "drain"),
    (Checks(unhealthy=5), False, UP, Checks(unhealthy=6), "drain"),  # an admin resumed it, still unhealthy
    (Checks(unhealthy=2), False, OURS, Checks(unhealthy=3), None),  # drained already
    (Checks(unhealthy=2), False, ADMIN, Checks(unhealthy=3), None),  # an admin's drain: its reason stays
    (Checks(unhealthy=4), True, OURS, Checks(healthy=1), None),  # one healthy check resets the count
    (Checks(healthy=2), True, OURS, Checks(healthy=3), "resume"),
    (Checks(healthy=9), True, ADMIN, Checks(healthy=10), None),  # never resume an admin's drain
    (Checks(healthy=9), True, UP, Checks(healthy=10), None),
    (Checks(healthy=2), False, OURS, Checks(unhealthy=1), None),
]


@pytest.mark.parametrize(("before", "healthy", "node", "after", "action"), TABLE)
def test_drain_and_resume(before: Checks, healthy: bool, node: Node, after: Checks, action: str | None) -> None:
    assert decide(before, healthy, node, drain_after=2, resume_after=3) == (after, action)


# What Slurm 22.05's `scontrol show node` prints (the lines that matter, as printed).
SHOW_DRAINED = """NodeName=node1 Arch=x86_64 CoresPerSocket=1
   CPUAlloc=0 CPUEfctv=2 CPUTot=2 CPULoad=0.52
   State=IDLE+DRAIN ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A
   Partitions=debug
   Reason=gpuwatch:G006 0000:28:00.0 fan failsafe: no temperature for 3 tick(s) [root@2026-11-27T00:10:02]
"""
SHOW_IDLE = """NodeName=node1 Arch=x86_64 CoresPerSocket=1
   State=IDLE ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A
"""


@pytest.mark.parametrize(("text", "node"), [
    (SHOW_DRAINED, Node(True, "gpuwatch:G006 0000:28:00.0 fan failsafe: no temperature for 3 tick(s)")),
    (SHOW_DRAINED.replace("IDLE+DRAIN", "MIXED+DRAIN").replace("gpuwatch:G006", "maint G006"),
     Node(True, "maint G006 0000:28:00.0 fan failsafe: no temperature for 3 tick(s)")),
    (SHOW_DRAINED.replace("IDLE+DRAIN", "DRAINED"), Node(True, "gpuwatch:G006 0000:28:00.0 fan failsafe: no "
                                                                "temperature for 3 tick(s)")),
    (SHOW_IDLE, Node(False, None)),
    ("", Node(False, None)),
])
def test_parse_node(text: str, node: Node) -> None:
    assert parse_node(text) == node


def test_the_count_survives_in_its_file_and_garbage_starts_it_again(tmp_path: Path) -> None:
    path = tmp_path / "run" / "slurm-checks.json"
    assert read_checks(path) == Checks()
    write_checks(path, Checks(unhealthy=3))
    assert read_checks(path) == Checks(unhealthy=3)
    path.write_text("[1, 2")
    assert read_checks(path) == Checks()


def test_the_count_is_rewritten_in_place_in_a_full_directory(tmp_path: Path) -> None:
    """Issue 46: once the record exists, a full tmpfs still takes the next count (same size, in place); a record
    that cannot be created raises OSError, which the gate turns into a drain at once (tests/cluster/test_slurm_e2e.py
    on a real Slurm)."""
    with tmpfs(tmp_path / "run", size="256k") as run:
        path = run / "slurm-checks.json"
        path.write_text('{"unhealthy": 1}')  # an older gpuwatch's shorter record
        fill(run)
        for count in range(2, 6):
            write_checks(path, Checks(unhealthy=count))
            assert read_checks(path) == Checks(unhealthy=count)
        with pytest.raises(OSError):
            write_checks(run / "new-checks.json", Checks(unhealthy=1))
        assert sorted(p.name for p in run.iterdir()) == ["filler", "slurm-checks.json"]  # no temporary left
