"""Issue 46 items 3, 4 and 12: the runtime directory, the state file and the restore records.

A daemon refuses a runtime directory another user made or can write (one line, exit 2), so nothing in it can be
a link to a root-only file; clients trust a state file or control socket only in a directory root or the caller
owns that nobody else can write; `gpuwatch restore` writes only below the sysfs root, and fails, naming the file,
when a restore record cannot be read. Real users, a real simulated daemon, the real CLI."""

from __future__ import annotations

import json
import os
import pwd
import signal
import subprocess
from pathlib import Path

import pytest

from tests.support.processes import Processes
from tests.support.stack import GPUWATCH
from tests.support.users import needs_root, run_as, unprivileged_user
from tests.support.waiting import wait_for

pytestmark = needs_root
ORIGINAL_UW = 150_000_000


def _config(tmp: Path, runtime: Path, hot: bool = False) -> Path:
    config = tmp / "gpuwatch.toml"
    scale = "time_scale = 50.0\ncooling_scale = 0.4\n" if hot else ""
    config.write_text(f'runtime_dir = "{runtime}"\ninterval_s = 0.05\n[http]\nenabled = false\n'
                      f'[simulate]\nenabled = true\ntree_dir = "{tmp / "tree"}"\n{scale}')
    return config


def _cli(*args: str, **kwargs: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*GPUWATCH, *args], capture_output=True, text=True, timeout=120, **kwargs)  # type: ignore[call-overload, no-any-return]


@pytest.fixture
def secret(root_only: Path) -> Path:
    return root_only / "shadow"


def _made_by(user: str, directory: Path) -> None:
    """``directory`` as ``user`` would have made it first (mode 0755, theirs): as ``/tmp/gpuwatch-<uid>`` is
    made by whoever comes first. (Made by root and given away: the user may not write in the test's root-owned
    parent, and a runtime directory inside a user's own directory is refused for that alone.)"""
    directory.mkdir(mode=0o755)
    entry = pwd.getpwnam(user)
    os.chown(directory, entry.pw_uid, entry.pw_gid)


def _one_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    return lines[0]


def test_a_runtime_dir_another_user_made_is_refused_and_its_lock_link_not_followed(tmp_path: Path,
                                                                                     secret: Path) -> None:
    with unprivileged_user() as user:
        runtime = tmp_path / "run"
        _made_by(user, runtime)
        assert run_as(user, ["ln", "-s", str(secret), str(runtime / "gpuwatch.lock")]).returncode == 0
        done = _cli("run", "-c", str(_config(tmp_path, runtime)))
        assert done.returncode == 2
        line = _one_line(done.stderr)
        assert "refusing the runtime directory" in line and f"owned by uid {pwd.getpwnam(user).pw_uid}" in line
    assert secret.read_text() == "root's\n"


def test_a_root_runtime_dir_others_can_write_is_refused(tmp_path: Path) -> None:
    runtime = tmp_path / "run"
    runtime.mkdir()
    runtime.chmod(0o777)
    done = _cli("run", "-c", str(_config(tmp_path, runtime)))
    assert done.returncode == 2 and "writable by other users (mode 0777)" in _one_line(done.stderr)


def test_clients_refuse_a_state_file_and_socket_in_another_users_directory(tmp_path: Path) -> None:
    with unprivileged_user() as user:
        runtime = tmp_path / "run"
        _made_by(user, runtime)
        forged = '{"daemon": {"pid": 1}}'
        assert run_as(user, ["sh", "-c", f"printf '%s' '{forged}' > {runtime}/state.json"]).returncode == 0
        config = _config(tmp_path, runtime)
        status = _cli("status", "-c", str(config))
        assert f"not trusting {runtime}" in status.stderr and "Traceback" not in status.stderr
        pause = _cli("pause", "-c", str(config), "t")
        assert pause.returncode != 0 and f"not trusting {runtime}" in pause.stderr
        health = _cli("health", "-c", str(config))
        assert f"not trusting {runtime}" in health.stderr and "Traceback" not in health.stderr


def test_a_fifo_as_state_last_does_not_block_the_start(tmp_path: Path, processes: Processes) -> None:
    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o755)
    os.mkfifo(runtime / "state.last.json")
    child = processes.start("daemon", [*GPUWATCH, "run", "-c", str(_config(tmp_path, runtime))])
    wait_for((runtime / "state.json").exists, "the daemon's first state file", 60, detail=child.tail)


def _lowered_then_killed(tmp_path: Path, processes: Processes) -> tuple[Path, Path]:
    """A daemon that lowered the simulated card's cap, then SIGKILLed: (config, cap file); its records stay."""
    runtime = tmp_path / "run"
    config = _config(tmp_path, runtime, hot=True)
    cap = tmp_path / "tree/class/hwmon/hwmon1/power1_cap"
    child = processes.start("daemon", [*GPUWATCH, "run", "-c", str(config)])
    wait_for(lambda: int(cap.read_text().strip() or 0) < ORIGINAL_UW, "the governor to lower the cap", 60,
             ignore=(OSError, ValueError), detail=child.tail)
    child.process.send_signal(signal.SIGKILL)
    child.process.wait(30)
    return config, cap


@pytest.mark.parametrize("broken", ["", '{"0000:03:00.0": {"backe', "[1, 2]"], ids=["empty", "truncated", "list"])
def test_restore_fails_naming_a_record_it_cannot_read(tmp_path: Path, processes: Processes, broken: str) -> None:
    config, cap = _lowered_then_killed(tmp_path, processes)
    record = tmp_path / "run/power-restore.json"
    record.write_text(broken)
    done = _cli("restore", "-c", str(config))
    assert done.returncode != 0, done.stdout
    assert f"{record}: unreadable" in done.stderr and "Traceback" not in done.stderr
    assert record.exists()  # kept for a later, fixed try


def test_restore_never_writes_outside_the_sysfs_root(tmp_path: Path, processes: Processes, secret: Path) -> None:
    config, _ = _lowered_then_killed(tmp_path, processes)
    fans = tmp_path / "run/fan-restore.json"
    records = json.loads(fans.read_text())
    depth = len((tmp_path / "tree").parts)
    for record in records.values():
        record["path"] = "/".join([".."] * depth) + str(secret)
        for key in ("zero_rpm_path",):
            if key in record:
                record[key] = record["path"]
    fans.write_text(json.dumps(records))
    done = _cli("restore", "-c", str(config))
    assert done.returncode != 0
    assert "outside the sysfs root" in done.stderr and "Traceback" not in done.stderr
    assert secret.read_text() == "root's\n"


def test_restore_refuses_records_in_another_users_directory(tmp_path: Path, secret: Path) -> None:
    """Records another user wrote would choose what root writes to the cards: `gpuwatch restore` refuses."""
    with unprivileged_user() as user:
        runtime = tmp_path / "run"
        _made_by(user, runtime)
        forged = '{"0000:03:00.0": {"backend": "hwmon", "slot": "0000:03:00.0", "cap_uw": 1}}'
        assert run_as(user, ["sh", "-c", f"printf '%s' '{forged}' > {runtime}/power-restore.json"]).returncode == 0
        done = _cli("restore", "-c", str(_config(tmp_path, runtime)))
        assert done.returncode == 2
        assert f"not trusting {runtime}" in _one_line(done.stderr)
