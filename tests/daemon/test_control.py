"""The control socket (`gpuwatch pause|resume|restart`), and one run through the real daemon process."""

from __future__ import annotations

import json
import os
import pwd
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import tomli_w

from gpuwatch.cli import main
from gpuwatch.daemon.control import ControlError, ControlServer, send_command
from gpuwatch.sim.tree import FakeSysfsTree
from tests.support.trees import capture
from tests.support.waiting import wait_for


def test_round_trip_and_socket_mode(short_dir: Path) -> None:
    calls = []

    def handler(cmd: str, name: str | None) -> tuple[bool, str]:
        calls.append((cmd, name))
        return name != "bad", f"{cmd} {name}"

    server = ControlServer(short_dir / "control.sock", handler)
    server.start()
    try:
        assert (os.stat(short_dir / "control.sock").st_mode & 0o777) == 0o666
        assert send_command(short_dir / "control.sock", "pause", "t") == (True, "pause t")
        assert send_command(short_dir / "control.sock", "resume", "bad") == (False, "resume bad")
        assert calls == [("pause", "t"), ("resume", "bad")]
    finally:
        server.stop()
    assert not (short_dir / "control.sock").exists()
    # Its threads wait in accept() without a timeout; the stop's shutdown ends them.
    assert not any(thread.is_alive() for thread in server._threads)


def test_client_reports_daemon_not_running(short_dir: Path) -> None:
    with pytest.raises(ControlError, match="not running"):
        send_command(short_dir / "control.sock", "pause", None)


def test_cli_exit_code_when_daemon_not_running(short_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = short_dir / "g.toml"
    config.write_text(f'runtime_dir = "{short_dir}"\n')
    assert main(["pause", "-c", str(config)]) == 1
    assert "daemon is not running" in capsys.readouterr().err


WORKER = """
import os, signal, sys, time
out = sys.argv[1]
def on_term(signum, frame):
    open(out + ".term", "w").write("TERM")
    sys.exit(0)
signal.signal(signal.SIGTERM, on_term)
open(out + ".ready", "w").close()
while True:
    time.sleep(0.02)
"""


def _wait_doc(state: Path, pred, timeout_s: float = 15.0) -> dict:
    def matching() -> dict | None:
        doc = json.loads(state.read_text())
        return doc if pred(doc) else None

    return wait_for(matching, "the state file to match", timeout_s, ignore=(OSError, ValueError),
                    detail=lambda: f"last: {state.read_text() if state.exists() else None}")


def test_through_the_real_daemon(
    short_dir: Path, fake_sysfs: FakeSysfsTree, capsys: pytest.CaptureFixture[str]
) -> None:
    fake_sysfs.add_capture(capture("navi21-rx6900xt-sapphire-nitro"), card="card0", pci_slot="0000:03:00.0")
    worker = short_dir / "w.py"
    worker.write_text(textwrap.dedent(WORKER))
    marker = short_dir / "out"
    config = short_dir / "g.toml"
    config.write_text(tomli_w.dumps({
        "runtime_dir": str(short_dir / "run"), "sysfs_root": str(fake_sysfs.root), "interval_s": 0.1,
        "http": {"enabled": False}, "fan": {"mode": "monitor-only"},
        "trainer": [{"name": "yolo", "command": [sys.executable, str(worker), str(marker)], "grace_s": 5,
                     "user": pwd.getpwuid(os.geteuid()).pw_name}],
    }))
    daemon = subprocess.Popen([sys.executable, "-c", "import sys; from gpuwatch.cli import main; sys.exit(main())",
                               "run", "-c", str(config)], stderr=subprocess.PIPE, text=True)
    try:
        state = short_dir / "run/state.json"
        _wait_doc(state, lambda d: d["trainers"] and d["trainers"][0]["phase"] == "running" and d["trainers"][0]["pid"])
        # Its TERM handler is installed once it is ready: a pause before that would be a test race.
        wait_for((short_dir / "out.ready").exists, "the worker to be ready")
        assert main(["pause", "yolo", "-c", str(config)]) == 0
        _wait_doc(state, lambda d: d["trainers"][0]["phase"] == "paused")
        assert main(["status", "-c", str(config)]) == 0
        assert "trainer yolo: paused" in capsys.readouterr().out
        assert main(["resume", "nope", "-c", str(config)]) == 2
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(15) == 0
    finally:
        if daemon.poll() is None:
            daemon.kill()
            daemon.wait()
        err = daemon.stderr.read() if daemon.stderr else ""
    assert (short_dir / "out.term").exists(), err
    assert "paused (SIGSTOP): manual pause" in err
    assert not (short_dir / "run/control.sock").exists()


def test_an_unprivileged_peers_status_leaves_commands_users_and_log_paths_out() -> None:
    from gpuwatch.publish.redact import REDACTED, redact

    document = {"schema": 1, "gpus": [{"gpu_id": "x"}],
                "processes": [{"pid": 1, "command": "python secret.py --token t", "user": "alice", "gpu_id": "x"}],
                "trainers": [{"name": "a", "command": "python a.py", "user": "alice", "log_path": "/home/alice/a.log",
                              "phase": "running"}]}
    out: dict[str, Any] = dict(redact(document))  # type: ignore[arg-type]  # a partial document
    assert out["processes"] == [{"pid": 1, "command": REDACTED, "user": None, "gpu_id": "x"}]
    assert out["trainers"] == [{"name": "a", "command": None, "user": None, "log_path": None, "phase": "running"}]
    assert out["gpus"] == document["gpus"] and document["trainers"][0]["user"] == "alice"  # the original is kept
