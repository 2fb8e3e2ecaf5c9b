"""`gpuwatch train` as an attached run's parent (issue 33, the wrapper's side): real wrappers, real training
loops (tests/support/pause_loop.py: the heartbeat and pause-file protocol without torch) and a real unix
socket served by a stand-in for the daemon (tests/support/attach_server.py; branch attachd tests the daemon).
"""

from __future__ import annotations

import fcntl
import os
import select
import signal
import stat
import subprocess
import sys
import termios
import time
from pathlib import Path

import psutil
import pytest

import gpuwatch.cli.train.link as link_module
from gpuwatch.attach import Attach, Beat, Exited, Restarted
from gpuwatch.cli.train.link import AttachLink
from gpuwatch.cli.train.run_dir import RunDirError, make_run_dir
from gpuwatch.heartbeat import Heartbeat, read_heartbeat, write_heartbeat
from tests.support.attach_server import AttachServer, Conn
from tests.support.train_wrapper import Wrapper, Wrappers, loop_command
from tests.support.waiting import wait_for

WAIT_S = 60.0  # one bounded wait for anything a wrapper does on 2 busy cores


def attached(server: AttachServer, wrapper: Wrapper, count: int = 1) -> Conn:
    conns = wait_for(lambda: len(server.attached()) >= count and server.attached(), f"attach #{count}", WAIT_S,
                     detail=wrapper.output)
    return conns[count - 1]


def beat(conn: Conn, wrapper: Wrapper, what: str, check: object) -> Beat:
    """The first beat (from now on) whose heartbeats pass ``check``."""
    start = len(conn.beats)

    def found() -> Beat | None:
        return next((b for b in conn.beats[start:] if check(b.heartbeats)), None)  # type: ignore[operator]

    result: Beat = wait_for(found, what, WAIT_S, detail=wrapper.output)
    return result


def steps(heartbeats: list[dict[str, object]]) -> int:
    return max((int(h["steps_total"]) for h in heartbeats), default=-1)  # type: ignore[call-overload]


def test_attach_names_the_child_its_gpus_restart_and_job_then_relays_heartbeats(tmp_path: Path) -> None:
    with Wrappers(tmp_path) as wrappers, AttachServer(wrappers.socket) as server:
        command = loop_command("--steps", "0")
        wrapper = wrappers.start(command, "--name", "resnet-a", "--gpu", "28:00.0", "--gpu", "0000:28:00.0",
                                 "--gpu", "0000:2D:00.0", "--restart", "on-failure:2", "--backoff-s", "0",
                                 env={"SLURM_JOB_ID": "4711"})
        conn = attached(server, wrapper)
        request = conn.attach
        assert isinstance(request, Attach)
        child = psutil.Process(request.pid)
        assert child.ppid() == wrapper.pid and request.pid != wrapper.pid  # the wrapper is the run's parent
        assert request.argv == command and request.name == "resnet-a" and request.job_id == "4711"
        assert request.gpus == ["0000:28:00.0", "0000:2d:00.0"] and request.restart == "on-failure:2"
        assert request.run_id is None and not request.paused
        relayed = beat(conn, wrapper, "a beat with the loop's steps", lambda hbs: steps(hbs) > 0)
        assert relayed.heartbeats[0]["pid"] == request.pid
        wait_for(lambda: "attached to the gpuwatch daemon as resnet-a" in wrapper.output(), "the attached line")
        # The run's own directory, 0700, holds the files the command was given.
        (run_dir,) = wrapper.run_dirs()
        assert stat.S_IMODE(run_dir.stat().st_mode) == 0o700
        assert child.environ()["GPUWATCH_HEARTBEAT_FILE"] == str(run_dir / "heartbeat.json")
        assert child.environ()["GPUWATCH_PAUSE_FILE"] == str(run_dir / "pause")
        os.kill(request.pid, signal.SIGTERM)  # not the wrapper's doing: a failure, restarted (on-failure:2)
        conn2_restart = wait_for(lambda: [m for m in conn.messages if isinstance(m, Restarted)], "Restarted",
                                 WAIT_S, detail=wrapper.output)
        exited = [m for m in conn.messages if isinstance(m, Exited)]
        assert exited == [Exited(code=-signal.SIGTERM, restarting=True)] and conn2_restart[0].pid != request.pid
    assert wrapper.process.returncode is not None and not wrapper.run_dirs()  # the run dir goes with the wrapper


