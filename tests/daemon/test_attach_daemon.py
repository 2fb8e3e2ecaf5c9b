"""Attached runs through a real daemon (`gpuwatch run`, simulated cards: tests/support/attach_daemon.py, its card
made hot or cool by a reload) and a real attach client over its socket."""

from __future__ import annotations

import json
import os
import pwd
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.attach_client import AttachClient
from tests.support.attach_daemon import COOL, HOT, WAIT_S, AttachDaemon, world_readable
from tests.support.paths import REPO
from tests.support.processes import Processes
from tests.support.stack import GPUWATCH
from tests.support.users import needs_root, unprivileged_user
from tests.support.waiting import wait_for


@pytest.fixture
def short_dir(short_dir: Path) -> Path:
    return world_readable(short_dir)


class Daemon(AttachDaemon):
    """The daemon of ``root`` (a short directory: the socket's path fits in sun_path): its config and runtime
    directory in it."""

    def __init__(self, processes: Processes, root: Path, thermal: str, attached: str = "", name: str = "gpuwatch",
                 wait_s: float = WAIT_S) -> None:
        super().__init__(processes, root / "g.toml", root / "run", thermal, attached, name, wait_s=wait_s)


def _gpuwatch(*args: str, user: str | None = None, wait_s: float = WAIT_S) -> subprocess.CompletedProcess[str]:
    """The CLI, as ``user`` when given (tests.support.as_user drops to it)."""
    argv = [sys.executable, "-m", "tests.support.as_user", user, "cli", *args] if user else [*GPUWATCH, *args]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(argv, capture_output=True, text=True, timeout=wait_s, env=env, cwd=REPO)


def test_hot_card_pauses_an_attached_run_and_resumes_it_when_cool(short_dir: Path, tmp_path: Path) -> None:
    with Processes(tmp_path / "logs") as processes:
        daemon = Daemon(processes, short_dir, COOL)
        client = AttachClient(daemon.socket, "my job!")
        try:
            assert client.reply.ok, client.reply.message
            assert client.reply.name == "my-job"  # sanitized
            assert client.reply.interval_s == 0.2  # the daemon's tick
            run = daemon.wait_run("my-job", lambda r: r["phase"] == "running" and r["steps_total"], "running")
            me = pwd.getpwuid(os.geteuid()).pw_name
            assert (run["origin"], run["user"], run["command"], run["pid"]) == ("attached", me, "python train.py",
                                                                               client.pid)
            daemon.reload(HOT)
            wait_for(lambda: "pause" in client.kinds(), "the pause event", WAIT_S, detail=daemon.child.tail)
            held = daemon.wait_run("my-job", lambda r: r["phase"] == "paused", "paused")
            assert held["pauses_total"] == 1 and held["reason"] == "paused at a step boundary"
            daemon.reload(COOL)
            wait_for(lambda: "resume" in client.kinds(), "the resume event", WAIT_S, detail=daemon.child.tail)
            daemon.wait_run("my-job", lambda r: r["phase"] == "running" and r["resumes_total"] == 1, "resumed")
            assert client.kinds() == ["pause", "resume"]
            client.exit(0)
            daemon.wait_run("my-job", lambda r: r["phase"] == "finished", "finished")
        finally:
            client.close()


def test_a_two_rank_run_is_paused_only_once_every_rank_holds(short_dir: Path, tmp_path: Path) -> None:
    with Processes(tmp_path / "logs") as processes:
        daemon = Daemon(processes, short_dir, HOT)
        client = AttachClient(daemon.socket, "ddp", ranks=2)
        try:
            held = daemon.wait_run("ddp", lambda r: r["phase"] == "paused", "both ranks held")
            assert (held["ranks"], held["ranks_held"]) == (2, 2)
            assert client.kinds() == ["pause"]
        finally:
            client.close()


def test_a_held_run_stays_held_across_a_daemon_sigkill_and_resumes_when_cool(short_dir: Path, tmp_path: Path) -> None:
    with Processes(tmp_path / "logs") as processes:
        first = Daemon(processes, short_dir, HOT, name="first")
        client = AttachClient(first.socket, "held")
        second_client = None
        try:
            first.wait_run("held", lambda r: r["phase"] == "paused", "paused by the first daemon")
            run_id, pid = client.reply.run_id, client.pid
            first.child.process.send_signal(signal.SIGKILL)
            first.child.process.wait(WAIT_S)
            wait_for(client.closed.is_set, "the session to end with the daemon", WAIT_S)
            (short_dir / "run" / "state.json").unlink(missing_ok=True)
            second = Daemon(processes, short_dir, HOT, name="second")
            # The wrapper re-attaches with its run id and the pause it holds (its child kept running).
            second_client = AttachClient(second.socket, "held", run_id=run_id, paused=True, reason="hot", pid=pid)
            assert second_client.reply.ok and second_client.reply.run_id == run_id
            second.wait_run("held", lambda r: r["phase"] == "paused" and r["pid"] == pid, "held by the second daemon")
            ticks = (second.state() or {})["daemon"]["ticks_total"]
            wait_for(lambda: (second.state() or {})["daemon"]["ticks_total"] >= ticks + 10, "ten more ticks", WAIT_S)
            assert second_client.kinds() == [] and second.run("held")["phase"] == "paused"  # never released early
            assert [t["name"] for t in (second.state() or {})["trainers"]] == ["held"]  # one run, never two
            second.reload(COOL)
            wait_for(lambda: second_client.kinds() == ["resume"], "the resume event", WAIT_S)
            second.wait_run("held", lambda r: r["phase"] == "running", "running again")
        finally:
            client.close()
            if second_client is not None:
                second_client.close()


