"""Slow clients never starve a scrape: 100 real connections on 127.0.0.1 that send nothing or trickle
one byte at a time are open while /metrics is scraped; the server cuts them off at its request deadline
and says so. Latency figures come from benchmarks/scrape_latency.py --slow-clients, not from here."""

from __future__ import annotations

import logging
import socket
import threading
import urllib.request
from pathlib import Path

import pytest

from gpuwatch.config.cooling import FanConfig
from gpuwatch.config.file import Config
from gpuwatch.config.sections import HttpConfig
from gpuwatch.daemon.loop import Daemon
from gpuwatch.publish import connections as connections_module
from gpuwatch.publish.http import HttpServer
from gpuwatch.publish.serve import Server
from gpuwatch.publish.wire import Response, bind
from tests.support.published import GPU_A, two_gpu_tree
from tests.support.waiting import wait_for


def test_scrape_is_answered_while_100_slow_clients_hold_connections(tmp_path: Path,
                                                                    caplog: pytest.LogCaptureFixture) -> None:
    config = Config(sysfs_root=two_gpu_tree(tmp_path / "sys").root, runtime_dir=tmp_path / "run",
                    fan=FanConfig(mode="off"), http=HttpConfig(enabled=False))
    daemon = Daemon(config)
    daemon.tick()
    server = HttpServer(daemon.holder, "127.0.0.1", 0, request_deadline_s=2.0)
    server.start()
    idle: list[socket.socket] = []
    trickling: list[socket.socket] = []
    stop = threading.Event()

    def trickle() -> None:
        request = b"GET /metrics HTTP/1.1\r\nHost: x\r\n" + b"X-Slow: " + b"y" * 1000
        sent = 0
        while not stop.wait(0.1) and sent < len(request):
            for sock in trickling:
                try:
                    sock.send(request[sent:sent + 1])
                except OSError:
                    pass
            sent += 1

    thread = threading.Thread(target=trickle, daemon=True)
    try:
        with caplog.at_level(logging.WARNING, logger="gpuwatch.http"):
            for i in range(100):
                sock = socket.create_connection(("127.0.0.1", server.port), timeout=10)
                (idle if i % 2 else trickling).append(sock)
            thread.start()
            with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/metrics", timeout=10) as response:
                assert response.status == 200
                assert f'gpuwatch_gpu_up{{gpu="{GPU_A}"}} 1.0' in response.read().decode()
            # Past the deadline the slow ones are cut off, and the log says so (once, with a count).
            for sock in idle + trickling:
                sock.settimeout(10)
            assert all(sock.recv(1) == b"" for sock in idle)
            wait_for(lambda: any("cut off" in r.getMessage() for r in caplog.records),
                     "a warning about cut-off clients")
    finally:
        stop.set()
        for sock in idle + trickling:
            sock.close()
        server.stop()
        daemon.shutdown()


def test_a_full_client_makes_room_by_cutting_its_oldest_waiting_connection(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    from gpuwatch.publish import serve

    monkeypatch.setattr(serve, "MAX_PER_CLIENT", 10)
    daemon = Daemon(Config(sysfs_root=two_gpu_tree(tmp_path / "sys").root, runtime_dir=tmp_path / "run",
                           fan=FanConfig(mode="off"), http=HttpConfig(enabled=False)))
    daemon.tick()
    server = HttpServer(daemon.holder, "127.0.0.1", 0)
    server.start()
    idle = [socket.create_connection(("127.0.0.1", server.port), timeout=10) for _ in range(10)]
    try:
        with caplog.at_level(logging.WARNING, logger="gpuwatch.http"):
            with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/healthz", timeout=10) as response:
                assert response.status == 200
            assert idle[0].recv(1) == b""  # the oldest made room
            wait_for(lambda: any("per-client connection limit" in r.getMessage() for r in caplog.records),
                     "the warning")
    finally:
        for sock in idle:
            sock.close()
        server.stop()
        daemon.shutdown()


def test_bad_requests_are_answered_not_fatal() -> None:
    from gpuwatch.publish.state import StateHolder

    server = HttpServer(StateHolder(), "127.0.0.1", 0)
    server.start()
    try:
        for request, status in (
            (b"garbage\r\n\r\n", b"400"),
            (b"POST /metrics HTTP/1.1\r\nConnection: close\r\nContent-Length: 5\r\n\r\nhello", b"405"),
            # nothing published yet, and still serving
            (b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", b"503"),
        ):
            with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
                sock.sendall(request)
                answer = b""
                while chunk := sock.recv(4096):
                    answer += chunk
            assert answer.split(b" ", 2)[1] == status, answer
    finally:
        server.stop()


def test_the_server_says_held_back_cut_offs_when_due_without_polling(monkeypatch: pytest.MonkeyPatch,
                                                                     caplog: pytest.LogCaptureFixture) -> None:
    """Three clients that never send their request: the first cut-off is said at once, the next two held back
    and said once the period is over, by a reporter woken for them (no wake-up every second while none is held)."""
    monkeypatch.setattr(connections_module, "REPORT_EVERY_S", 0.5)
    server = Server(bind("127.0.0.1", 0), lambda request: Response(200, "text/plain", b"ok\n"), request_deadline_s=0.1)
    server.start()
    port = int(server._sock.getsockname()[1])
    clients: list[socket.socket] = []
    try:
        with caplog.at_level(logging.WARNING, logger="gpuwatch.http"):
            for _ in range(3):
                clients.append(socket.create_connection(("127.0.0.1", port), timeout=10))
                try:
                    assert clients[-1].recv(1) == b""  # cut at its deadline
                except ConnectionResetError:
                    pass
            said = [r.getMessage() for r in caplog.records]
            assert said == ["cut off 1 slow HTTP client connection(s): 1 no complete request within 0.1 s; "
                            "from 127.0.0.1 (1)"]
            wait_for(lambda: len(caplog.records) == 2, "the held cut-offs said")
        assert caplog.records[1].getMessage() == ("cut off 2 slow HTTP client connection(s): 2 no complete "
                                                   "request within 0.1 s; from 127.0.0.1 (2)")
    finally:
        for client in clients:
            client.close()
        server.stop()
