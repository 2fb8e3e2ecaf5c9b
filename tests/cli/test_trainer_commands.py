"""Issue 32 point 8, as a user finds out why a trainer failed: its log path in `status`, `gpuwatch logs NAME`
(-n, -f; no daemon needed) and `gpuwatch stop NAME` (graceful, and it stays stopped until `restart`), with a
real daemon, a real trainer and the real command."""

from __future__ import annotations

import json
import os
import pwd
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

from gpuwatch.sim.tree import FakeSysfsTree
from tests.support.cli import GPUWATCH, gpuwatch, gpuwatch_process
from tests.support.trees import capture
from tests.support.waiting import wait_for

TRAINER = """
import signal, sys, time
def on_term(signum, frame):
    print("checkpoint saved at SIGTERM", flush=True)
    open(sys.argv[1], "w").write("saved")
    sys.exit(0)
signal.signal(signal.SIGTERM, on_term)
n = 0
while True:
    n += 1
    print(f"step {n}", flush=True)
    time.sleep(0.05)
"""


def _config(tmp_path: Path, **trainer: str) -> Path:
    tree = FakeSysfsTree(tmp_path / "sys")
    tree.add_capture(capture("navi10-rx5700xt-sapphire"))
    script = tmp_path / "train.py"
    script.write_text(TRAINER)
    extra = "".join(f'{key} = "{value}"\n' for key, value in trainer.items())
    config = tmp_path / "gpuwatch.toml"
    config.write_text(
        f'sysfs_root = "{tree.root}"\nruntime_dir = "{tmp_path / "run"}"\ninterval_s = 0.2\n'
        '[http]\nenabled = false\n[fan]\nmode = "monitor-only"\n'
        f'[[trainer]]\nname = "t"\ncommand = ["{sys.executable}", "{script}", "{tmp_path / "checkpoint"}"]\n'
        f'cwd = "{tmp_path}"\nuser = "{pwd.getpwuid(os.geteuid()).pw_name}"\ngrace_s = 20\n{extra}'
    )
    return config


def _trainer(config: Path) -> dict[str, Any]:
    doc = json.loads(gpuwatch("status", "--json", "-c", str(config)).stdout)
    assert doc["daemon"] is not None, "the daemon is gone"
    trainer: dict[str, Any] = doc["trainers"][0]
    trainer["ticks_total"] = doc["daemon"]["ticks_total"]
    return trainer