def test_pause_event_holds_the_loop_resume_releases_it(tmp_path: Path) -> None:
    with Wrappers(tmp_path) as wrappers, AttachServer(wrappers.socket) as server:
        wrapper = wrappers.start(loop_command())
        conn = attached(server, wrapper)
        beat(conn, wrapper, "stepping", lambda hbs: steps(hbs) > 0)
        (run_dir,) = wrapper.run_dirs()
        server.send(conn, "pause", "hot: junction 101 °C")
        wait_for(lambda: (run_dir / "pause").exists(), "the pause file", WAIT_S, detail=wrapper.output)
        assert (run_dir / "pause").read_text().strip() == "hot: junction 101 °C"
        held = beat(conn, wrapper, "the loop held", lambda hbs: hbs and all(h["paused"] for h in hbs))
        later = beat(conn, wrapper, "a later beat", lambda hbs: bool(hbs))
        assert steps(later.heartbeats) == steps(held.heartbeats)  # held at the step boundary: no step since
        # The requester refreshes the file while it asks (heartbeat.PAUSE_REFRESH_S): an old one is touched.
        old = time.time() - 30
        os.utime(run_dir / "pause", (old, old))
        wait_for(lambda: (run_dir / "pause").stat().st_mtime > old + 20, "the pause file refreshed", WAIT_S)
        server.send(conn, "resume")
        wait_for(lambda: not (run_dir / "pause").exists(), "the pause file removed", WAIT_S)
        beat(conn, wrapper, "stepping again", lambda hbs: steps(hbs) > steps(held.heartbeats))


def test_heartbeat_and_pause_files_given_are_the_ones_relayed_and_made(tmp_path: Path) -> None:
    beat_file, pause_file = tmp_path / "mine" / "hb.json", tmp_path / "mine" / "pause"
    beat_file.parent.mkdir()
    with Wrappers(tmp_path) as wrappers, AttachServer(wrappers.socket) as server:
        wrapper = wrappers.start(loop_command(), "--heartbeat-file", str(beat_file), "--pause-file", str(pause_file))
        conn = attached(server, wrapper)
        beat(conn, wrapper, "stepping", lambda hbs: steps(hbs) > 0)
        assert beat_file.exists()
        server.send(conn, "pause", "hot")
        wait_for(pause_file.exists, "the given pause file", WAIT_S, detail=wrapper.output)
        beat(conn, wrapper, "the loop held", lambda hbs: hbs and all(h["paused"] for h in hbs))
        wrapper.process.terminate()  # the wrapper's end takes back the pause it made
        assert wrapper.wait(WAIT_S) == 128 + signal.SIGTERM
    assert not pause_file.exists() and beat_file.exists()


