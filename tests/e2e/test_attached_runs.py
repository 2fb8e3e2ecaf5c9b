"""Attached runs end to end (issue 33 point 6): the REAL `gpuwatch train` wrapper against a REAL simulating
`gpuwatch run` daemon (tests/support/attach_daemon.py), the daemon's runtime directory given to both (the config's
``runtime_dir``, the wrapper's ``--runtime-dir``).

The simulated card is made hot or cool by the thermal limits (a SIGHUP reload: [thermal] is live): with
``edge_limit_c = 20`` every simulated card is over its limit (ambient 30 °C), with 140 °C limits none is.
The runs are real processes: tests/support/pause_loop.py (the heartbeat and pause-file protocol without
torch), a 2-rank torchrun (CPU, gloo) through the training launcher's hooks, or `python -c` sleeping loops;
one run belongs to a real unprivileged user created in the test (when it runs as root).
"""

from __future__ import annotations

import json
import os
import pwd
import re
import shutil
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import psutil
import pytest

from gpuwatch.heartbeat import Heartbeat, read_heartbeat, read_rank_heartbeats
from tests.support.attach_daemon import COOL, HOT, LOCAL_HTTP, AttachDaemon, world_readable
from tests.support.paths import REPO
from tests.support.processes import Processes, kill_named
from tests.support.stack import GPUWATCH
from tests.support.train_wrapper import LOOP, Wrapper, Wrappers, loop_command
from tests.support.users import needs_root, unprivileged_user
from tests.support.waiting import wait_for

WAIT_S = 90.0  # generous: eight engineers share two cores (and each test gets 300 s or more, not the 120 s default)


@pytest.fixture
def short_dir(short_dir: Path) -> Path:
    return world_readable(short_dir)


class Daemon(AttachDaemon):
    """`gpuwatch run -c CONFIG` simulating (tests/support/attach_daemon.py), its runtime directory the wrappers'
    ``--runtime-dir``, its HTTP on a free local port (/metrics)."""

    def __init__(self, processes: Processes, wrappers: Wrappers, thermal: str, name: str = "gpuwatch",
                 attached: str = "") -> None:
        world_readable(wrappers.runtime)
        super().__init__(processes, wrappers.tmp / "gpuwatch.toml", wrappers.runtime, thermal, attached, name,
                         LOCAL_HTTP, WAIT_S)

    def metrics(self) -> str:
        port = wait_for(lambda: re.search(r"HTTP listening on 127\.0\.0\.1:(\d+)", self.child.tail(100_000)),
                        "the HTTP port", WAIT_S, detail=self.child.tail).group(1)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as response:
            return str(response.read().decode())


def gpuwatch(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*GPUWATCH, *args], capture_output=True, text=True, timeout=WAIT_S, cwd=REPO,
                          env={**os.environ, "PYTHONPATH": str(REPO)})


def run_dir(wrapper: Wrapper) -> Path:
    dirs: list[Path] = wait_for(wrapper.run_dirs, "the run's directory", WAIT_S, detail=wrapper.output)
    return dirs[0]


def steps(beat: Heartbeat | None) -> int:
    return -1 if beat is None else beat.steps_total


