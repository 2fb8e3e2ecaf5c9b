"""Issue 46 item 14: a non-root caller of the simulator gets no traceback. A real unprivileged user runs
`gpuwatch run --simulate` (its own per-user runtime directory, /tmp/gpuwatch-<uid>) and the clients
(`status`, `health`, `receipt`, `train`), with and without its daemon; what cannot work (another user's
directory, a config it cannot read) is one line and a non-zero exit. The CLI runs through tests/support/as_user.py,
which imports gpuwatch before dropping privileges (the test's interpreter may be one the user cannot read)."""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.paths import REPO
from tests.support.users import needs_root, unprivileged_user
from tests.support.waiting import wait_for

pytestmark = needs_root


def _argv(user: str, *args: str) -> list[str]:
    return [sys.executable, "-m", "tests.support.as_user", user, "cli", *args]


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("RUNTIME_DIRECTORY", "GPUWATCH_CONFIG")}
    return {**env, "PYTHONPATH": str(REPO), **extra}


def _cli(user: str, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(_argv(user, *args), cwd="/tmp", env=_env(**env), capture_output=True, text=True,
                          timeout=120)


def _no_traceback(done: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in done.stderr + done.stdout, done.stderr + done.stdout
    return done.stderr


@pytest.fixture
def user() -> Iterator[str]:
    with unprivileged_user() as name:
        try:
            yield name
        finally:
            for leftover in (_runtime(name), _simulator_runtime(name)):
                shutil.rmtree(leftover, ignore_errors=True)  # the next user may get the same uid


def _runtime(user: str) -> Path:
    """A non-root daemon's default runtime directory (config/runtime.py)."""
    return Path(f"/tmp/gpuwatch-{pwd.getpwnam(user).pw_uid}")


def _simulator_runtime(user: str) -> Path:
    """A non-root simulator's: beside the user's own, never in it (config/runtime.simulation_runtime_dir)."""
    return _runtime(user).with_name(_runtime(user).name + "-simulate")


def _config(tmp_path: Path) -> Path:
    """HTTP off: the default port is shared with whatever else runs on the machine."""
    config = tmp_path / "gpuwatch.toml"
    config.write_text("interval_s = 0.2\n[http]\nenabled = false\n")
    config.chmod(0o644)
    return config


def test_the_clients_without_a_daemon_say_so_in_one_line(user: str) -> None:
    for args in (["status"], ["health"], ["receipt", "7"]):
        done = _cli(user, *args)
        _no_traceback(done)
        assert done.returncode != 0 and len((done.stderr or done.stdout).strip().splitlines()) <= 3, done
    train = _cli(user, "train", "--", "true")
    assert train.returncode == 0 and "this run is not protected" in _no_traceback(train)


def test_a_non_root_simulator_runs_in_its_own_directory_and_its_clients_read_it(user: str, tmp_path: Path) -> None:
    config = _config(tmp_path)
    runtime = _simulator_runtime(user)  # with -c and no runtime_dir too: never where the user's real runs attach
    log = (tmp_path / "daemon.log").open("w")
    daemon = subprocess.Popen(_argv(user, "run", "--simulate", "-c", str(config)), cwd="/tmp", env=_env(),
                              stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: (runtime / "state.json").exists(), "the simulator's first state", 90,
                 detail=lambda: (tmp_path / "daemon.log").read_text())
        assert runtime.stat().st_uid == pwd.getpwnam(user).pw_uid and runtime.stat().st_mode & 0o022 == 0
        assert not _runtime(user).exists()
        for plain in ([], ["-c", str(config)]):  # found by itself, and said to be the simulator
            status = _cli(user, "status", "--color", "never", *plain)
            assert status.returncode == 0 and "daemon running" in status.stdout, _no_traceback(status) + status.stdout
            assert f"using the simulator's (gpuwatch run --simulate) in {runtime}" in status.stderr, status.stderr
        health = _cli(user, "health", "-c", str(config), RUNTIME_DIRECTORY=str(runtime))  # a node's gate: named only
        assert health.returncode == 0, _no_traceback(health) + health.stdout
        receipt = _cli(user, "receipt", "7", "-c", str(config))
        assert receipt.returncode == 1 and "was not seen on a GPU" in _no_traceback(receipt), receipt.stderr
        train = _cli(user, "train", "--", "sleep", "2")  # long enough for the handshake: `true` ends before it
        assert train.returncode == 0, _no_traceback(train) + train.stdout
        assert f"attached to the simulated gpuwatch daemon ({runtime}: no real daemon runs here)" in train.stderr
        second = _cli(user, "run", "--simulate", "-c", str(config))
        assert second.returncode != 0 and len(_no_traceback(second).strip().splitlines()) == 1, second.stderr
    finally:
        daemon.send_signal(signal.SIGTERM)
        try:
            assert daemon.wait(60) == 0, (tmp_path / "daemon.log").read_text()
        finally:
            if daemon.poll() is None:
                daemon.kill()
                daemon.wait()
            log.close()
    assert "Traceback" not in (tmp_path / "daemon.log").read_text()


def test_a_simulator_directory_another_user_made_is_refused_in_one_line(user: str, tmp_path: Path) -> None:
    with unprivileged_user() as other:
        runtime = _simulator_runtime(user)
        runtime.mkdir(mode=0o755)
        entry = pwd.getpwnam(other)
        os.chown(runtime, entry.pw_uid, entry.pw_gid)
        done = _cli(user, "run", "--simulate", "-c", str(_config(tmp_path)))
        assert done.returncode == 2 and len(_no_traceback(done).strip().splitlines()) == 1, done.stderr


def test_a_config_the_user_cannot_read_is_one_line(user: str, tmp_path: Path) -> None:
    secret = tmp_path / "root-only.toml"
    secret.write_text("interval_s = 1\n")
    secret.chmod(0o600)
    for args in (["run", "--simulate"], ["status"], ["health"], ["receipt", "7"]):
        done = _cli(user, *args, "-c", str(secret))
        assert done.returncode != 0 and "Permission denied" in _no_traceback(done), (args, done.stderr)