def test_a_pid_not_the_callers_is_refused(short_dir: Path, tmp_path: Path) -> None:
    with Processes(tmp_path / "logs") as processes:
        daemon = Daemon(processes, short_dir, COOL)
        client = AttachClient(daemon.socket, "init", pid=1)
        try:
            assert not client.reply.ok
            assert client.reply.message == "pid 1 is not the caller's process or a descendant of it"
        finally:
            client.close()
        gone = AttachClient(daemon.socket, "gone", pid=2**22 - 1)  # PID_MAX_LIMIT - 1: never used here
        try:
            assert not gone.reply.ok and gone.reply.message.startswith("no process")
        finally:
            gone.close()
        beyond = AttachClient(daemon.socket, "beyond", pid=2**22 + 12345)  # no pid can be this: refused at decode
        try:
            assert not beyond.reply.ok and beyond.reply.message.endswith("pid is not an integer in [1, 4194304]")
        finally:
            beyond.close()


def test_fifty_runs_at_once_and_a_flood_bounded(short_dir: Path, tmp_path: Path) -> None:
    with Processes(tmp_path / "logs") as processes:
        daemon = Daemon(processes, short_dir, COOL, attached="max_runs = 60\nmax_runs_per_user = 52\n")
        clients: list[AttachClient] = []
        try:
            for _ in range(50):
                clients.append(AttachClient(daemon.socket, None, beat_s=1.0))
            assert all(c.reply.ok for c in clients)
            names = [c.reply.name for c in clients]
            assert names[:3] == ["train", "train-2", "train-3"] and len(set(names)) == 50

            def all_running(document: dict[str, Any] | None) -> bool:
                trainers = (document or {}).get("trainers", [])
                return len(trainers) == 50 and all(t["phase"] == "running" for t in trainers)

            wait_for(lambda: all_running(daemon.state()), "fifty running runs", WAIT_S, detail=daemon.child.tail)
            for _ in range(2):
                clients.append(AttachClient(daemon.socket, "more", beat_s=1.0))
            flood = [AttachClient(daemon.socket, "flood", beat_s=1.0) for _ in range(5)]
            clients += flood
            assert [c.reply.ok for c in flood] == [False] * 5
            assert flood[0].reply.message == f"too many attached runs of {pwd.getpwuid(os.geteuid()).pw_name} (52)"
            assert _gpuwatch("pause", "train-7", "-c", str(daemon.config)).returncode == 0
            wait_for(lambda: "pause" in clients[6].kinds(), "train-7's pause", WAIT_S)
        finally:
            for client in clients:
                client.close()


@needs_root
def test_another_user_cannot_pause_a_run_root_can(short_dir: Path, tmp_path: Path) -> None:
    with unprivileged_user("gwt") as user, Processes(tmp_path / "logs") as processes:
        daemon = Daemon(processes, short_dir, COOL)
        mine = AttachClient(daemon.socket, "roots")
        theirs = processes.start("theirs", [sys.executable, "-m", "tests.support.as_user", user, "attach",
                                            str(daemon.socket), "theirs"], cwd=REPO)
        try:
            run = daemon.wait_run("theirs", lambda r: r["phase"] == "running", "their run attached")
            assert run["user"] == user and run["origin"] == "attached"
            refused = _gpuwatch("pause", "roots", "-c", str(daemon.config), user=user)
            assert refused.returncode == 1
            assert refused.stderr.strip() == "gpuwatch: not permitted: run roots belongs to root"
            by_pid = _gpuwatch("stop", str(mine.pid), "-c", str(daemon.config), user=user)
            assert "not permitted: run roots belongs to root" in by_pid.stderr
            assert daemon.run("roots")["phase"] == "running" and mine.kinds() == []
            # Their own run, by name: permitted. Root: any run.
            assert _gpuwatch("pause", "theirs", "-c", str(daemon.config), user=user).returncode == 0
            daemon.wait_run("theirs", lambda r: r["phase"] in ("pausing", "paused"), "their run paused")
            assert _gpuwatch("pause", "roots", "-c", str(daemon.config)).returncode == 0
            wait_for(lambda: mine.kinds() == ["pause"], "root's pause of its run", WAIT_S)
            # Through the socket, their status lists every run but leaves commands and users out.
            seen = subprocess.run([sys.executable, "-m", "tests.support.as_user", user, "document",
                                   str(daemon.socket)], capture_output=True, text=True, timeout=WAIT_S, cwd=REPO,
                                  env={**os.environ, "PYTHONPATH": str(REPO)})
            runs = {t["name"]: t for t in json.loads(seen.stdout)["trainers"]}
            assert set(runs) == {"roots", "theirs"}, seen.stderr
            assert (runs["roots"]["command"], runs["roots"]["user"], runs["roots"]["origin"]) == (None, None,
                                                                                                "attached")
            full = json.loads(_gpuwatch("status", "--json", "-c", str(daemon.config)).stdout)
            assert {t["name"]: t["user"] for t in full["trainers"]} == {"roots": "root", "theirs": user}
        finally:
            mine.close()
            theirs.process.terminate()  # its client kills its own child on the way out
            theirs.process.wait(WAIT_S)