@pytest.mark.timeout(300)
def test_a_run_from_a_plain_shell_is_paused_when_hot_resumed_when_cool_and_seen(short_dir: Path) -> None:
    with Processes(short_dir / "logs") as processes, Wrappers(short_dir) as wrappers:
        daemon = Daemon(processes, wrappers, COOL)
        # A run of two processes (a python that starts the loop), to name it by its grandchild's pid below.
        tree = f"import subprocess, sys; sys.exit(subprocess.call([sys.executable, {LOOP!r}]))"
        # The simulated card declared in the short form: the daemon's limits apply to it (its GPU ids are slots).
        wrapper = wrappers.start(["env", sys.executable, "-c", tree], "--name", "shell-run", "--gpu", "28:00.0",
                                 env={"SLURM_JOB_ID": "4242"})
        run = daemon.wait_run("shell-run", lambda r: r["phase"] == "running" and (r["steps_total"] or 0) > 0,
                              "the run attached and stepping", wrapper.output)
        me = pwd.getpwuid(os.geteuid()).pw_name
        assert (run["origin"], run["user"], run["job_id"], run["gpus"]) == ("attached", me, "4242", ["0000:28:00.0"])
        assert [g["gpu_id"] for g in (daemon.state() or {})["gpus"]] == ["0000:28:00.0"]
        assert run["pid"] == psutil.Process(wrapper.pid).children()[0].pid  # the wrapper's child, not itself
        assert "attached to the gpuwatch daemon as shell-run" in wrapper.output()
        status = gpuwatch("status", "-c", str(daemon.config))
        assert f"shell-run: running  [attached, {me}, job 4242]" in status.stdout, status.stdout + status.stderr
        # Issue 50 item 11: status shows job 4242 on the run; the receipt says why it has none, and what would.
        receipt = gpuwatch("receipt", "4242", "-c", str(daemon.config))
        assert receipt.returncode == 1 and receipt.stderr.splitlines() == [
            "gpuwatch receipt: job 4242 was not seen on a GPU (receipts kept: none).",
            "  `gpuwatch status` shows it on run shell-run (its SLURM_JOB_ID), but a receipt counts only processes "
            "that Slurm's job cgroup places in the job, and [health] job_mapping_dirs is not set for a prolog's "
            "mapping file: with proctrack/cgroup, or a prolog writing the mapping (docs/cluster.md, \"Job "
            "attribution\"), the job gets one"], receipt.stderr
        info = re.search(r'gpuwatch_trainer_info\{[^}]*trainer="shell-run"[^}]*\} 1', daemon.metrics())
        assert info and 'origin="attached"' in info.group(0) and "user=" not in info.group(0), info
        beats, pause = run_dir(wrapper) / "heartbeat.json", run_dir(wrapper) / "pause"

        daemon.reload(HOT)
        wait_for(pause.exists, "the pause file made by the wrapper", WAIT_S, detail=wrapper.output)
        held = daemon.wait_run("shell-run", lambda r: r["phase"] == "paused", "paused at a step boundary",
                               wrapper.output)
        assert held["pauses_total"] == 1 and held["reason"] == "paused at a step boundary"
        assert (read_heartbeat(beats) or Heartbeat(0, 0, 0, None, 0)).paused
        held_at = steps(read_heartbeat(beats))
        daemon.reload(COOL)
        wait_for(lambda: not pause.exists(), "the pause file removed", WAIT_S, detail=wrapper.output)
        daemon.wait_run("shell-run", lambda r: r["phase"] == "running" and r["resumes_total"] == 1, "resumed")
        wait_for(lambda: steps(read_heartbeat(beats)) > held_at, "steps after the resume", WAIT_S)

        # By a pid of the run's tree: the wrapper's (what `pgrep -f` finds first), then the loop (its grandchild).
        stranger = gpuwatch("pause", str(os.getpid()), "-c", str(daemon.config))
        assert stranger.returncode == 2 and f"no attached run with a process {os.getpid()}" in stranger.stderr
        by_wrapper = gpuwatch("pause", str(wrapper.pid), "-c", str(daemon.config))
        assert by_wrapper.returncode == 0, by_wrapper.stderr
        wait_for(pause.exists, "the pause file (gpuwatch pause WRAPPER_PID)", WAIT_S, detail=wrapper.output)
        assert gpuwatch("resume", str(wrapper.pid), "-c", str(daemon.config)).returncode == 0
        wait_for(lambda: not pause.exists(), "the pause file removed (gpuwatch resume WRAPPER_PID)", WAIT_S)
        daemon.wait_run("shell-run", lambda r: r["phase"] == "running" and r["resumes_total"] == 2, "resumed")
        loop = psutil.Process(run["pid"]).children()[0].pid
        assert gpuwatch("pause", str(loop), "-c", str(daemon.config)).returncode == 0
        wait_for(pause.exists, "the pause file (gpuwatch pause PID)", WAIT_S, detail=wrapper.output)
        daemon.wait_run("shell-run", lambda r: r["phase"] == "paused", "paused by hand")
        assert gpuwatch("resume", str(loop), "-c", str(daemon.config)).returncode == 0
        wait_for(lambda: not pause.exists(), "the pause file removed (gpuwatch resume PID)", WAIT_S)
        daemon.wait_run("shell-run", lambda r: r["phase"] == "running" and r["resumes_total"] == 3, "resumed")
        assert gpuwatch("stop", str(loop), "-c", str(daemon.config)).returncode == 0
        assert wrapper.wait(WAIT_S) == 128 + signal.SIGTERM, wrapper.output()
        daemon.wait_run("shell-run", lambda r: r["phase"] == "stopped", "stopped")
        assert "stopped by the gpuwatch daemon" in wrapper.output()


