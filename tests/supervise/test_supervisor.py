"""The supervisor with real short-lived child processes, a real fake-sysfs tree and sub-second timings."""

from __future__ import annotations

import json
import logging
import os
import pwd
import signal
import socket
import sys
import textwrap
import time
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import pytest
from prometheus_client import CollectorRegistry, generate_latest

from gpuwatch.config.file import Config
from gpuwatch.config.trainer import TrainerConfig
from gpuwatch.gpus.amdgpu_source import AmdgpuSource
from gpuwatch.gpus.sampler import Sampler
from gpuwatch.model import Acted, FanMode, FanState, GpuReading, PublishedState, Snapshot, TempReading, TrainerState
from gpuwatch.model import TrainerPhase as P
from gpuwatch.publish.metrics import GpuwatchCollector
from gpuwatch.sim.tree import FakeSysfsTree
from gpuwatch.supervise.actions import thermal_verdict
from gpuwatch.supervise.supervisor import Supervisor
from gpuwatch.sysfs import Sysfs
from tests.support.waiting import wait_for

SLOT = "0000:03:00.0"
FAST = dict(debounce_s=0.1, min_pause_s=0, grace_s=3.0, pause_ack_timeout_s=1.0, max_pause_s=30, hang_timeout_s=None,
            stable_after_s=60, backoff={"initial_s": 0.05, "max_s": 0.2, "jitter_ratio": 0.1})

WORKER = """
import os, signal, sys, time
out = sys.argv[1]
def on_term(signum, frame):
    open(out + ".term", "w").write("TERM")
    sys.exit(0)
signal.signal(signal.SIGTERM, on_term)
n = 0
while True:
    n += 1
    with open(out + ".tmp", "w") as f:
        f.write(str(n))
    os.replace(out + ".tmp", out)
    time.sleep(0.02)
"""


class Harness:
    def __init__(self, tmp: Path, fake: FakeSysfsTree, hwmon: str | None, **trainer: Any) -> None:
        self.tmp = tmp
        self.fake = fake
        self.hwmon = hwmon
        self.sampler = Sampler([AmdgpuSource(Sysfs(fake.root))])
        self.fans: tuple[FanState, ...] = ()
        # Tests may run as root; a root daemon only runs a trainer as root when asked to.
        base = {"name": "t", "gpus": [SLOT], "cwd": tmp, "user": pwd.getpwuid(os.geteuid()).pw_name}
        cfg = TrainerConfig(**{**base, **FAST, **trainer})
        self.config = Config()  # the live configuration each tick reads (default [thermal] and [power])
        self.sup = Supervisor([cfg], tmp / "state")
        self.trainer = self.sup.trainers[0]

    def set_junction_c(self, temp_c: float) -> None:
        assert self.hwmon
        self.fake.write(f"{self.hwmon}/temp2_input", f"{int(temp_c * 1000)}\n")

    def tick(self) -> TrainerState:
        return self.sup.tick(self.sampler.sample(), Acted(fans=self.fans), self.config)[0]

    def until(self, pred: Callable[[TrainerState], bool], timeout_s: float = 8.0) -> TrainerState:
        """Tick until the trainer's state satisfies ``pred``."""
        last: list[TrainerState] = []

        def reached() -> TrainerState | None:
            last[:] = [self.tick()]
            return last[0] if pred(last[0]) else None

        return wait_for(reached, "the trainer state", timeout_s,
                        detail=lambda: f"last state {last[0] if last else None}")

    def close(self) -> None:
        self.sup.stop(poll_s=0.02)


def script(tmp: Path, name: str, body: str) -> list[str]:
    path = tmp / name
    path.write_text(textwrap.dedent(body))
    return [sys.executable, str(path)]


def counter(path: Path) -> int:
    try:
        return int(path.read_text() or 0)
    except (OSError, ValueError):
        return 0


def wait_status(pid: int, status: str, timeout_s: float = 3.0) -> bool:
    """Signal delivery is asynchronous: a just-stopped process can still read as running."""
    return wait_for(lambda: psutil.Process(pid).status() == status, f"pid {pid} to be {status}", timeout_s,
                    interval_s=0.02)