def test_daemon_killed_the_pause_is_held_then_re_attached_with_its_run_id(tmp_path: Path) -> None:
    with Wrappers(tmp_path) as wrappers:
        server = AttachServer(wrappers.socket).start()
        wrapper = wrappers.start(loop_command())
        conn = attached(server, wrapper)
        (run_dir,) = wrapper.run_dirs()
        server.send(conn, "pause", "hot")
        beat(conn, wrapper, "the loop held", lambda hbs: hbs and all(h["paused"] for h in hbs))
        server.kill()  # as a SIGKILL leaves it: end of stream, the socket file refuses
        wait_for(lambda: "lost the gpuwatch daemon" in wrapper.output(), "the lost line", WAIT_S,
                 detail=wrapper.output)
        beat_file = run_dir / "heartbeat.json"
        assert (run_dir / "pause").exists() and read_heartbeat(beat_file).paused  # type: ignore[union-attr]
        first = conn.attach
        assert first is not None
        again = AttachServer(wrappers.socket).start()  # the daemon's restart
        try:
            conn2 = attached(again, wrapper)
            assert conn2.attach is not None
            assert conn2.attach.run_id == server.given_ids[0] and conn2.attach.paused
            assert conn2.attach.reason == "hot"
            assert conn2.attach.pid == first.pid
            assert (run_dir / "pause").exists()
            wait_for(lambda: "re-attached to the gpuwatch daemon" in wrapper.output(), "the re-attached line")
            again.send(conn2, "resume")
            wait_for(lambda: not (run_dir / "pause").exists(), "released by the new daemon", WAIT_S)
        finally:
            again.kill()


def test_no_daemon_for_the_hold_window_releases_the_pause_with_one_line(tmp_path: Path) -> None:
    with Wrappers(tmp_path) as wrappers:
        server = AttachServer(wrappers.socket).start()
        wrapper = wrappers.start(loop_command(), env={"GPUWATCH_HOLD_WITHOUT_DAEMON_S": "1"})
        conn = attached(server, wrapper)
        (run_dir,) = wrapper.run_dirs()
        server.send(conn, "pause", "hot")
        wait_for(lambda: (run_dir / "pause").exists(), "the pause file", WAIT_S)
        server.kill()
        wait_for(lambda: not (run_dir / "pause").exists(), "the pause released", WAIT_S, detail=wrapper.output)
        wait_for(lambda: "no gpuwatch daemon for 1 s: the pause it asked for (hot) is released" in wrapper.output(),
                 "the released line", WAIT_S, detail=wrapper.output)
        wait_for(lambda: (read_heartbeat(run_dir / "heartbeat.json") or _NoBeat).steps_total > 0
                 and not read_heartbeat(run_dir / "heartbeat.json").paused,  # type: ignore[union-attr]
                 "training again", WAIT_S, ignore=(AttributeError,))


class _NoBeat:
    steps_total = 0


def test_no_daemon_one_line_and_the_run_ends_with_its_exit_code(tmp_path: Path) -> None:
    with Wrappers(tmp_path) as wrappers:
        wrapper = wrappers.start(loop_command("--steps", "60", "--exit-code", "3"))
        assert wrapper.wait(WAIT_S) == 3
    said = [line for line in wrapper.output().splitlines() if line.startswith("gpuwatch train:")]
    assert said == [f"gpuwatch train: no gpuwatch daemon at {wrappers.socket}: this run is not protected"]


def test_a_refused_attach_one_line_and_the_run_trains(tmp_path: Path) -> None:
    with Wrappers(tmp_path) as wrappers, AttachServer(wrappers.socket, refuse="too many attached runs (64)"):
        wrapper = wrappers.start(loop_command("--steps", "60", "--exit-code", "0"))
        assert wrapper.wait(WAIT_S) == 0
    said = [line for line in wrapper.output().splitlines() if line.startswith("gpuwatch train:")]
    assert said == ["gpuwatch train: the gpuwatch daemon refused this run (too many attached runs (64)): "
                    "it trains unprotected"]


def test_a_daemon_that_never_answers_one_line_and_the_run_ends_with_its_exit_code(tmp_path: Path) -> None:
    with Wrappers(tmp_path) as wrappers, AttachServer(wrappers.socket, silent=True) as server:
        # 10 s of steps: past the wrapper's 5 s wait for the reply, with room on a loaded machine.
        wrapper = wrappers.start(loop_command("--steps", "200", "--step-s", "0.05", "--exit-code", "4"))
        assert wrapper.wait(WAIT_S) == 4
        assert server.conns and all(c.attach is None for c in server.conns)  # it asked; nobody answered
    said = [line for line in wrapper.output().splitlines() if line.startswith("gpuwatch train:")]
    assert said == [f"gpuwatch train: the gpuwatch daemon at {wrappers.socket} did not answer the attach: "
                    "this run is not protected"]