@pytest.mark.torch
@pytest.mark.timeout(400)
def test_every_rank_of_a_torchrun_attached_run_is_held_at_the_same_step(short_dir: Path) -> None:
    pytest.importorskip("torch")
    from tests.support.ddp import FAST_ENV, SCRIPT, held_alike, torchrun

    out = short_dir / "out"
    out.mkdir()
    try:
        with Processes(short_dir / "logs") as processes, Wrappers(short_dir) as wrappers:
            daemon = Daemon(processes, wrappers, COOL)
            wrapper = wrappers.start([*torchrun(2), SCRIPT, "--out", str(out)], "--name", "ddp", env=FAST_ENV)
            beats = run_dir(wrapper) / "heartbeat.json"

            def ranks() -> list[Heartbeat]:
                return sorted(read_rank_heartbeats(beats), key=lambda b: b.rank or 0)

            daemon.wait_run("ddp", lambda r: r["ranks"] == 2 and (r["steps_total"] or 0) > 0, "both ranks stepping",
                            wrapper.output)
            wrapper.remember_tree()
            seq = ranks()[0].pause_seq
            daemon.reload(HOT)
            held = daemon.wait_run("ddp", lambda r: r["phase"] == "paused", "both ranks held", wrapper.output)
            assert (held["ranks"], held["ranks_held"]) == (2, 2), held
            at = ranks()
            assert held_alike(at, 2, seq + 1), at  # one agreed pause, the same step on every rank: no split
            assert all("edge" in (b.paused_by or "") for b in at), at
            # The daemon SIGKILLed and started again: the job stays held, every rank at the same step.
            daemon.child.process.send_signal(signal.SIGKILL)
            daemon.child.process.wait(WAIT_S)
            (wrappers.runtime / "state.json").unlink(missing_ok=True)
            daemon = Daemon(processes, wrappers, HOT, name="second")
            again = daemon.wait_run("ddp", lambda r: r["phase"] == "paused", "held by the second daemon",
                                    wrapper.output)
            assert (again["ranks"], again["ranks_held"]) == (2, 2) and "re-attached" in wrapper.output(), again
            assert held_alike(ranks(), 2, seq + 1)  # not released in between: the same pause
            assert [b.steps_total for b in ranks()] == [b.steps_total for b in at]  # the same step
            daemon.reload(COOL)
            daemon.wait_run("ddp", lambda r: r["phase"] == "running" and r["resumes_total"] == 1, "resumed")
            wait_for(lambda: len(rs := ranks()) == 2 and not any(b.paused for b in rs)
                     and min(b.steps_total for b in rs) > at[0].steps_total, "both ranks stepping again", WAIT_S,
                     detail=wrapper.output)
            # `gpuwatch stop` by a rank's pid: the wrapper stops the whole job (torchrun passes it to the ranks).
            rank_pids = [b.pid for b in ranks()]
            assert gpuwatch("stop", str(rank_pids[1]), "-c", str(daemon.config)).returncode == 0
            assert wrapper.wait(WAIT_S) == 128 + signal.SIGTERM, wrapper.output()
            daemon.wait_run("ddp", lambda r: r["phase"] == "stopped", "stopped")
            wait_for(lambda: not any(psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE
                                     for p in rank_pids), "every rank gone", WAIT_S, ignore=(psutil.Error,))
    finally:
        kill_named(str(out))


@pytest.mark.timeout(300)
def test_a_held_run_stays_held_across_a_daemon_sigkill_and_resumes_when_cool(short_dir: Path) -> None:
    starts = short_dir / "starts"
    with Processes(short_dir / "logs") as processes, Wrappers(short_dir) as wrappers:
        # Started before any daemon: it trains, says once it is unprotected, and attaches once one starts.
        wrapper = wrappers.start(loop_command("--starts", str(starts)), "--name", "held")
        pause = run_dir(wrapper) / "pause"
        beats = run_dir(wrapper) / "heartbeat.json"
        wait_for(lambda: steps(read_heartbeat(beats)) > 0, "steps without a daemon", WAIT_S, detail=wrapper.output)
        assert wrapper.output().count("this run is not protected") == 1
        first = Daemon(processes, wrappers, HOT, name="first")
        run = first.wait_run("held", lambda r: r["phase"] == "paused", "paused by the first daemon", wrapper.output)
        first.child.process.send_signal(signal.SIGKILL)
        first.child.process.wait(WAIT_S)
        wait_for(lambda: "lost the gpuwatch daemon" in wrapper.output(), "the wrapper to see the daemon gone",
                 WAIT_S, detail=wrapper.output)
        (wrappers.runtime / "state.json").unlink(missing_ok=True)  # the new daemon's state only, from here on
        held_at = steps(read_heartbeat(beats))
        assert pause.exists() and wrapper.process.poll() is None
        second = Daemon(processes, wrappers, HOT, name="second")
        wait_for(lambda: "re-attached to the gpuwatch daemon as held (the pause kept" in wrapper.output(),
                 "the re-attach", WAIT_S, detail=wrapper.output)
        again = second.wait_run("held", lambda r: r["phase"] == "paused", "held by the second daemon", wrapper.output)
        assert again["pid"] == run["pid"]
        ticks = second.ticks()
        wait_for(lambda: second.ticks() >= ticks + 10, "ten more ticks", WAIT_S)
        # Never released early, never run twice: one run, one start, still held at the same step.
        assert second.run("held")["phase"] == "paused" and pause.exists()  # type: ignore[index]
        assert [t["name"] for t in second.runs()] == ["held"]
        assert steps(read_heartbeat(beats)) == held_at
        second.reload(COOL)
        wait_for(lambda: not pause.exists(), "the pause file removed", WAIT_S, detail=wrapper.output)
        second.wait_run("held", lambda r: r["phase"] == "running", "running again")
        wait_for(lambda: steps(read_heartbeat(beats)) > held_at, "steps after the resume", WAIT_S)
        assert len(starts.read_text().splitlines()) == 1
        # A daemon stopped (SIGTERM) with the run attached exits at once; the run goes on, unprotected.
        second.child.process.send_signal(signal.SIGTERM)
        assert second.child.process.wait(WAIT_S) == 0, second.child.tail()
        wait_for(lambda: wrapper.output().count("lost the gpuwatch daemon") == 2, "the wrapper to see it gone",
                 WAIT_S, detail=wrapper.output)
        moving = steps(read_heartbeat(beats))
        wait_for(lambda: steps(read_heartbeat(beats)) > moving, "steps without a daemon", WAIT_S)
        assert wrapper.process.poll() is None and len(starts.read_text().splitlines()) == 1


