"""Issue 31 point 11: one stuck local client must not block the control socket, and a command whose
client gave up is never carried out later. Real unix sockets; the first test through the real daemon."""

from __future__ import annotations

import os
import pwd
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
import tomli_w

from gpuwatch.attach import connect_retrying
from gpuwatch.daemon.control import MAX_CLIENTS, ControlError, ControlServer, send_command
from gpuwatch.sim.tree import FakeSysfsTree
from tests.support.processes import Processes
from tests.support.stack import GPUWATCH
from tests.support.trees import capture
from tests.support.waiting import wait_for

WORKER = """
import sys, time
open(sys.argv[1], "w").close()
while True:
    time.sleep(0.05)
"""


def _connect(path: Path) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(str(path))
    return sock


def test_silent_and_trickling_clients_do_not_block_pause(short_dir: Path, fake_sysfs: FakeSysfsTree) -> None:
    fake_sysfs.add_capture(capture("navi21-rx6900xt-sapphire-nitro"), card="card0", pci_slot="0000:03:00.0")
    worker = short_dir / "w.py"
    worker.write_text(textwrap.dedent(WORKER))
    config = short_dir / "g.toml"
    run = short_dir / "run"
    config.write_text(tomli_w.dumps({
        "runtime_dir": str(run), "sysfs_root": str(fake_sysfs.root), "interval_s": 0.1,
        "http": {"enabled": False}, "fan": {"mode": "monitor-only"},
        "trainer": [{"name": "yolo", "command": [sys.executable, str(worker), str(short_dir / "ready")],
                     "grace_s": 5, "user": pwd.getpwuid(os.geteuid()).pw_name}],
    }))
    stop = threading.Event()
    held: list[socket.socket] = []
    with Processes(short_dir / "logs") as processes:
        daemon = processes.start("daemon", [*GPUWATCH, "run", "-c", str(config)])
        wait_for((short_dir / "ready").exists, "the trainer to run", 60, detail=daemon.tail)
        control = run / "control.sock"
        # More silent connections than the server reads at once, and one that trickles a byte a second.
        held.extend(_connect(control) for _ in range(MAX_CLIENTS + 8))
        trickler = _connect(control)
        held.append(trickler)

        def trickle() -> None:
            for byte in b'{"cmd": "pause", "name": "yolo"}':
                if stop.wait(1.0):
                    return
                try:
                    trickler.send(bytes([byte]))
                except OSError:
                    return

        thread = threading.Thread(target=trickle, daemon=True)
        thread.start()
        try:
            for verb in ("pause", "resume", "pause"):
                done = subprocess.run([*GPUWATCH, verb, "yolo", "-c", str(config)], capture_output=True,
                                      text=True, timeout=60)
                assert done.returncode == 0, done.stderr
                assert f"{verb} requested for yolo" in done.stdout
        finally:
            stop.set()
            for sock in held:
                sock.close()
            thread.join(5)
        assert "Traceback" not in daemon.tail(100_000)


def test_a_command_whose_client_gave_up_is_not_carried_out_later(short_dir: Path) -> None:
    calls: list[tuple[str, str | None]] = []
    first_in, release = threading.Event(), threading.Event()

    def handler(cmd: str, name: str | None) -> tuple[bool, str]:
        calls.append((cmd, name))
        if len(calls) == 1:
            first_in.set()
            release.wait(30)  # the daemon busy with the first command
        return True, f"{cmd} done"

    server = ControlServer(short_dir / "control.sock", handler)
    server.start()
    try:
        first = threading.Thread(target=send_command, args=(short_dir / "control.sock", "restart", "a", 60.0))
        first.start()
        assert first_in.wait(30)
        with pytest.raises(ControlError, match="did not answer within 0.5 s: pause not carried out"):
            send_command(short_dir / "control.sock", "pause", "b", timeout_s=0.5)
        release.set()
        first.join(30)
        # The pause reached the server but its client is gone: it is dropped, not carried out late.
        assert send_command(short_dir / "control.sock", "resume", "c") == (True, "resume done")
        assert calls == [("restart", "a"), ("resume", "c")]
    finally:
        release.set()
        server.stop()


def _full_backlog(path: Path) -> tuple[socket.socket, list[socket.socket]]:
    """A listener that accepts nothing, its backlog filled until a connect gets EAGAIN."""
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(0)
    queued: list[socket.socket] = []
    while True:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.setblocking(False)
        try:
            sock.connect(str(path))
        except BlockingIOError:
            sock.close()
            return server, queued
        queued.append(sock)


def test_a_client_retries_a_full_backlog_within_its_deadline(short_dir: Path) -> None:
    """Issue 46 item 8: a unix socket's connect with a timeout fails at once with EAGAIN on a full backlog (another
    user's connect/close flood); the client tries again until its deadline, and gets in once there is room."""
    path = short_dir / "full.sock"
    server, queued = _full_backlog(path)
    try:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(0.5)
        with pytest.raises(BlockingIOError):
            connect_retrying(sock, str(path), time.monotonic() + 0.3)  # never room: the last error, in time
        sock.close()
        room = threading.Timer(0.5, lambda: server.accept()[0].close())
        room.start()
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(5.0)
        connect_retrying(sock, str(path), time.monotonic() + 30)
        sock.close()
        room.join()
    finally:
        for queued_sock in queued:
            queued_sock.close()
        server.close()


def test_a_client_retries_a_daemon_not_listening_yet(short_dir: Path) -> None:
    path = short_dir / "late.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))  # the file is there, nothing listens: ECONNREFUSED
    try:
        late = threading.Timer(0.1, lambda: server.listen(1))
        late.start()
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(5.0)
        connect_retrying(sock, str(path), time.monotonic() + 30)
        sock.close()
        late.join()
    finally:
        server.close()


def test_a_socket_file_nobody_listens_on_is_refused_within_the_grace_not_the_deadline(short_dir: Path) -> None:
    """A daemon that is gone left its socket file: "not running" is said after the short grace, not the deadline."""
    path = short_dir / "stale.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    try:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        started = time.monotonic()
        with pytest.raises(ConnectionRefusedError):
            connect_retrying(sock, str(path), started + 30)
        assert time.monotonic() - started < 10  # the grace (half a second), never the 30 s deadline
        sock.close()
    finally:
        server.close()