def test_restart_on_failure_2_restarts_twice_then_exits_with_the_status(tmp_path: Path) -> None:
    starts = tmp_path / "starts"
    (tmp_path / "ckpt-1.bin").write_bytes(b"weights")
    with Wrappers(tmp_path) as wrappers, AttachServer(wrappers.socket) as server:
        wrapper = wrappers.start(loop_command("--steps", "3", "--exit-code", "3", "--starts", str(starts)),
                                 "--restart", "on-failure:2", "--backoff-s", "0", "--checkpoint-glob", "ckpt-*.bin",
                                 "--resume-args", "--resume {last_checkpoint}")
        assert wrapper.wait(WAIT_S) == 3
        conn = server.attached()[0]
        wait_for(lambda: len([m for m in conn.messages if isinstance(m, Exited)]) == 3, "three Exited", WAIT_S)
    lines = starts.read_text().splitlines()
    assert lines[0].endswith("--starts " + str(starts)) and len(lines) == 3
    assert all(line.endswith(f"--resume {tmp_path / 'ckpt-1.bin'}") for line in lines[1:]), lines
    assert [m.restarting for m in conn.messages if isinstance(m, Exited)] == [True, True, False]
    assert len([m for m in conn.messages if isinstance(m, Restarted)]) == 2
    out = wrapper.output()
    assert "the command exited with 3: restart 1 of 2" in out and "restart 2 of 2" in out
    assert "resuming from" in out


SIGINT_SCRIPT = """
import os, signal, sys, time
got = []
signal.signal(signal.SIGINT, lambda *a: got.append(1))
open(sys.argv[1], "w").write("ready")
while not got:
    time.sleep(0.01)
time.sleep(1.0)  # a second SIGINT (the terminal's and the wrapper's both) would land here
open(sys.argv[2], "w").write(str(len(got)))
signal.signal(signal.SIGINT, signal.SIG_DFL)
os.kill(os.getpid(), signal.SIGINT)
"""


def test_ctrl_c_stops_the_run_once_and_it_is_not_restarted(tmp_path: Path) -> None:
    script, ready, count = tmp_path / "int.py", tmp_path / "ready", tmp_path / "count"
    script.write_text(SIGINT_SCRIPT)
    with Wrappers(tmp_path) as wrappers:
        wrapper = wrappers.start(["env", sys.executable, str(script), str(ready), str(count)],
                                 "--restart", "on-failure", "--backoff-s", "0")
        wait_for(ready.exists, "the command ready", WAIT_S, detail=wrapper.output)
        os.killpg(wrapper.pid, signal.SIGINT)  # what a terminal does on Ctrl-C: its foreground group
        assert wrapper.wait(WAIT_S) == 130
    assert count.read_text() == "1"
    assert "restart" not in wrapper.output()


def test_in_a_real_terminal_it_reads_the_terminal_and_ctrl_c_is_one_sigint(tmp_path: Path) -> None:
    """A pseudo-terminal as the user's: its line discipline turns Ctrl-C into SIGINT for its foreground group."""
    script = tmp_path / "int.py"
    script.write_text("print('line:', input(), flush=True)\n" + SIGINT_SCRIPT)
    ready, count = tmp_path / "ready", tmp_path / "count"
    master, slave = os.openpty()
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUWATCH_")}
    env |= {"PYTHONPATH": str(Path(__file__).resolve().parents[2]), "XDG_RUNTIME_DIR": str(tmp_path)}
    wrapper = subprocess.Popen(
        [sys.executable, "-m", "gpuwatch.cli", "train", "--restart", "on-failure", "--runtime-dir", str(tmp_path),
         "--", "env", sys.executable, str(script), str(ready), str(count)],
        stdin=slave, stdout=slave, stderr=slave, env=env, start_new_session=True,
        preexec_fn=_controlling_terminal)
    os.close(slave)
    seen = bytearray()
    try:
        os.write(master, b"typed\n")
        wait_for(lambda: _read_into(master, seen) and b"line: typed" in seen and ready.exists(), "the command ready",
                 WAIT_S, detail=lambda: seen.decode(errors="replace"))
        os.write(master, b"\x03")  # Ctrl-C
        assert wrapper.wait(WAIT_S) == 130
        assert count.read_text() == "1"
    finally:
        if wrapper.poll() is None:
            for proc in psutil.Process(wrapper.pid).children(recursive=True):
                proc.kill()
            wrapper.kill()
            wrapper.wait(10)
        os.close(master)


