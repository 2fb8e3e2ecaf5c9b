"""Who may do what on the control socket: the one rule (supervise/access.py), as a table."""

from __future__ import annotations

import pytest

from gpuwatch.supervise.access import Peer, Target, parse_groups, privileged, redacted, refusal

DAEMON_UID = 998
ADMINS = 1500
ALICE = Peer(pid=10, uid=1001, gid=1001)
BOB = Peer(pid=11, uid=1002, gid=1002, groups=frozenset({27, ADMINS}))
ROOT = Peer(pid=12, uid=0, gid=0)
ALICES_RUN = Target("a", attached=True, uid=1001, user="alice")
BOBS_RUN = Target("b", attached=True, uid=1002, user="bob")
CONFIGURED = Target("resnet", attached=False, uid=None)


@pytest.mark.parametrize(("peer", "admin_gid", "expected"), [
    (ROOT, None, True),
    (Peer(1, DAEMON_UID, DAEMON_UID), None, True),  # the daemon's own user
    (ALICE, None, False),
    (BOB, None, False),  # no admin group configured
    (BOB, ADMINS, True),  # a supplementary group
    (Peer(1, 1003, ADMINS), ADMINS, True),  # the primary group
    (ALICE, ADMINS, False),
])
def test_privileged(peer: Peer, admin_gid: int | None, expected: bool) -> None:
    assert privileged(peer, DAEMON_UID, admin_gid) is expected


@pytest.mark.parametrize(("verb", "peer", "is_privileged", "targets", "expected"), [
    ("pause", ALICE, False, [ALICES_RUN], None),
    ("resume", ALICE, False, [ALICES_RUN], None),
    ("stop", ALICE, False, [ALICES_RUN], None),
    ("pause", ALICE, False, [BOBS_RUN], "not permitted: run b belongs to bob"),
    ("stop", ALICE, False, [ALICES_RUN, BOBS_RUN], "not permitted: run b belongs to bob"),
    ("pause", ALICE, False, [CONFIGURED], "not permitted: resnet is a configured trainer (root or the admin group "
                                           "only)"),
    ("restart", ALICE, False, [ALICES_RUN], "not permitted: restart needs root or the daemon's admin group"),
    ("simulate-reset", ALICE, False, [], "not permitted: simulate-reset needs root or the daemon's admin group"),
    ("status", ALICE, False, [], None),
    ("attach", ALICE, False, [], None),
    ("pause", ROOT, True, [BOBS_RUN, CONFIGURED], None),
    ("restart", BOB, True, [CONFIGURED], None),
])
def test_refusal(verb: str, peer: Peer, is_privileged: bool, targets: list[Target], expected: str | None) -> None:
    assert refusal(verb, peer, is_privileged, targets) == expected


def test_groups_from_proc_status() -> None:
    status = "Name:\tpython\nUid:\t1001\t1001\t1001\t1001\nGroups:\t4 24 27 1500 \nNSpid:\t7\n"
    assert parse_groups(status) == frozenset({4, 24, 27, 1500})
    assert parse_groups("Groups:\t\n") == frozenset()
    assert parse_groups("Name:\tx\n") == frozenset()
    assert parse_groups("Groups:\t4 x² 27\n") == frozenset({4, 27})  # garbage is no group


def test_only_the_unprivileged_get_the_status_redacted() -> None:
    assert redacted("status", is_privileged=False) and not redacted("status", is_privileged=True)
