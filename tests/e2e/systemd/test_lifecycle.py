"""The unit under a real systemd: start (READY=1, STATUS=, fans taken over), reload with a valid and an
invalid config, a config error (exit 2, no restart)."""

from __future__ import annotations

import json

from tests.support.unit_rig import BASE_CONFIG, CONFIG, CONTAINER_MARKS, Unit
from tests.support.waiting import wait_for

pytestmark = CONTAINER_MARKS


def test_start_reports_ready_and_status_and_takes_every_fan(unit: Unit) -> None:
    unit.reset()
    assert unit.fans() == ["2", "2"]  # firmware auto, as the cards boot
    cursor = unit.cursor()
    unit.start()  # Type=notify: returns once READY=1 came, within TimeoutStartSec
    assert unit.prop("TimeoutStartUSec") == "1min"
    assert (unit.prop("ActiveState"), unit.prop("SubState")) == ("active", "running")
    assert unit.prop("StatusText").startswith("2 GPUs, hottest ")
    assert unit.fans() == ["1", "1"]
    assert all(int(pwm) >= 127 for pwm in unit.fans("pwm1"))  # at least the 50 % floor
    assert unit.recorded_modes() == [2, 2]
    assert unit.box.path("/run/gpuwatch/state.json").exists()
    # Configured values: the container has no CAP_SYS_RESOURCE to grant them above its own hard
    # limits, so /proc/<pid>/limits shows less there; systemd's view is the contract.
    assert unit.prop("LimitNOFILE") == "65536"
    assert unit.prop("LimitMEMLOCK") == "infinity"
    assert (unit.prop("WatchdogUSec"), unit.prop("RestartUSec"), unit.prop("KillMode")) == ("30s", "5s", "mixed")
    healthz = unit.box.sh("python3", "-c", "import urllib.request as u; "
                          "print(u.urlopen('http://127.0.0.1:9840/healthz', timeout=10).status)")
    assert healthz.stdout.strip() == "200"
    journal = unit.logged(cursor, "took the fan")
    assert "Traceback" not in journal


def test_reload_applies_a_valid_config_and_keeps_running_on_an_invalid_one(unit: Unit) -> None:
    unit.reset()
    unit.start()
    pid = unit.main_pid()
    state = unit.box.path("/run/gpuwatch/state.json")

    unit.box.write(CONFIG, BASE_CONFIG.replace("interval_s = 1.0", "interval_s = 0.5"))
    cursor = unit.cursor()
    done = unit.systemctl("reload", "gpuwatch")
    assert done.returncode == 0, done.stderr  # the unit's ExecReload works without procps
    unit.logged(cursor, "config reloaded", "applied interval_s")
    wait_for(lambda: json.loads(state.read_text())["daemon"]["interval_s"] == 0.5, "interval_s 0.5 published",
             ignore=(OSError, ValueError))
    assert unit.main_pid() == pid

    unit.box.write(CONFIG, BASE_CONFIG + "\nbogus_key = 1\n")
    cursor = unit.cursor()
    done = unit.systemctl("reload", "gpuwatch")
    assert done.returncode == 0, done.stderr
    journal = unit.logged(cursor, "config reload rejected", "bogus_key")
    assert "Traceback" not in journal
    assert unit.prop("ActiveState") == "active" and unit.main_pid() == pid
    assert unit.fans() == ["1", "1"]


def test_config_error_exits_2_and_is_not_restarted(unit: Unit) -> None:
    unit.reset(config=BASE_CONFIG.replace("interval_s = 1.0", "interval_s = -5"))
    assert "2" in unit.prop("RestartPreventExitStatus").split()
    cursor = unit.cursor()
    assert unit.systemctl("start", "gpuwatch").returncode != 0
    # A restart would pass through "activating (auto-restart)"; "failed" with no restart counted is final.
    wait_for(lambda: unit.prop("ActiveState") == "failed", "the unit failed", 30, interval_s=0.2)
    assert unit.prop("SubState") == "failed"
    assert unit.prop("Result") == "exit-code"
    assert unit.prop("ExecMainStatus") == "2"
    assert unit.prop("NRestarts") == "0"
    journal = unit.logged(cursor, "invalid configuration", "interval_s")
    assert "Traceback" not in journal
    assert unit.fans() == ["2", "2"]  # never touched

