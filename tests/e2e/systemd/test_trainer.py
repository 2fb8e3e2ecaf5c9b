"""A supervised trainer inside the unit, running as its own user: the sandbox it really gets, and a
`systemctl stop` that lets it checkpoint before the fans go back and leaves no process behind."""

from __future__ import annotations

import json

from tests.support.unit_rig import BASE_CONFIG, CONTAINER_MARKS, TRAINER_CONFIG, Unit
from tests.support.waiting import wait_for

pytestmark = CONTAINER_MARKS


def test_stop_gives_the_trainer_its_grace_before_the_fans_go_back_and_the_sandbox_holds(unit: Unit) -> None:
    unit.reset(config=BASE_CONFIG + TRAINER_CONFIG)
    unit.box.sh("touch", "/tmp/container-marker")  # the container's /tmp, which the unit must not see
    unit.start()
    events = unit.box.path("/var/lib/gpuwatch/t1/events")
    probe_file = unit.box.path("/var/lib/gpuwatch/t1/probe.json")
    wait_for(lambda: probe_file.exists() and "started" in events.read_text(), "the trainer started", 30,
             ignore=(OSError,), detail=unit.journal)
    probe = json.loads(probe_file.read_text())
    trainer_uid = int(unit.box.sh("id", "-u", "trainer").stdout)
    assert probe["uid"] == trainer_uid
    # The hardening as the trainer meets it.
    assert probe["state_dir"] == "ok"  # StateDirectory=gpuwatch
    assert probe["rw_path"] == "ok"  # a ReadWritePaths= drop-in
    assert probe["outside_rw_paths"] == "EROFS"  # ProtectSystem=strict, although the trainer owns the dir
    assert probe["home"] == "EROFS"  # ProtectHome=read-only
    assert probe["tmp"] == "ok" and not probe["tmp_sees_container_marker"]  # PrivateTmp=yes
    assert not unit.box.path("/tmp/trainer-private").exists()
    # Its grandchild that ignores SIGTERM, in a session of its own, is up too.
    wait_for(lambda: sum("SIG_IGN" in cmd for uid, cmd in unit.box.processes().values() if uid == trainer_uid),
             "the trainer's grandchild")

    cursor = unit.cursor()
    done = unit.systemctl("stop", "gpuwatch", timeout=240)
    assert done.returncode == 0, done.stderr
    lines = events.read_text().splitlines()
    assert lines[:2] == ["started", "term"]  # SIGTERM from the supervisor, then its checkpoint time
    assert lines[2:] == ["checkpoint_done fans=1 1"]  # the fans were still gpuwatch's when it finished
    assert unit.handed_back() == ["2 2"]
    unit.logged(cursor, "SIGTERM")
    assert [cmd for uid, cmd in unit.box.processes().values() if uid == trainer_uid] == []  # KillMode=mixed
    assert unit.prop("ControlGroup") == ""
