"""Nothing personal leaves the box (issue 47): a REAL `gpuwatch run --simulate` daemon whose configured trainer
fails to spawn on a path, and a run attached with the REAL `gpuwatch train` by a REAL unprivileged user, read
on every route as a reader who proved nothing: over HTTP from a non-loopback address of this machine
(/metrics, /status, /healthz, /, /events, /history, `gpuwatch status --remote` and `--history --remote`) and
through the control socket by another unprivileged user. The run's user, paths, argv, working directory,
environment and code each carry a marker; no marker may appear anywhere (the full view, the state file, is
checked to hold them: the test would prove nothing with markers that never reached the daemon).
"""

from __future__ import annotations

import http.client
import json
import os
import pwd
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.publish.test_redact import other_local_address
from tests.support.daemon_process import read_state
from tests.support.paths import REPO
from tests.support.processes import Processes, Started
from tests.support.stack import GPUWATCH
from tests.support.users import needs_root, unprivileged_user
from tests.support.waiting import wait_for

WAIT_S = 90.0  # generous: the machine is shared
PATH_MARK, ARGV_MARK, CWD_MARK, ENV_MARK, CODE_MARK = "pathmk7q", "argvmk3z", "cwdmk5r", "envmk9t", "codemk2k"


def _get(address: str, port: int, path: str) -> str:
    connection = http.client.HTTPConnection(address, port, timeout=30)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        assert response.status == 200 or path == "/healthz", (path, response.status)
        return response.read().decode(errors="replace")
    finally:
        connection.close()


def _events(address: str, port: int, names: set[str]) -> str:
    """The /events stream up to a message that carries both runs."""
    connection = http.client.HTTPConnection(address, port, timeout=30)
    seen = []
    try:
        connection.request("GET", "/events")
        response = connection.getresponse()
        assert response.status == 200
        for _ in range(10_000):
            line = response.readline().decode(errors="replace")
            if not line:
                break
            seen.append(line)
            if line.startswith("data:") and all(f'"{name}"' in line for name in names):
                break
    finally:
        connection.close()
    return "".join(seen)


