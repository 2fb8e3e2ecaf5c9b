"""Users other than root on a machine with the installed unit and the shipped config (runtime_dir
unset): everyone can read the daemon's status; a configured trainer is paused only by root and the
members of `[control] admin_group` (the control socket takes every local user: the kernel's peer
credentials decide, docs/security.md)."""

from __future__ import annotations

import json

from tests.support.unit_rig import BASE_CONFIG, CONTAINER_MARKS, TRAINER_CONFIG, Unit

pytestmark = CONTAINER_MARKS


def test_status_by_a_user_reads_the_daemon_and_pause_needs_the_admin_group(unit: Unit) -> None:
    assert "runtime_dir" not in BASE_CONFIG
    # The control socket exists while trainers are supervised; bob is in group root.
    unit.reset(config=BASE_CONFIG + TRAINER_CONFIG + '\n[control]\nadmin_group = "root"\n')
    unit.start()

    status = unit.gpuwatch("status", "--json", user="alice")
    assert status.returncode == 0, status.stderr
    doc = json.loads(status.stdout)
    assert doc["source"] == "daemon" and len(doc["gpus"]) == 2
    assert "not running" not in unit.gpuwatch("status", user="alice").stdout

    refused = unit.gpuwatch("pause", "t1", user="alice")  # in no group but her own
    assert refused.returncode == 1
    assert "not permitted: t1 is a configured trainer" in refused.stderr, refused.stderr
    paused = unit.gpuwatch("pause", "t1", user="bob")  # in group root, the admin group
    assert paused.returncode == 0, paused.stderr
    resumed = unit.gpuwatch("resume", "t1")  # root
    assert resumed.returncode == 0, resumed.stderr