def _controlling_terminal() -> None:
    """In the child, after its setsid: the pty on stdin becomes its controlling terminal, as a login's is."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


def _read_into(fd: int, seen: bytearray) -> bool:
    while select.select([fd], [], [], 0.05)[0]:
        try:
            chunk = os.read(fd, 4096)
        except OSError:
            return True
        if not chunk:
            return True
        seen += chunk
    return True


def test_stop_event_stops_gracefully_not_restarted_exit_143(tmp_path: Path) -> None:
    with Wrappers(tmp_path) as wrappers, AttachServer(wrappers.socket) as server:
        wrapper = wrappers.start(loop_command(), "--restart", "on-failure", "--backoff-s", "0")
        conn = attached(server, wrapper)
        server.send(conn, "stop", "gpuwatch stop by alice")
        assert wrapper.wait(WAIT_S) == 143
        assert [m for m in conn.messages if isinstance(m, Exited)] == [Exited(code=-signal.SIGTERM,
                                                                             restarting=False)]
    assert "stopped by the gpuwatch daemon" in wrapper.output() and "restart 1" not in wrapper.output()


STUBBORN = """
import signal, subprocess, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
code = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"
rank = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)  # like a torchrun rank
open(sys.argv[1], "w").write(str(rank.pid))
time.sleep(600)
"""


def test_a_stop_the_tree_ignores_is_killed_after_grace_ranks_in_their_own_sessions_too(tmp_path: Path) -> None:
    script, rank_pid = tmp_path / "stubborn.py", tmp_path / "rank.pid"
    script.write_text(STUBBORN)
    with Wrappers(tmp_path) as wrappers, AttachServer(wrappers.socket) as server:
        wrapper = wrappers.start(["env", sys.executable, str(script), str(rank_pid)], "--grace-s", "1")
        conn = attached(server, wrapper)
        rank = psutil.Process(int(wait_for(lambda: rank_pid.exists() and rank_pid.read_text(), "the rank", WAIT_S)))
        server.send(conn, "stop")
        assert wrapper.wait(WAIT_S) == 143
        assert wait_for(lambda: not rank.is_running() or rank.status() == psutil.STATUS_ZOMBIE, "the rank killed",
                        WAIT_S, ignore=(psutil.Error,))
    assert "still running 1 s after SIGTERM: SIGKILL" in wrapper.output()


def test_hung_event_restarts_with_restart_and_is_said_without(tmp_path: Path) -> None:
    with Wrappers(tmp_path) as wrappers, AttachServer(wrappers.socket) as server:
        plain = wrappers.start(loop_command())
        restarting = wrappers.start(loop_command(), "--restart", "on-failure:1", "--backoff-s", "0",
                                    "--grace-s", "5")
        conns = {c.attach.pid: c for c in wait_for(lambda: len(server.attached()) == 2 and server.attached(),
                                                   "both attached", WAIT_S) if c.attach}
        by_wrapper = {psutil.Process(pid).ppid(): conn for pid, conn in conns.items()}
        server.send(by_wrapper[plain.pid], "hung", "no heartbeat for 1800 s")
        server.send(by_wrapper[restarting.pid], "hung", "no heartbeat for 1800 s")
        wait_for(lambda: [m for m in by_wrapper[restarting.pid].messages if isinstance(m, Restarted)],
                 "the hung run restarted", WAIT_S, detail=restarting.output)
        wait_for(lambda: "reports this run hung (no heartbeat for 1800 s); it goes on" in plain.output(),
                 "the hung line", WAIT_S, detail=plain.output)
        assert plain.process.poll() is None


def test_under_a_configured_trainer_it_execs_and_does_not_attach(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    with Wrappers(tmp_path) as wrappers, AttachServer(wrappers.socket) as server:
        wrapper = wrappers.start(["sh", "-c", f"echo $$ > {pid_file}"], env={"GPUWATCH_RUN_ID": "/r/ddp/1"})
        assert wrapper.wait(WAIT_S) == 0
        assert int(pid_file.read_text()) == wrapper.pid and not server.conns  # the same process: exec
    assert not wrapper.run_dirs()


def test_cannot_run_the_command_127(tmp_path: Path) -> None:
    with Wrappers(tmp_path) as wrappers:
        wrapper = wrappers.start(["no-such-program-gpuwatch"])
        assert wrapper.wait(WAIT_S) == 127
    assert "gpuwatch train: cannot run 'no-such-program-gpuwatch'" in wrapper.output() and not wrapper.run_dirs()


def test_a_run_that_started_without_a_daemon_attaches_where_one_starts_later(tmp_path: Path) -> None:
    """The socket is looked up before every connect: no daemon at the start meant the user's own directory;
    the system service's, started later, is found (``client_runtime_dir``'s choice, played here by ``where``)."""
    own, system = tmp_path / "own" / "control.sock", tmp_path / "system" / "control.sock"
    own.parent.mkdir()
    system.parent.mkdir()

    def where() -> Path:
        return system if system.exists() else own

    said: list[str] = []
    link = AttachLink(where, Attach(pid=os.getpid(), argv=["python", "train.py"]), tmp_path / "hb.json",
                      tmp_path / "pause", said.append, lambda event: None).start()
    try:
        wait_for(lambda: said, "the first line", WAIT_S)
        assert said == [f"gpuwatch train: no gpuwatch daemon at {own}: this run is not protected"]
        with AttachServer(system) as server:
            conn = wait_for(lambda: server.attached(), "the attach at the system's socket", WAIT_S)[0]
            assert conn.attach is not None and conn.attach.pid == os.getpid()
            wait_for(lambda: len(said) == 2, "the attached line", WAIT_S)
            assert said[1] == "gpuwatch train: attached to the gpuwatch daemon as python"
    finally:
        link.close()


def test_a_run_dir_only_where_nobody_else_can_reach_it(tmp_path: Path) -> None:
    xdg = tmp_path / "xdg"
    xdg.mkdir(mode=0o700)
    made = make_run_dir({"XDG_RUNTIME_DIR": str(xdg)}, os.geteuid(), 42)
    assert made.path.parent == xdg / "gpuwatch" / "runs" and made.path.name.startswith("42-")
    assert stat.S_IMODE(made.path.stat().st_mode) == 0o700
    made.remove()
    other = tmp_path / "elsewhere"
    other.mkdir()
    hijacked = tmp_path / "xdg2"
    hijacked.mkdir(mode=0o700)
    (hijacked / "gpuwatch").symlink_to(other)
    with pytest.raises(RunDirError, match="is a symlink"):
        make_run_dir({"XDG_RUNTIME_DIR": str(hijacked)}, os.geteuid(), 42)
    shared = tmp_path / "xdg3"
    (shared / "gpuwatch").mkdir(parents=True)
    (shared / "gpuwatch").chmod(0o777)
    with pytest.raises(RunDirError, match="writable by others"):
        make_run_dir({"XDG_RUNTIME_DIR": str(shared)}, os.geteuid(), 42)
    # srun's job has the login node's XDG_RUNTIME_DIR (--export=ALL), which this node lacks: /tmp/gpuwatch-<uid>.
    elsewhere = make_run_dir({"XDG_RUNTIME_DIR": str(tmp_path / "login-node")}, os.geteuid(), 42)
    assert elsewhere.path.parent == Path(f"/tmp/gpuwatch-{os.geteuid()}/runs"), elsewhere
    elsewhere.remove()
    if os.geteuid() == 0:  # another user made the folder first (as in /tmp): refused, its owner named
        theirs = tmp_path / "xdg4"
        (theirs / "gpuwatch").mkdir(parents=True, mode=0o700)
        os.chown(theirs / "gpuwatch", 65534, 65534)
        with pytest.raises(RunDirError, match="belongs to uid 65534, not to you"):
            make_run_dir({"XDG_RUNTIME_DIR": str(theirs)}, os.geteuid(), 42)


@pytest.mark.parametrize("options, said", [
    (["--gpu", "28:00.9"], "--gpu '28:00.9': function 9 is not a PCI function number (0 to 7)"),
    (["--gpu", "99"], "--gpu 99: no GPU with index 99 here (index, slot, card: "),  # read as status reads it
    (["--gpu", "card99"], "--gpu card99: no DRM card card99 here (index, slot, card: "),
    (["--restart", "always"], "argument --restart: 'always': give no, on-failure or on-failure:N"),
    (["--restart", "on-failure:0"], "argument --restart: 'on-failure:0': give no, on-failure or on-failure:N"),
    (["--resume-args", "--resume {last_checkpoint}"], "--resume-args uses {last_checkpoint}: give --checkpoint-glob"),
    (["--name", "a\tb"], "--name: 1 to 64 printable characters"),
    (["--grace-s", "-1"], "argument --grace-s: -1 must be 0 to 86400 seconds"),
])
def test_bad_options_are_usage_errors_with_trains_usage(tmp_path: Path, options: list[str], said: str) -> None:
    with Wrappers(tmp_path) as wrappers:
        wrapper = wrappers.start(loop_command(), *options)
        assert wrapper.wait(WAIT_S) == 2
    lines = wrapper.output().splitlines()
    assert lines[0].startswith("usage: gpuwatch train") and said in lines[-1], lines
    assert not wrapper.run_dirs()


def test_a_beat_goes_when_the_heartbeats_change_and_unchanged_only_as_a_keepalive(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each Beat wakes a daemon thread: the heartbeats are read every interval, sent when they changed; an
    unchanged Beat goes again only after the keep-alive (shortened here; an hour first: never)."""
    monkeypatch.setattr(link_module, "BEAT_INTERVAL_S", 0.05)
    monkeypatch.setattr(link_module, "BEAT_KEEPALIVE_S", 3600.0)
    socket_path, heartbeat_file = tmp_path / "control.sock", tmp_path / "hb.json"
    with AttachServer(socket_path) as server:
        link = AttachLink(lambda: socket_path, Attach(pid=os.getpid(), argv=["python", "train.py"]), heartbeat_file,
                          tmp_path / "pause", lambda line: None, lambda event: None).start()
        try:
            conn = wait_for(lambda: server.attached(), "the attach", WAIT_S)[0]
            wait_for(lambda: conn.beats, "the first beat", WAIT_S)
            time.sleep(1.0)  # twenty reads of the same (no) heartbeats
            assert conn.beats == [Beat(heartbeats=[])]
            monkeypatch.setattr(link_module, "BEAT_KEEPALIVE_S", 0.2)  # from the next beat sent on
            write_heartbeat(heartbeat_file, Heartbeat(pid=os.getpid(), steps_total=3, last_step_unix=1.0,
                                                      steps_per_s=None, updated_unix=2.0))
            changed = wait_for(lambda: conn.beats[1:], "the changed heartbeats' beat", WAIT_S)
            assert changed[0].heartbeats[0]["steps_total"] == 3
            wait_for(lambda: len(conn.beats) >= 4, "two keep-alive beats", WAIT_S)
            assert conn.beats[2:4] == conn.beats[1:2] * 2  # the same heartbeats again
        finally:
            link.close()
