"""Issue 50's walk repeated by a real unprivileged user with a venv of her own (items 1, 2, 5 and 13): she starts
`gpuwatch run --simulate -c FILE` (no runtime_dir), activates her venv (Debian's python with torch, no gpuwatch),
and types the plain commands: `status`, `train -- python train.py`, `logs`, `pause`. The CLI runs through
tests/support/as_user.py (the real commands, imported before the privileges are dropped)."""

from __future__ import annotations

import json
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
from tests.support.venvs import make_venv, torch_site_packages, torch_steps
from tests.support.waiting import wait_for

torch = pytest.importorskip("torch")
SYSTEM_PYTHON = "/usr/bin/python3.11"  # one she can run: the test's own interpreter may live under root's 0700 home
pytestmark = [needs_root, pytest.mark.torch,
              pytest.mark.skipif(not os.access(SYSTEM_PYTHON, os.X_OK), reason=f"no {SYSTEM_PYTHON} for her venv")]

SCRIPT = "import json, os, sys, time\n" + torch_steps(3) + """
with open(sys.argv[1] + ".tmp", "w") as out:
    json.dump({"executable": sys.executable, "gpuwatch": getattr(sys.modules.get("gpuwatch"), "__file__", None),
               "cmdline": [w for w in open("/proc/self/cmdline", "rb").read().decode().split("\\0") if w]}, out)
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
print("three steps done", flush=True)
time.sleep(float(sys.argv[2]))
"""


def _argv(user: str, *args: str) -> list[str]:
    return [sys.executable, "-m", "tests.support.as_user", user, "cli", *args]


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("RUNTIME_DIRECTORY", "XDG_RUNTIME_DIR", "PYTHONPATH") and not k.startswith("GPUWATCH_")}
    return {**env, "PYTHONPATH": str(REPO), **extra}


@pytest.fixture
def alice(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A user and her home: a venv made from Debian's python that sees torch and no gpuwatch
    (tests/support/venvs.py)."""
    with unprivileged_user("alice") as name:
        home = tmp_path / "alice"
        make_venv(home / "venv", torch_site_packages(), SYSTEM_PYTHON)
        (home / "train.py").write_text(SCRIPT)
        (home / "gpuwatch.toml").write_text("interval_s = 0.2\n[http]\nenabled = false\n")  # no runtime_dir
        entry = pwd.getpwnam(name)
        for path in [home, *home.rglob("*")]:
            os.chown(path, entry.pw_uid, entry.pw_gid, follow_symlinks=False)
        try:
            yield name, home
        finally:
            uid = entry.pw_uid
            for leftover in (f"/tmp/gpuwatch-{uid}", f"/tmp/gpuwatch-{uid}-simulate"):
                shutil.rmtree(leftover, ignore_errors=True)  # the next user may get the same uid


def _cli(user: str, home: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(_argv(user, *args), cwd=home, env=_env(**env), capture_output=True, text=True, timeout=180)
    assert "Traceback" not in done.stderr, done.stderr
    return done


@pytest.mark.timeout(600)
def test_her_simulator_is_found_by_plain_commands_and_her_venvs_python_runs(alice: tuple[str, Path]) -> None:
    user, home = alice
    uid = pwd.getpwnam(user).pw_uid
    real, simulated = Path(f"/tmp/gpuwatch-{uid}"), Path(f"/tmp/gpuwatch-{uid}-simulate")
    log = (home / "daemon.log").open("w")
    daemon = subprocess.Popen(_argv(user, "run", "--simulate", "-c", str(home / "gpuwatch.toml")), cwd=home,
                              env=_env(), stdout=log, stderr=subprocess.STDOUT)
    train: subprocess.Popen[str] | None = None
    try:
        wait_for(lambda: (simulated / "state.json").exists(), "her simulator's first state", 120,
                 detail=lambda: (home / "daemon.log").read_text())
        assert not (real / "state.json").exists() and not (real / "control.sock").exists()  # item 1: never there
        status = _cli(user, home, "status", "--color", "never")
        assert status.returncode == 0 and "daemon running" in status.stdout, status.stderr + status.stdout
        assert f"using the simulator's (gpuwatch run --simulate) in {simulated}" in status.stderr

        # Item 2: `source venv/bin/activate; gpuwatch train -- python train.py`.
        path = f"{home / 'venv/bin'}{os.pathsep}{os.environ.get('PATH', os.defpath)}"
        out = home / "out.json"
        train = subprocess.Popen(_argv(user, "train", "--name", "fc", "--", "python", "train.py", str(out), "30"),
                                 cwd=home, env=_env(PATH=path, XDG_CACHE_HOME=str(home / "cache")),
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        seen = wait_for(lambda: json.loads(out.read_text()) if out.exists() else None, "the script's report", 180,
                        detail=lambda: "" if train is None or train.poll() is None else str(train.communicate()))
        venv_python = str(home / "venv/bin/python")
        assert seen["executable"] == venv_python  # her venv's, not gpuwatch's interpreter
        assert seen["gpuwatch"] == str(REPO / "gpuwatch" / "__init__.py")  # the bootstrap's, by its path
        assert seen["cmdline"] == [venv_python, "train.py", str(out), "30"]  # item 13: what ps shows
        listed = wait_for(lambda: "trainer fc: running" in (s := _cli(user, home, "status", "--color", "never")).stdout
                          and s, "the run listed by a plain status", 60)
        assert "[attached" in listed.stdout

        # Item 5: `gpuwatch logs NAME` of an attached run shows its output, as `gpuwatch train` kept it.
        logs = wait_for(lambda: "three steps done" in (done := _cli(user, home, "logs", "fc")).stdout and done,
                        "her run's output in `gpuwatch logs`", 60)
        assert logs.returncode == 0 and "using the simulator's" in logs.stderr, logs.stderr

        paused = _cli(user, home, "pause", "fc")  # plain, it reaches her simulator too
        assert paused.returncode == 0, paused.stderr + paused.stdout
        assert f"using the simulator's (gpuwatch run --simulate) in {simulated}" in paused.stderr
        train.send_signal(signal.SIGINT)
        output, stderr = train.communicate(timeout=120)
        assert f"attached to the simulated gpuwatch daemon ({simulated}: no real daemon runs here) as fc" in stderr
        assert "this run is not protected" not in stderr, stderr
        # Her Ctrl-C's traceback (the command's stderr, passed on to the wrapper's stderr, apart from its stdout)
        # starts in her script: no bootstrap.py, launch.py or runpy frame (item 13).
        lines = stderr.splitlines()
        assert lines[lines.index("Traceback (most recent call last):") + 1].startswith('  File "train.py"'), stderr
        assert not any(ours in stderr for ours in ("bootstrap.py", "launch.py", "runpy")), stderr
        assert "Traceback" not in output and "three steps done" in output, output
    finally:
        if train is not None and train.poll() is None:
            train.kill()
            train.communicate()
        daemon.send_signal(signal.SIGTERM)
        try:
            daemon.wait(60)
        finally:
            if daemon.poll() is None:
                daemon.kill()
                daemon.wait()
            log.close()
    assert "Traceback" not in (home / "daemon.log").read_text()