def test_a_wrapper_gone_leaves_its_run_detached_until_its_pid_ends(short_dir: Path, tmp_path: Path) -> None:
    with Processes(tmp_path / "logs") as processes:
        daemon = Daemon(processes, short_dir, COOL)
        child = subprocess.Popen(["sleep", "600"])
        client = AttachClient(daemon.socket, "orphan", pid=child.pid)
        try:
            daemon.wait_run("orphan", lambda r: r["phase"] == "running", "attached")
            client.close()  # the wrapper's connection ends without an Exited; the run's process lives on
            daemon.wait_run("orphan", lambda r: (r["reason"] or "").startswith("detached"), "detached")
            child.kill()
            child.wait(WAIT_S)
            gone = daemon.wait_run("orphan", lambda r: r["phase"] == "failed", "gone with its pid")
            assert gone["reason"] == "gone: its wrapper went away without an exit status"
        finally:
            client.close()
            if child.poll() is None:
                child.kill()
                child.wait(WAIT_S)


def test_a_line_past_the_protocols_bound_ends_the_session(short_dir: Path, tmp_path: Path) -> None:
    with Processes(tmp_path / "logs") as processes:
        daemon = Daemon(processes, short_dir, COOL)
        client = AttachClient(daemon.socket, "big")
        try:
            client.sock.sendall(b'{"cmd": "beat", "heartbeats": ["' + b"x" * 70_000 + b'"]}\n')
            wait_for(client.closed.is_set, "the daemon to close the session", WAIT_S, detail=daemon.child.tail)
            assert "a line over 65536 bytes: session closed" in daemon.child.tail()
            daemon.wait_run("big", lambda r: (r["reason"] or "").startswith("detached"), "detached")
        finally:
            client.close()


@pytest.mark.skipif(os.geteuid() != 0, reason="creating users and groups needs root")
def test_a_member_of_the_admin_group_may_pause_any_run(short_dir: Path, tmp_path: Path) -> None:
    group = f"gwadm{os.getpid() % 100000}"
    subprocess.run(["groupadd", group], check=True, capture_output=True)
    try:
        with unprivileged_user("gwa", groups=[group]) as user, Processes(tmp_path / "logs") as processes:
            daemon = Daemon(processes, short_dir, COOL, attached=f'[control]\nadmin_group = "{group}"\n')
            mine = AttachClient(daemon.socket, "roots")
            try:
                daemon.wait_run("roots", lambda r: r["phase"] == "running", "attached")
                paused = _gpuwatch("pause", "roots", "-c", str(daemon.config), user=user)
                assert paused.returncode == 0, paused.stderr
                wait_for(lambda: mine.kinds() == ["pause"], "the admin's pause", WAIT_S)
            finally:
                mine.close()
    finally:
        subprocess.run(["groupdel", group], check=True, capture_output=True)


def test_a_silent_session_is_gone_after_ten_beats(short_dir: Path, tmp_path: Path) -> None:
    with Processes(tmp_path / "logs") as processes:
        daemon = Daemon(processes, short_dir, COOL)
        client = AttachClient(daemon.socket, "quiet", beat_s=3600.0)  # one Beat, then nothing
        try:
            daemon.wait_run("quiet", lambda r: r["phase"] == "running", "attached")
            daemon.wait_run("quiet", lambda r: (r["reason"] or "").startswith("detached"), "detached by the silence")
            assert "attach session" in daemon.child.tail() and "silent for 10 s" in daemon.child.tail()
            wait_for(client.closed.is_set, "the daemon to close the session", WAIT_S)
        finally:
            client.close()