@pytest.fixture
def daemon(tmp_path: Path) -> Any:
    config = _config(tmp_path)
    proc = subprocess.Popen([GPUWATCH, "run", "-c", str(config)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: (tmp_path / "run/state.json").exists() and proc.poll() is None and
                 _trainer(config)["phase"] == "running", "the trainer to run", 60, ignore=(ValueError, KeyError))
        yield config
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_status_names_the_log_and_logs_prints_its_last_lines(daemon: Path, tmp_path: Path) -> None:
    log = tmp_path / "run/trainers/t/t.log"
    wait_for(lambda: log.exists() and log.read_text().count("step ") >= 5, "five steps in the log", 30)
    hint = f"  log    {log}  (gpuwatch logs -c {daemon} t)"  # the status's own -c: the hint works as typed
    assert hint in gpuwatch("status", "-c", str(daemon)).stdout.splitlines()
    typed = subprocess.run([GPUWATCH, *hint.split("(")[1].rstrip(")").split()[1:], "-n", "2"], capture_output=True,
                           text=True, timeout=60)
    assert typed.returncode == 0 and typed.stdout.count("step ") == 2, typed.stderr
    # Without the file: the running daemon's published trainer (a daemon started with another config: the demo's).
    found = subprocess.run([GPUWATCH, "logs", "t", "-n", "2", "-c", "/dev/null"], capture_output=True, text=True,
                           timeout=60, env={**os.environ, "RUNTIME_DIRECTORY": str(tmp_path / "run")})
    assert found.returncode == 0 and found.stdout.count("step ") == 2, found.stderr
    result = gpuwatch("logs", "t", "-n", "3", "-c", str(daemon))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 3 and all(line.startswith("step ") for line in lines)
    assert gpuwatch("logs", "-c", str(daemon)).stdout.count("\n") == 10  # the only trainer, 10 lines


def test_stop_keeps_the_trainer_stopped_until_restart(daemon: Path, tmp_path: Path) -> None:
    stopped = gpuwatch("stop", "t", "-c", str(daemon))
    assert stopped.returncode == 0 and stopped.stdout.strip() == "stop requested for t", stopped.stderr
    wait_for(lambda: _trainer(daemon)["phase"] == "stopped", "the trainer to stop", 60)
    assert (tmp_path / "checkpoint").read_text() == "saved"  # SIGTERM came first, with the grace to checkpoint
    trainer = _trainer(daemon)
    assert trainer["pid"] is None and trainer["restarts_total"] == 0
    assert trainer["reason"] == "stopped; `gpuwatch restart t` starts it"
    ticks = trainer["ticks_total"]
    wait_for(lambda: _trainer(daemon)["ticks_total"] >= ticks + 10, "ten more ticks", 60)
    assert _trainer(daemon)["phase"] == "stopped"  # no backoff, no restart
    assert "checkpoint saved at SIGTERM" in gpuwatch("logs", "t", "-n", "5", "-c", str(daemon)).stdout

    assert gpuwatch("restart", "t", "-c", str(daemon)).returncode == 0
    wait_for(lambda: _trainer(daemon)["phase"] == "running" and _trainer(daemon)["pid"], "the trainer again", 60)


def test_stop_of_an_unknown_trainer_says_which_exist(daemon: Path) -> None:
    result = gpuwatch("stop", "nope", "-c", str(daemon))
    assert result.returncode == 2 and "no trainer or run named 'nope' (trainers and runs: t)" in result.stderr


def test_logs_without_a_daemon_follows_across_a_rotation(tmp_path: Path) -> None:
    """No daemon: the trainer's log_dir from the config; -f prints what comes, also after the file is rotated."""
    config = _config(tmp_path, log_dir=str(tmp_path / "logs"))
    log = tmp_path / "logs/t.log"
    log.parent.mkdir()
    (tmp_path / "logs/t.log.1").write_text("older 1\nolder 2\n")
    log.write_text("line 1\nline 2\n")
    assert gpuwatch("logs", "t", "-n", "3", "-c", str(config)).stdout == "older 2\nline 1\nline 2\n"
    follower = gpuwatch_process("logs", "t", "-f", "-n", "1", "-c", str(config))
    out: list[str] = []
    try:
        assert follower.stdout is not None
        assert follower.stdout.readline() == "line 2\n"
        with log.open("a") as f:
            f.write("line 3\n")
        assert follower.stdout.readline() == "line 3\n"
        log.rename(tmp_path / "logs/t.log.1")  # what the supervisor's RotatingFileHandler does
        log.write_text("after rotation\n")
        out.append(follower.stdout.readline())
        assert out == ["after rotation\n"]
    finally:
        follower.send_signal(signal.SIGINT)
        follower.wait(timeout=30)
    assert follower.returncode == 130 and "Traceback" not in (follower.stderr.read() if follower.stderr else "")


def test_logs_of_a_trainer_that_never_ran_and_of_an_unknown_one(tmp_path: Path) -> None:
    config = _config(tmp_path)
    never = gpuwatch("logs", "t", "-c", str(config))
    assert never.returncode == 1
    assert never.stderr.startswith(f"gpuwatch logs: no log of trainer t yet at {tmp_path / 'run/trainers/t/t.log'}")
    unknown = gpuwatch("logs", "x", "-c", str(config))
    assert unknown.returncode == 2 and "no trainer named 'x' in the configuration (trainers: t)" in unknown.stderr
    bad = gpuwatch("logs", "t", "-n", "-1", "-c", str(config))
    assert bad.returncode == 2 and bad.stderr.startswith("usage: gpuwatch logs")


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to make a log only root may read")
def test_logs_a_user_may_not_read_is_one_line() -> None:
    with tempfile.TemporaryDirectory() as where:  # pytest's tmp_path is root's alone (0700): nobody reads it
        tmp = Path(where)
        tmp.chmod(0o755)
        config = _config(tmp, log_dir=str(tmp / "logs"))
        (tmp / "logs").mkdir(mode=0o700)  # the daemon's log folder: root's
        (tmp / "logs/t.log").write_text("secret\n")
        nobody = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", GPUWATCH, "logs",
                                 "t", "-c", str(config)], capture_output=True, text=True, timeout=60)
    assert nobody.returncode == 1 and "Traceback" not in nobody.stderr, nobody.stderr
    assert nobody.stderr.startswith(f"gpuwatch logs: cannot read {tmp / 'logs/t.log'}: Permission denied")