def _as_user(user: str, *args: str) -> subprocess.CompletedProcess[str]:
    """The CLI as ``user`` (tests.support.as_user drops to it)."""
    return subprocess.run([sys.executable, "-m", "tests.support.as_user", user, "cli", *args], capture_output=True,
                          text=True, timeout=WAIT_S, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})


class UserWrapper:
    """The real `gpuwatch train` as ``user`` in their own runtime directory, running the loop with the system's
    python (the test's interpreter may be where ``user`` cannot read); its tree stopped by ``stop``."""

    def __init__(self, user: str, root: Path, daemon: Daemon, name: str, script: str = LOOP,
                 extra_env: dict[str, str] | None = None) -> None:
        entry = pwd.getpwnam(user)
        self.xdg = root / f"xdg-{user}"
        self.xdg.mkdir(mode=0o700)
        os.chown(self.xdg, entry.pw_uid, entry.pw_gid)
        self.log = root / f"wrapper-{user}.log"
        env = {k: v for k, v in os.environ.items() if not k.startswith("GPUWATCH_")}
        env |= {"XDG_RUNTIME_DIR": str(self.xdg), "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1",
                "HOME": str(self.xdg)} | (extra_env or {})
        python = shutil.which("python3", path="/usr/bin:/bin") or "python3"
        with self.log.open("wb") as sink:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "tests.support.as_user", user, "cli", "train", "--runtime-dir",
                 str(daemon.runtime), "--name", name, "--", "env", python, script], stdout=sink,
                stderr=subprocess.STDOUT, env=env, cwd=REPO, start_new_session=True)
        self.tree: list[psutil.Process] = []

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def pause_file(self) -> Path:
        dirs = wait_for(lambda: sorted((self.xdg / "gpuwatch" / "runs").glob("*")), "their run's directory", WAIT_S,
                        detail=self.output)
        return Path(dirs[0]) / "pause"

    def stop(self) -> None:
        try:
            self.tree = psutil.Process(self.process.pid).children(recursive=True)
        except psutil.Error:
            pass
        if self.process.poll() is None:
            self.process.terminate()  # the wrapper passes it on to its command
        try:
            self.process.wait(WAIT_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(WAIT_S)
        for proc in self.tree:
            try:
                proc.kill()
            except psutil.Error:
                pass


@pytest.mark.timeout(300)
@needs_root
def test_another_user_cannot_pause_a_run_root_can_and_they_govern_their_own(short_dir: Path) -> None:
    wrappers: list[UserWrapper] = []
    with unprivileged_user("gwo") as owner, unprivileged_user("gwx") as other:
        try:
            with Processes(short_dir / "logs") as processes, Wrappers(short_dir) as roots:
                daemon = Daemon(processes, roots, COOL)
                config = str(daemon.config)
                theirs = UserWrapper(owner, short_dir, daemon, "theirs")
                wrappers.append(theirs)
                run = daemon.wait_run("theirs", lambda r: r["phase"] == "running" and (r["steps_total"] or 0) > 0,
                                      "the owner's run attached and stepping", theirs.output)
                assert (run["origin"], run["user"]) == ("attached", owner)
                # Another unprivileged user: not by name, not by a pid of the run.
                refused = _as_user(other, "pause", "theirs", "-c", config)
                assert refused.returncode != 0
                assert refused.stderr.strip() == f"gpuwatch: not permitted: run theirs belongs to {owner}", refused
                for pid in (run["pid"], theirs.process.pid):  # the run's process, its wrapper's
                    by_pid = _as_user(other, "stop", str(pid), "-c", config)
                    assert by_pid.returncode != 0 and f"not permitted: run theirs belongs to {owner}" in by_pid.stderr
                # They attach a run of their own and may pause it.
                mine = UserWrapper(other, short_dir, daemon, "mine")
                wrappers.append(mine)
                daemon.wait_run("mine", lambda r: r["phase"] == "running" and r["user"] == other, "their own run",
                                mine.output)
                assert daemon.run("theirs")["phase"] == "running"  # type: ignore[index]
                assert not theirs.pause_file().exists()
                paused = _as_user(other, "pause", "mine", "-c", config)
                assert paused.returncode == 0, paused
                wait_for(mine.pause_file().exists, "their own run's pause file", WAIT_S, detail=mine.output)
                daemon.wait_run("mine", lambda r: r["phase"] == "paused", "their own run paused", mine.output)
                # Root may pause anyone's.
                assert gpuwatch("pause", "theirs", "-c", config).returncode == 0
                wait_for(theirs.pause_file().exists, "the owner's pause file (root's pause)", WAIT_S,
                         detail=theirs.output)
                daemon.wait_run("theirs", lambda r: r["phase"] == "paused", "the owner's run paused by root")
                # Issue 50 item 7: what a command changes, and the true reason first.
                again = gpuwatch("pause", "theirs", "-c", config)
                assert again.returncode == 0
                assert again.stdout.strip() == "pause requested for theirs; theirs is already paused by hand: " \
                    "nothing changes", again
                for who in (other, None):  # its owner, and root: the same reason, not a permission
                    restart = _as_user(other, "restart", "mine", "-c", config) if who else gpuwatch(
                        "restart", "mine", "-c", config)
                    assert restart.returncode == 2 and restart.stderr.strip() == (
                        "gpuwatch: run mine was attached: its wrapper restarts it (gpuwatch train --restart), the "
                        "daemon cannot"), restart
                # Without NAME, an unprivileged user means their own runs only.
                resumed = _as_user(other, "resume", "-c", config)
                assert resumed.returncode == 0 and "mine" in resumed.stdout + resumed.stderr, resumed
                wait_for(lambda: not mine.pause_file().exists(), "their own run resumed", WAIT_S, detail=mine.output)
                daemon.wait_run("mine", lambda r: r["phase"] == "running", "their own run running")
                assert daemon.run("theirs")["phase"] == "paused" and theirs.pause_file().exists()  # type: ignore[index]
                # Their status lists both runs, without another user's command or name.
                seen = subprocess.run([sys.executable, "-m", "tests.support.as_user", other, "document",
                                       str(roots.socket)], capture_output=True, text=True, timeout=WAIT_S, cwd=REPO,
                                      env={**os.environ, "PYTHONPATH": str(REPO)})
                runs = {t["name"]: t for t in json.loads(seen.stdout)["trainers"]}
                theirs_seen = (runs["theirs"]["user"], runs["theirs"]["command"], runs["mine"]["phase"])
                assert theirs_seen == (None, None, "running")
                for wrapper in wrappers:
                    wrapper.stop()
                # Ended, still listed in status: said as ended, not as unknown beside a list that names it.
                daemon.wait_run("mine", lambda r: r["phase"] in ("stopped", "failed", "finished"), "their run ended")
                ended = _as_user(other, "pause", "mine", "-c", config)
                phase = daemon.run("mine")["phase"]  # type: ignore[index]
                assert ended.returncode == 2
                assert ended.stderr.strip() == f"gpuwatch: run mine has already ended ({phase}): nothing to pause"
        finally:
            for wrapper in wrappers:
                wrapper.stop()


SLEEPER = ("import os, sys, time\n"
           "while not os.path.exists(sys.argv[1]):\n"
           "    time.sleep(0.5)\n")


@pytest.mark.timeout(600)
def test_fifty_attached_wrappers_at_once_listed_governed_then_dropped(short_dir: Path) -> None:
    done = short_dir / "done"
    with Processes(short_dir / "logs") as processes, Wrappers(short_dir) as wrappers:
        daemon = Daemon(processes, wrappers, COOL, attached="keep_ended_s = 2\n")
        started = [wrappers.start(["env", sys.executable, "-c", SLEEPER, str(done)], "--name", f"s{n}")
                   for n in range(50)]
        names = {f"s{n}" for n in range(50)}

        def phases() -> dict[str, str]:
            return {t["name"]: t["phase"] for t in daemon.runs()}

        def every(phase: str) -> bool:
            seen = phases()
            return set(seen) == names and all(p == phase for p in seen.values())

        wait_for(lambda: every("running"), "fifty attached runs listed", 300.0,
                 detail=lambda: f"{phases()}\n{daemon.child.tail()}")
        assert all(t["origin"] == "attached" for t in daemon.runs())
        pauses = [run_dir(w) / "pause" for w in started]
        daemon.reload(HOT)
        # Governed: every run asked to pause (a loop that writes no heartbeat never acknowledges: pausing).
        wait_for(lambda: all(p.exists() for p in pauses), "fifty pause files", 300.0,
                 detail=lambda: f"{sum(p.exists() for p in pauses)} of 50\n{daemon.child.tail()}")
        wait_for(lambda: every("pausing"), "fifty runs pausing", WAIT_S, detail=lambda: str(phases()))
        daemon.reload(COOL)
        wait_for(lambda: not any(p.exists() for p in pauses), "fifty pause files removed", 300.0,
                 detail=lambda: f"{sum(p.exists() for p in pauses)} of 50\n{daemon.child.tail()}")
        # The daemon killed and started again: all fifty re-attach (each its own session, none refused).
        daemon.child.process.send_signal(signal.SIGKILL)
        daemon.child.process.wait(WAIT_S)
        (wrappers.runtime / "state.json").unlink(missing_ok=True)
        daemon = Daemon(processes, wrappers, COOL, name="second", attached="keep_ended_s = 2\n")
        wait_for(lambda: every("running") and all("re-attached" in w.output() for w in started),
                 "fifty runs re-attached", 300.0, detail=lambda: f"{phases()}\n{daemon.child.tail()}")
        done.touch()
        assert [w.wait(300.0) for w in started] == [0] * 50
        wait_for(lambda: daemon.child.tail(10**7).count(": running -> finished: finished") == 50, "fifty finished",
                 WAIT_S, detail=lambda: str(phases()))
        wait_for(lambda: not daemon.runs() and daemon.ticks() > 0, "every ended run dropped", WAIT_S,
                 detail=lambda: str(phases()))


# Three steps, then no step for an hour on its first start (a hang); every later start steps on.
STALLS_ONCE = """
import os, sys, time
from gpuwatch.heartbeat import HEARTBEAT_ENV, Heartbeat, write_heartbeat
with open(sys.argv[1], "a") as out:
    out.write("start\\n")
first = len(open(sys.argv[1]).read().splitlines()) == 1
step = 0
while True:
    time.sleep(0.05)
    if first and step >= 3:
        time.sleep(3600)
    step += 1
    write_heartbeat(os.environ[HEARTBEAT_ENV], Heartbeat(os.getpid(), step, time.time(), None, time.time()))
"""


@pytest.mark.timeout(300)
def test_a_hung_run_is_reported_by_the_daemon_and_restarted_by_its_wrapper(short_dir: Path) -> None:
    starts = short_dir / "starts"
    with Processes(short_dir / "logs") as processes, Wrappers(short_dir) as wrappers:
        daemon = Daemon(processes, wrappers, COOL, attached="hang_timeout_s = 2\n")
        wrapper = wrappers.start(["env", sys.executable, "-c", STALLS_ONCE, str(starts)], "--name", "stall",
                                 "--restart", "on-failure:1", "--backoff-s", "0", "--grace-s", "10")
        first = daemon.wait_run("stall", lambda r: r["steps_total"] == 3, "three steps", wrapper.output)
        wait_for(lambda: "reports this run hung (hung: no step for" in wrapper.output(), "the hung event", WAIT_S,
                 detail=lambda: f"{daemon.run('stall')}\n{wrapper.output()}")
        again = daemon.wait_run("stall", lambda r: r["restarts_total"] == 1 and r["pid"] != first["pid"]
                                and r["phase"] == "running" and (r["steps_total"] or 0) > 3,
                                "restarted by its wrapper and stepping", wrapper.output)
        assert again["restarts_by_reason"] == [["wrapper", 1]], again
        assert len(starts.read_text().splitlines()) == 2 and wrapper.process.poll() is None
        assert not psutil.pid_exists(first["pid"]) or psutil.Process(first["pid"]).status() == psutil.STATUS_ZOMBIE


@pytest.mark.timeout(300)
def test_a_declared_gpu_not_on_this_machine_is_said_and_the_run_still_governed(short_dir: Path) -> None:
    with Processes(short_dir / "logs") as processes, Wrappers(short_dir) as wrappers:
        daemon = Daemon(processes, wrappers, HOT)
        wrapper = wrappers.start(loop_command(), "--name", "typo", "--gpu", "2d:00.0")  # the card is 28:00.0
        wait_for(lambda: "attached to the gpuwatch daemon as typo; --gpu 0000:2d:00.0: not a GPU of this machine "
                 "(0000:28:00.0); its limits apply to the GPUs it uses" in wrapper.output(), "the note", WAIT_S,
                 detail=wrapper.output)
        run = daemon.wait_run("typo", lambda r: r["phase"] == "paused", "paused by the hot card", wrapper.output)
        assert run["gpus"] == [] and (run_dir(wrapper) / "pause").exists()


@pytest.mark.timeout(300)
def test_a_run_its_user_ends_with_ctrl_c_is_stopped_not_failed(short_dir: Path) -> None:
    with Processes(short_dir / "logs") as processes, Wrappers(short_dir) as wrappers:
        daemon = Daemon(processes, wrappers, COOL)
        ctrl_c = wrappers.start(loop_command(), "--name", "ctrl-c")
        crash = wrappers.start(loop_command("--steps", "40", "--exit-code", "3"), "--name", "crash")
        daemon.wait_run("ctrl-c", lambda r: (r["steps_total"] or 0) > 0, "stepping", ctrl_c.output)
        os.killpg(ctrl_c.pid, signal.SIGINT)  # a Ctrl-C in its terminal: the wrapper passes it on once
        assert ctrl_c.wait(WAIT_S) == 128 + signal.SIGINT
        ended = daemon.wait_run("ctrl-c", lambda r: r["phase"] != "running", "ended", ctrl_c.output)
        assert (ended["phase"], ended["reason"]) == ("stopped", "stopped by its user: SIGINT (exit -2)"), ended
        # A command that fails on its own is still failed (what TrainerFailed is about).
        assert crash.wait(WAIT_S) == 3
        failed = daemon.wait_run("crash", lambda r: r["phase"] != "running", "ended", crash.output)
        assert (failed["phase"], failed["reason"]) == ("failed", "failed: exit 3"), failed
        metrics = daemon.metrics()
        assert 'gpuwatch_trainer_phase{phase="stopped",trainer="ctrl-c"} 1' in metrics
        assert 'gpuwatch_trainer_phase{phase="failed",trainer="ctrl-c"} 0' in metrics


# A plain torch training loop that knows nothing of gpuwatch: the launcher's hooks hold it at a step boundary.
TORCH_LOOP = """
import time
import torch
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
while True:
    optimizer.zero_grad()
    model(torch.randn(8, 4)).sum().backward()
    optimizer.step()
    time.sleep(0.01)
"""


@pytest.mark.torch
@pytest.mark.timeout(300)
def test_a_plain_torch_script_is_held_by_the_launchers_hooks(short_dir: Path) -> None:
    pytest.importorskip("torch")
    script = short_dir / "train.py"
    script.write_text(TORCH_LOOP)
    with Processes(short_dir / "logs") as processes, Wrappers(short_dir) as wrappers:
        daemon = Daemon(processes, wrappers, COOL)
        wrapper = wrappers.start([sys.executable, str(script)], env={"OMP_NUM_THREADS": "1"})  # name: "train"
        beats = run_dir(wrapper) / "heartbeat.json"
        daemon.wait_run("train", lambda r: (r["steps_total"] or 0) > 0, "stepping through the launcher",
                        wrapper.output)
        daemon.reload(HOT)
        held = daemon.wait_run("train", lambda r: r["phase"] == "paused", "held at a step boundary", wrapper.output)
        at = steps(read_heartbeat(beats))
        assert held["steps_total"] == at and (read_heartbeat(beats) or Heartbeat(0, 0, 0, None, 0)).paused
        daemon.reload(COOL)
        daemon.wait_run("train", lambda r: r["phase"] == "running" and (r["steps_total"] or 0) > at, "stepping again",
                        wrapper.output)


@pytest.mark.timeout(300)
def test_a_manual_pause_stays_manual_across_a_daemon_sigkill(short_dir: Path) -> None:
    with Processes(short_dir / "logs") as processes, Wrappers(short_dir) as wrappers:
        first = Daemon(processes, wrappers, COOL, name="first")
        wrapper = wrappers.start(loop_command(), "--name", "manual")
        pause = run_dir(wrapper) / "pause"
        first.wait_run("manual", lambda r: (r["steps_total"] or 0) > 0, "stepping", wrapper.output)
        assert gpuwatch("pause", "manual", "-c", str(first.config)).returncode == 0
        first.wait_run("manual", lambda r: r["phase"] == "paused", "paused by hand", wrapper.output)
        first.child.process.send_signal(signal.SIGKILL)
        first.child.process.wait(WAIT_S)
        (wrappers.runtime / "state.json").unlink(missing_ok=True)
        second = Daemon(processes, wrappers, COOL, name="second")  # a cool card: only `resume` ends a manual pause
        second.wait_run("manual", lambda r: r["phase"] == "paused", "held by the second daemon", wrapper.output)
        ticks = second.ticks()
        wait_for(lambda: second.ticks() >= ticks + 10, "ten more ticks", WAIT_S)
        assert second.run("manual")["phase"] == "paused" and pause.exists()  # type: ignore[index]
        assert gpuwatch("resume", "manual", "-c", str(second.config)).returncode == 0
        wait_for(lambda: not pause.exists(), "the pause file removed", WAIT_S, detail=wrapper.output)
        second.wait_run("manual", lambda r: r["phase"] == "running", "running again")


PRINTER = """
import sys, time
for i in range(400):
    print(f"output line {i:04d} of the attached run")
print("one line on stderr", file=sys.stderr)
sys.stdout.flush()
time.sleep(600)
"""


@pytest.mark.timeout(300)
@needs_root
def test_logs_shows_an_attached_runs_output_to_its_user_and_root_only(short_dir: Path) -> None:
    """Issue 50 item 5: `gpuwatch train` keeps its command's output (stdout and stderr, also passed on to its own
    stdout), rotated at the trainer log's size (a small one here), and `gpuwatch logs NAME` shows it to the run's
    user and to root, never to another user; root refuses a symlink planted as the log."""
    script = short_dir / "printer.py"
    script.write_text(PRINTER)
    script.chmod(0o644)
    wrappers: list[UserWrapper] = []
    with unprivileged_user("gwo") as owner, unprivileged_user("gwx") as other:
        try:
            with Processes(short_dir / "logs") as processes, Wrappers(short_dir) as roots:
                daemon = Daemon(processes, roots, COOL)
                config = str(daemon.config)
                theirs = UserWrapper(owner, short_dir, daemon, "printer", str(script),
                                     extra_env={"GPUWATCH_TRAIN_LOG_MAX_BYTES": "4096"})
                wrappers.append(theirs)
                run = daemon.wait_run("printer", lambda r: r["phase"] == "running" and r.get("log_path"),
                                      "the run attached with its log path", theirs.output)
                log = Path(run["log_path"])
                assert log.name == "output.log" and log.parent.parent == theirs.xdg / "gpuwatch" / "runs"
                expected = [f"output line {i:04d} of the attached run" for i in range(400)]
                wait_for(lambda: "one line on stderr" in theirs.output(), "the output passed on", WAIT_S,
                         detail=theirs.output)
                # The wrapper's stdout and stderr are two pipes copied as they come (not by lines), captured here in
                # one file; the unbuffered command writes a line's text and its newline apart, so the stderr line's
                # text and its newline may each fall between, or inside, the stdout lines.
                passed_on = theirs.output().replace("one line on stderr", "")
                assert [line for line in passed_on.splitlines() if line.startswith("output line")] == expected
                # Rotated at the bound, as a trainer's log: every file within it, the lines across them.
                def whole_log() -> list[Path] | None:
                    found = sorted(log.parent.glob("output.log*"))
                    return found if sum(p.read_bytes().count(b"\n") for p in found) == 401 else None

                rotated = wait_for(whole_log, "the whole output in the log", WAIT_S,
                                   detail=lambda: str(sorted(log.parent.iterdir())))
                assert log.with_name("output.log.1") in rotated and all(p.stat().st_size <= 4096 for p in rotated)
                assert all(p.stat().st_uid == pwd.getpwnam(owner).pw_uid for p in rotated)
                mine = _as_user(owner, "logs", "printer", "-n", "401", "-c", config)
                assert mine.returncode == 0, mine
                # Each stream's whole lines in its own order; where the stderr line falls among stdout's is the order
                # two reader threads took them (cli/train/output.py), which a loaded machine may swap.
                shown = mine.stdout.splitlines()
                assert [line for line in shown if line != "one line on stderr"] == expected, mine.stdout[-500:]
                assert shown.count("one line on stderr") == 1, mine.stdout[-500:]
                refused = _as_user(other, "logs", "printer", "-c", config)
                assert refused.returncode == 1 and refused.stdout == "", refused
                assert f"printer is a run of {owner}: only that user and root may read its log" in refused.stderr
                assert "Traceback" not in refused.stderr
                by_root = gpuwatch("logs", "printer", "-n", "401", "-c", config)
                assert by_root.returncode == 0 and by_root.stdout == mine.stdout  # root reads what its user reads
                # A link in the log's place (the owner's doing): root never reads through it.
                secret = short_dir / "root-only"
                secret.write_text("root's secret\n")
                secret.chmod(0o600)
                log.rename(log.with_name("moved"))
                log.symlink_to(secret)
                planted = gpuwatch("logs", "printer", "-c", config)
                assert planted.returncode == 1 and "root's secret" not in planted.stdout, planted
                assert f"{log} is a symbolic link: refused" in planted.stderr and "Traceback" not in planted.stderr
                log.unlink()
                log.with_name("moved").rename(log)
                theirs.stop()
                # The run's files go with its wrapper, but for its log, kept for `gpuwatch logs` after the end.
                assert {p.name for p in log.parent.iterdir()} <= {p.name for p in rotated}
                ended = gpuwatch("logs", "printer", "-n", "1", "-c", config)
                assert ended.returncode == 0 and ended.stdout == mine.stdout.splitlines(keepends=True)[-1], ended
        finally:
            for wrapper in wrappers:
                wrapper.stop()
