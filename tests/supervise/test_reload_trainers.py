"""A reload that changes [[trainer]] (issue 32 point 9): trainers are added and removed, a changed one restarts
alone, the others run on untouched. The real daemon loop (in this process) with real trainer children."""

from __future__ import annotations

import os
import pwd
import sys
from pathlib import Path
from typing import Any

import psutil

from gpuwatch.config.file import parse_config
from gpuwatch.config.trainer import TrainerConfig
from gpuwatch.daemon.loop import Daemon
from gpuwatch.daemon.reload import plan_reload
from gpuwatch.sim.tree import FakeSysfsTree
from gpuwatch.supervise.reconcile import changed_keys, needs_restart
from tests.support.trees import capture
from tests.support.waiting import wait_for

# Says which value of V it was started with, then runs until stopped.
SLEEPER = "import os, time; open(os.environ['OUT'], 'w').write(os.environ.get('V', '')); time.sleep(600)"


def _trainer(tmp: Path, name: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "command": [sys.executable, "-c", SLEEPER], "user": pwd.getpwuid(os.geteuid()).pw_name,
            "grace_s": 5, "env": {"OUT": str(tmp / f"{name}.out"), **extra.pop("env", {})}, **extra}


def _running(daemon: Daemon, names: list[str], not_pid: int | None = None) -> dict[str, int] | None:
    """One tick; each trainer's pid once exactly ``names`` run (and none has pid ``not_pid``), else None."""
    state = daemon.tick()
    pids = {t.name: t.pid for t in state.trainers if t.phase.value == "running" and t.pid}
    if [t.name for t in state.trainers] != names or len(pids) != len(names) or not_pid in pids.values():
        return None
    return {name: pid for name, pid in pids.items() if pid is not None}


def test_a_reload_adds_removes_and_restarts_only_the_changed_trainer(tmp_path: Path,
                                                                     fake_sysfs: FakeSysfsTree) -> None:
    fake_sysfs.add_capture(capture("navi10-rx5700xt-sapphire"))
    base = {"sysfs_root": str(fake_sysfs.root), "runtime_dir": str(tmp_path / "run"), "interval_s": 0.1,
            "fan": {"mode": "monitor-only"}, "http": {"enabled": False}}
    before = base | {"trainer": [_trainer(tmp_path, "keep"), _trainer(tmp_path, "change", env={"V": "1"}),
                                 _trainer(tmp_path, "remove")]}
    after = base | {"trainer": [_trainer(tmp_path, "keep"), _trainer(tmp_path, "change", env={"V": "2"}),
                                _trainer(tmp_path, "add")]}
    daemon = Daemon(parse_config(before), load=lambda: parse_config(after))
    try:
        old = wait_for(lambda: _running(daemon, ["keep", "change", "remove"]), "three trainers running")
        wait_for(lambda: (tmp_path / "change.out").exists() and (tmp_path / "change.out").read_text() == "1",
                 "the changed trainer's first run")
        removed = psutil.Process(old["remove"])
        assert daemon.reload()
        new = wait_for(lambda: _running(daemon, ["keep", "change", "add"], not_pid=old["change"]),
                       "the reloaded trainers running", 30)
        assert new["keep"] == old["keep"]  # untouched
        assert psutil.Process(old["keep"]).is_running()
        wait_for(lambda: (tmp_path / "change.out").read_text() == "2", "the changed trainer's new environment")
        wait_for(lambda: not removed.is_running() or removed.status() == psutil.STATUS_ZOMBIE,
                 "the removed trainer to be gone", 15, ignore=(psutil.Error,))
        restarted = {t.name: dict(t.restarts_by_reason) for t in daemon.tick().trainers}
        assert restarted == {"keep": {}, "change": {"restart": 1}, "add": {}}
    finally:
        daemon.shutdown()



def test_a_reload_adds_the_first_trainer_to_a_daemon_started_with_none(tmp_path: Path,
                                                                      fake_sysfs: FakeSysfsTree) -> None:
    fake_sysfs.add_capture(capture("navi10-rx5700xt-sapphire"))
    base = {"sysfs_root": str(fake_sysfs.root), "runtime_dir": str(tmp_path / "run"), "interval_s": 0.1,
            "fan": {"mode": "monitor-only"}, "http": {"enabled": False}}
    daemon = Daemon(parse_config(base), load=lambda: parse_config(base | {"trainer": [_trainer(tmp_path, "first")]}))
    try:
        assert daemon.tick().trainers == ()
        assert daemon.reload()
        wait_for(lambda: _running(daemon, ["first"]), "the first trainer running after the reload", 30)
    finally:
        daemon.shutdown()

def test_trainer_is_a_live_key_and_only_process_settings_restart_a_run(tmp_path: Path) -> None:
    running = parse_config({"trainer": [{"name": "a", "command": ["x"]}]})
    plan = plan_reload(running, parse_config({"trainer": [{"name": "a", "command": ["y"]}]}))
    assert plan.applied == ("trainer",) and plan.needs_restart == ()
    old = TrainerConfig(name="a", command=["x"])
    assert not needs_restart(changed_keys(old, old.model_copy(update={"junction_limit_c": 90.0, "grace_s": 3.0})))
    assert needs_restart(changed_keys(old, old.model_copy(update={"env": {"A": "1"}})))
    assert needs_restart(changed_keys(old, old.model_copy(update={"command": ["y"]})))