@needs_root
@pytest.mark.timeout(300)
def test_no_marker_of_a_runs_user_path_argv_cwd_env_or_code_reaches_an_unauthenticated_reader(
        short_dir: Path) -> None:
    address = other_local_address()
    if address is None:
        pytest.skip("this machine has no address but loopback")
    os.chmod(short_dir, 0o755)  # the users' wrapper and processes reach the socket and their cwd in it
    with unprivileged_user("gwmk") as owner, unprivileged_user("gwrd") as reader, \
            Processes(short_dir / "logs") as processes:
        entry = pwd.getpwnam(owner)
        runtime = short_dir / "run"
        runtime.mkdir(mode=0o755)
        cwd = short_dir / f"{CWD_MARK}-{owner}"
        cwd.mkdir(mode=0o755)
        os.chown(cwd, entry.pw_uid, entry.pw_gid)
        # A program that passes the start's checks (it exists, executable) but cannot be exec'd: its
        # interpreter is missing, so the spawn fails naming the program's path (ENOENT).
        program = short_dir / PATH_MARK / "bin" / "trainer"
        program.parent.mkdir(parents=True, mode=0o755)
        (short_dir / PATH_MARK).chmod(0o755)
        program.write_text(f"#!{short_dir / PATH_MARK / 'no-interpreter'}\n")
        program.chmod(0o755)
        config = short_dir / "gpuwatch.toml"
        config.write_text(
            f'runtime_dir = "{runtime}"\ninterval_s = 0.2\n'
            '[http]\nlisten = "0.0.0.0"\nport = 0\n'
            "[[trainer]]\nname = \"broken\"\n"
            f'command = ["{program}", "--token={ARGV_MARK}"]\ncwd = "{cwd}"\nuser = "{owner}"\n'
            f'env = {{ SECRET = "{ENV_MARK}" }}\n')
        config.chmod(0o644)
        daemon: Started = processes.start("gpuwatch", [*GPUWATCH, "run", "--simulate", "-c", str(config)])
        port = int(wait_for(lambda: re.search(r"HTTP listening on 0\.0\.0\.0:(\d+)", daemon.tail(100_000)),
                            "the HTTP port", WAIT_S, detail=daemon.tail).group(1))

        # The owner's run: python's -c code, an env assignment, its own cwd (issue 47 item 3's run).
        xdg = short_dir / f"xdg-{owner}"
        xdg.mkdir(mode=0o700)
        os.chown(xdg, entry.pw_uid, entry.pw_gid)
        python = shutil.which("python3", path="/usr/bin:/bin") or "python3"
        code = f"import time; time.sleep(600)  # {CODE_MARK}"
        wrapper = processes.start("wrapper", [
            "env", f"XDG_RUNTIME_DIR={xdg}", f"HOME={xdg}", f"PYTHONPATH={REPO}",
            sys.executable, "-m", "tests.support.as_user", owner, "cli", "train", "--runtime-dir", str(runtime),
            "--", "env", f"SECRET={ENV_MARK}", python, "-c", code, f"--arg={ARGV_MARK}"], cwd=cwd)

        def both() -> dict[str, dict[str, object]] | None:
            runs = {t["name"]: t for t in (read_state(runtime) or {}).get("trainers", [])}
            ready = runs.get("broken", {}).get("phase") == "failed" and any(
                t.get("origin") == "attached" and t.get("phase") == "running" for t in runs.values())
            return runs if ready else None

        runs = wait_for(both, "the trainer failed at spawn and the user's run attached", WAIT_S,
                        detail=lambda: daemon.tail() + wrapper.tail())
        attached = next(t for t in runs.values() if t["origin"] == "attached")
        # The full view holds every marker the daemon was given: the scan below means something.
        full = json.dumps(runs)
        assert attached["name"] == "python3" and attached["user"] == owner, attached
        assert PATH_MARK in str(runs["broken"]["reason"]) and CODE_MARK in str(attached["command"]), full
        markers = (owner, PATH_MARK, ARGV_MARK, CWD_MARK, ENV_MARK, CODE_MARK, "swordfish", "trainlib")

        outputs = {path: _get(address, port, path) for path in ("/metrics", "/status", "/healthz", "/")}
        outputs["/events"] = _events(address, port, {"broken", "python3"})
        remote = subprocess.run([*GPUWATCH, "status", "--remote", f"http://{address}:{port}", "-c", str(config)],
                                capture_output=True, text=True, timeout=WAIT_S)
        outputs["status --remote"] = remote.stdout + remote.stderr
        def history_with_both() -> str | None:  # the ring takes a run at its next sample (its thread, once a second)
            text = _get(address, port, "/history?range=15m")
            return text if {"broken", "python3"} <= set(json.loads(text)["runs"]) else None

        outputs["/history"] = wait_for(history_with_both, "both runs in /history", WAIT_S)
        charts = subprocess.run([*GPUWATCH, "status", "--history", "15m", "--remote", f"http://{address}:{port}", "-c",
                                 str(config)], capture_output=True, text=True, timeout=WAIT_S)
        outputs["status --history --remote"] = charts.stdout + charts.stderr
        socket = subprocess.run([sys.executable, "-m", "tests.support.as_user", reader, "document",
                                 str(runtime / "control.sock")], capture_output=True, text=True, timeout=WAIT_S,
                                cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
        outputs["control socket"] = socket.stdout + socket.stderr

        # Each route carries the runs (by name), never a marker.
        status = json.loads(outputs["/status"])
        assert status["redacted"] is True and {t["name"] for t in status["trainers"]} >= {"broken", "python3"}
        assert json.loads(socket.stdout)["redacted"] is True
        assert 'gpuwatch_trainer_failed_info{reason="spawn failed",trainer="broken"} 1.0' in outputs["/metrics"]
        assert "broken" in outputs["status --remote"] and "python3" in outputs["status --remote"], remote
        assert {"broken", "python3"} <= set(json.loads(outputs["/history"])["runs"]), outputs["/history"][:2000]
        assert "run broken" in outputs["status --history --remote"], charts
        leaks = {(route, marker) for route, text in outputs.items() for marker in markers if marker in text}
        assert leaks == set(), {route: outputs[route][:2000] for route, _ in leaks}