def advancing(path: Path, wait_s: float = 0.3) -> bool:
    before = counter(path)
    time.sleep(wait_s)
    return counter(path) != before


def test_pause_on_heat_with_sigstop_and_resume_when_cool(make, tmp_path: Path) -> None:
    out = tmp_path / "count"
    h = make(command=script(tmp_path, "w.py", WORKER) + [str(out)])
    h.until(lambda s: s.phase is P.RUNNING and out.exists())
    pid = h.trainer.proc.pid
    h.set_junction_c(105)  # navi21 junction crit 110 -> pause limit 100
    s = h.until(lambda s: s.phase is P.PAUSED)
    assert "junction" in (s.reason or "") and s.paused_since_unix is not None
    assert wait_status(pid, psutil.STATUS_STOPPED) and not advancing(out)
    h.set_junction_c(97)  # below the limit but within the 5 °C hysteresis: stays paused
    for _ in range(5):
        assert h.tick().phase is P.PAUSED
    h.set_junction_c(80)
    s = h.until(lambda s: s.phase is P.RUNNING)
    assert s.pauses_total == 1 and s.resumes_total == 1 and advancing(out)


def test_stop_while_paused_gets_term_not_kill(make, tmp_path: Path) -> None:
    out = tmp_path / "count"
    h = make(command=script(tmp_path, "w.py", WORKER) + [str(out)])
    h.until(lambda s: s.phase is P.RUNNING and out.exists())
    proc = h.trainer.proc
    h.set_junction_c(105)
    h.until(lambda s: s.phase is P.PAUSED)
    h.sup.stop(poll_s=0.02)
    assert proc.popen.returncode == 0, "exited through its TERM handler, not SIGKILL"
    assert Path(str(out) + ".term").read_text() == "TERM"
    assert h.trainer.machine.phase is P.STOPPED


def test_child_ignoring_term_is_killed_after_grace(make, tmp_path: Path) -> None:
    body = """
    import signal, time, sys
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    print("ready", flush=True)
    while True:
        time.sleep(0.05)
    """
    h = make(command=script(tmp_path, "ignore.py", body), grace_s=0.3)
    # Only once it printed "ready" does it ignore SIGTERM (a TERM before that ends it at once: a flake at load 14).
    h.until(lambda s: s.phase is P.RUNNING and "ready" in h.trainer.log_path.read_text(errors="replace"))
    proc = h.trainer.proc
    h.sup.command("restart", "t")
    s = h.until(lambda s: s.phase is P.RUNNING and s.restarts_total == 1)
    assert proc.popen.returncode == -signal.SIGKILL
    assert s.last_exit_code == -signal.SIGKILL


GRANDPARENT = """
import os, subprocess, sys, time
pids = []
for setsid in (False, True):
    child = subprocess.Popen([sys.executable, "-c",
        "import os, subprocess, sys, time; g = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']);"
        "print(g.pid, flush=True); time.sleep(60)"], stdout=subprocess.PIPE, start_new_session=setsid)
    pids += [child.pid, int(child.stdout.readline())]
open(sys.argv[1], "w").write(" ".join(map(str, pids)))
time.sleep(60)
"""


@pytest.mark.parametrize("how", ["stop", "crash"])
def test_whole_tree_is_gone(make, tmp_path: Path, how: str) -> None:
    pids_file = tmp_path / "pids"
    h = make(command=script(tmp_path, "gp.py", GRANDPARENT) + [str(pids_file)])
    h.until(lambda s: s.phase is P.RUNNING and pids_file.exists() and len(pids_file.read_text().split()) == 4)
    pids = [int(p) for p in pids_file.read_text().split()] + [h.trainer.proc.pid]
    h.tick()  # let psutil see the whole tree (incl. the setsid one) before it is orphaned
    if how == "stop":
        h.sup.stop(poll_s=0.02)
    else:
        os.kill(h.trainer.proc.pid, signal.SIGKILL)  # the leader dies; its workers must not outlive it
        h.until(lambda s: s.phase is P.BACKOFF or (s.phase is P.RUNNING and s.restarts_total == 1))
    wait_for(lambda: not any(_alive(p) for p in pids), "the whole tree to be gone", 3)
    assert not [p for p in pids if _alive(p)]


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_crash_loop_backs_off_and_gives_up(make, tmp_path: Path) -> None:
    h = make(command=script(tmp_path, "crash.py", "import sys; print('boom', flush=True); sys.exit(3)"),
             give_up_after_crashes=3)
    s = h.until(lambda s: s.phase is P.FAILED)
    assert s.restarts_total == 2 and s.last_exit_code == 3 and "3 crash(es) without progress" in (s.reason or "")
    text = h.trainer.log_path.read_text()
    assert text.count("boom") == 3 and text.count("=== gpuwatch:") == 3


def test_hang_is_detected_and_restarted(make, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    body = "import time; print('loading', flush=True); time.sleep(60)"
    h = make(command=script(tmp_path, "hang.py", body), hang_timeout_s=1.5)  # > a loaded interpreter's start-up
    with caplog.at_level("WARNING", logger="gpuwatch.supervisor"):
        s = h.until(lambda s: s.restarts_total == 1)
    assert dict(s.restarts_by_reason) == {"hang": 1}
    evidence = "\n".join(r.getMessage() for r in caplog.records)
    assert "hang: no progress" in evidence and "loading" in evidence and "busy" in evidence


def test_progress_file_keeps_it_alive(make, tmp_path: Path) -> None:
    out = tmp_path / "count"
    h = make(command=script(tmp_path, "w.py", WORKER) + [str(out)], hang_timeout_s=1.0, progress_file=out,
             log_is_progress=False)
    h.until(lambda s: out.exists())
    deadline = time.monotonic() + 1.5  # longer than hang_timeout_s: only the touched file keeps it alive
    while time.monotonic() < deadline:
        s = h.tick()
        time.sleep(0.05)
    assert s.phase is P.RUNNING and s.restarts_total == 0


COOPERATIVE = """
import os, sys, time
from gpuwatch.heartbeat import Heartbeat, write_heartbeat, pause_requested
hb, pause = os.environ["GPUWATCH_HEARTBEAT_FILE"], os.environ["GPUWATCH_PAUSE_FILE"]
steps = 0
while True:
    paused = pause_requested(pause)
    if not paused:
        steps += 1
    write_heartbeat(hb, Heartbeat(pid=os.getpid(), steps_total=steps, last_step_unix=time.time(),
                                  steps_per_s=50.0, updated_unix=time.time(), paused=paused))
    time.sleep(0.02)
"""


def test_cooperative_pause_through_heartbeat(make, tmp_path: Path) -> None:
    h = make(command=script(tmp_path, "coop.py", COOPERATIVE))
    s = h.until(lambda s: s.phase is P.RUNNING and (s.steps_total or 0) > 2)
    assert s.steps_per_s == 50.0 and s.last_step_age_s is not None
    h.set_junction_c(105)
    h.until(lambda s: s.phase is P.PAUSED)
    assert h.trainer.machine.pause_mode == "cooperative"
    assert h.trainer.pause_file.read_text().startswith("hot: 0000:03:00.0 junction")  # the ranks show it on every node
    assert psutil.Process(h.trainer.proc.pid).status() != psutil.STATUS_STOPPED
    h.set_junction_c(60)
    h.until(lambda s: s.phase is P.RUNNING)
    assert not h.trainer.pause_file.exists()


def test_max_pause_restarts_cleanly(make, tmp_path: Path) -> None:
    out = tmp_path / "count"
    h = make(command=script(tmp_path, "w.py", WORKER) + [str(out)], max_pause_s=0.3)
    h.until(lambda s: s.phase is P.RUNNING and out.exists())
    first = h.trainer.proc
    h.sup.command("pause", None)
    h.until(lambda s: s.phase is P.PAUSED)
    s = h.until(lambda s: s.restarts_total == 1 and s.phase is P.RUNNING)
    assert first.popen.returncode == 0 and dict(s.restarts_by_reason) == {"max-pause": 1}


def test_fan_failsafe_is_an_emergency_stop(make, tmp_path: Path) -> None:
    out = tmp_path / "count"
    h = make(command=script(tmp_path, "w.py", WORKER) + [str(out)], restart_after_emergency=False)
    h.until(lambda s: s.phase is P.RUNNING and out.exists())
    h.fans = (FanState(gpu_id=SLOT, backend="pwm1", mode=FanMode.FAILSAFE),)
    s = h.until(lambda s: s.phase is P.STOPPED)
    assert "fan failsafe" in (s.reason or "") or "emergency" in (s.reason or "")
    assert s.last_exit_code == 0


def test_restart_resumes_from_newest_complete_checkpoint(make, tmp_path: Path) -> None:
    weights = tmp_path / "runs/detect/train/weights"
    weights.mkdir(parents=True)
    with zipfile.ZipFile(weights / "last.pt", "w") as archive:
        archive.writestr("data.pkl", b"x")
    broken = tmp_path / "runs/detect/train2/weights"
    broken.mkdir(parents=True)
    (broken / "last.pt").write_bytes(b"PK\x03\x04 truncated")  # newer, but cut off mid-save
    argv_file = tmp_path / "argv.json"
    body = "import json, sys; json.dump(sys.argv[1:], open(sys.argv[1], 'w')); sys.exit(0 if len(sys.argv) > 2 else 1)"
    cmd = script(tmp_path, "resume.py", body)
    h = make(command=cmd + [str(argv_file)],
             restart_command=cmd + [str(argv_file), "resume", "model={last_checkpoint}"],
             checkpoint_glob="runs/detect/*/weights/last.pt")
    s = h.until(lambda s: s.phase is P.FINISHED)
    assert json.loads(argv_file.read_text()) == [str(argv_file), "resume", f"model={weights / 'last.pt'}"]
    assert s.restarts_total == 1


def test_progress_bar_output_does_not_fill_the_log(make, tmp_path: Path) -> None:
    body = """
    import sys
    for i in range(20000):
        sys.stdout.write(f"\\repoch 1: {i}/20000 " + "#" * 40)
    sys.stdout.write("\\ndone\\n")
    for i in range(3000):
        print("line", i, "x" * 60)
    """
    h = make(command=script(tmp_path, "bar.py", body), log_max_bytes=65536, log_backups=2)
    h.until(lambda s: s.phase is P.FINISHED)
    h.trainer.proc.close()
    logs = sorted(h.trainer.log_path.parent.glob("t.log*"))
    assert [p.name for p in logs] == ["t.log", "t.log.1", "t.log.2"]
    assert all(p.stat().st_size <= 65536 + 200 for p in logs)
    assert "line 2999" in h.trainer.log_path.read_text()


def test_environment_is_clean_and_carries_the_protocol(make, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NOTIFY_SOCKET", "/run/systemd/notify")
    monkeypatch.setenv("WATCHDOG_USEC", "1000000")
    out = tmp_path / "env.json"
    body = "import json, os, sys; json.dump(dict(os.environ), open(sys.argv[1], 'w'))"
    h = make(command=script(tmp_path, "env.py", body) + [str(out)], env={"EXTRA": "1"})
    h.until(lambda s: s.phase is P.FINISHED)
    env = json.loads(out.read_text())
    assert "NOTIFY_SOCKET" not in env and "WATCHDOG_USEC" not in env and env["EXTRA"] == "1"
    assert env["GPUWATCH_HEARTBEAT_FILE"].endswith("heartbeat.json") and env["GPUWATCH_PAUSE_FILE"].endswith("pause")
    assert env["GPUWATCH_NODE"] == socket.gethostname() and env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] == "1"


def test_node_name_and_torchrun_store_sharing_are_the_users_to_set(make, tmp_path: Path) -> None:
    out = tmp_path / "env.json"
    body = "import json, os, sys; json.dump(dict(os.environ), open(sys.argv[1], 'w'))"
    h = make(command=script(tmp_path, "env.py", body) + [str(out)], node="node-b",
             env={"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "0"})
    h.until(lambda s: s.phase is P.FINISHED)
    env = json.loads(out.read_text())
    assert env["GPUWATCH_NODE"] == "node-b" and env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] == "0"


def test_a_command_that_cannot_start_fails_at_once_logged_once(make, tmp_path: Path,
                                                             caplog: pytest.LogCaptureFixture) -> None:
    """Known only at spawn time (the program went away after the daemon started): failed, no restart loop."""
    h = make(command=[str(tmp_path / "does-not-exist")], give_up_after_crashes=5)
    s = h.tick()
    assert s.phase is P.FAILED and s.restarts_total == 0 and "spawn failed" in (s.last_exit_reason or "")
    assert "No such file or directory" in (s.reason or "") and "gpuwatch restart t" in (s.reason or "")
    for _ in range(5):
        assert h.tick() == s
    caplog.set_level(logging.INFO, "gpuwatch.supervisor")
    h = make(command=[str(tmp_path / "does-not-exist")], give_up_after_crashes=5, name="u")
    for _ in range(3):
        s = h.tick()
    lines = [r.getMessage() for r in caplog.records if r.name == "gpuwatch.supervisor"]
    assert len(lines) == 1 and lines[0].startswith("trainer u: starting -> failed: spawn failed: cannot start")
    registry = CollectorRegistry(auto_describe=False)
    registry.register(GpuwatchCollector(lambda: PublishedState(snapshot=h.sampler.sample(), trainers=(s,))))
    # The label is the reason's class: the program's path stays in `gpuwatch status` (publish/redact.py).
    exposition = generate_latest(registry).decode()
    assert 'gpuwatch_trainer_failed_info{reason="spawn failed",trainer="u"} 1.0' in exposition
    assert str(tmp_path) not in exposition


def test_unknown_trainer_name_is_refused(make, tmp_path: Path) -> None:
    h = make(command=["true"])
    ok, message = h.sup.command("pause", "nope")
    assert not ok and "no trainer named 'nope'" in message and "t" in message


@pytest.mark.skipif(os.geteuid() != 0, reason="switching user needs root")
def test_root_daemon_runs_trainer_as_its_user_with_groups(make, tmp_path: Path) -> None:
    nobody = pwd.getpwnam("nobody")
    h = make(command=["/bin/sh", "-c", "echo ids $(id -u) $(id -g)"], user="nobody", cwd=Path("/"))
    h.until(lambda s: s.phase is P.FINISHED)
    h.trainer.proc.close()
    assert f"ids {nobody.pw_uid} {nobody.pw_gid}" in h.trainer.log_path.read_text()


@pytest.mark.skipif(os.geteuid() != 0, reason="the root default needs root")
def test_root_daemon_refuses_to_run_trainer_as_root_unless_asked(make, tmp_path: Path) -> None:
    h = make(command=["/bin/true"], user=None, give_up_after_crashes=1)
    s = h.until(lambda s: s.phase is P.FAILED)
    assert 'set user = "..."' in (s.last_exit_reason or "")


def test_a_verdict_is_made_once_per_snapshot_gpus_and_limits(tmp_path: Path) -> None:
    """Supervisor._verdict keeps each verdict for the snapshot's other readers (two attached runs on every GPU share
    one): the same as actions.thermal_verdict, made again for other limits and for the next snapshot."""
    def snapshot(junction_c: float) -> Snapshot:
        gpu = GpuReading(gpu_id="0000:03:00.0", card="card0", backend="amdgpu",
                         temps=(TempReading("junction", junction_c, crit_c=110.0),))
        return Snapshot(taken_unix=0.0, taken_monotonic=0.0, gpus=(gpu,))

    sup = Supervisor([], tmp_path / "state")
    config, lenient = Config(), Config.model_validate({"thermal": {"junction_limit_c": 108.0}})
    hot = snapshot(104.0)
    sup.tick(hot, Acted(), config)
    first = sup._verdict_on((), config)
    assert first == thermal_verdict(hot, (), config.thermal, (), (), config.power.pause_backstop_s) and first.hot
    assert sup._verdict_on((), config) is first
    assert not sup._verdict_on((), lenient).hot  # other limits: another verdict on the same snapshot
    sup.tick(None, Acted(), config)  # no snapshot: the last one's verdicts stand
    assert sup._verdict_on((), config) is first
    sup.tick(snapshot(60.0), Acted(), config)
    assert sup._verdict_on((), config).cool
