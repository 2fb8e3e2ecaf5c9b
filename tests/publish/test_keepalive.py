"""HTTP keep-alive, gzip and the web server's Go-like defaults (issue 47), on real sockets: a client sends
several requests on one connection (plain and TLS), an idle one is closed after its idle time, one is
closed after its last allowed request, idle keep-alive connections count against the caps and are the
first closed, a slow next request is still cut by the request deadline; gzip round trip; every answer
(a 400 included) carries the configured headers; two Authorization headers are refused; TLS 1.2 with RSA
key exchange is refused without ``cipher_suites``; a flood of wrong passwords from one address leaves
room for others' bcrypt checks; the dummy hash follows the configured cost. Nothing here is timed."""

from __future__ import annotations

import asyncio
import base64
import gzip
import http.client
import socket
import ssl
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import bcrypt
import pytest

from gpuwatch.config.cooling import FanConfig
from gpuwatch.config.file import Config
from gpuwatch.config.sections import HttpConfig
from gpuwatch.daemon.loop import Daemon
from gpuwatch.publish import auth
from gpuwatch.publish.auth import BasicAuth
from gpuwatch.publish.http import HttpServer
from gpuwatch.publish.serve import Server
from gpuwatch.publish.wire import Request, Response, accepts_gzip, bind, parse_head
from tests.support.certs import Authority
from tests.support.published import two_gpu_tree
from tests.support.waiting import wait_for

PASSWORD = "s3cret-scrape"


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Daemon]:
    made = Daemon(Config(sysfs_root=two_gpu_tree(tmp_path / "sys").root, runtime_dir=tmp_path / "run",
                         fan=FanConfig(mode="off"), http=HttpConfig(enabled=False)))
    made.tick()
    try:
        yield made
    finally:
        made.shutdown()


@pytest.fixture
def ca(tmp_path: Path) -> Authority:
    made = Authority(tmp_path / "ca")
    made.issue("server")
    return made


def _tls(ca: Authority, extra: str = "") -> str:
    return f"tls_server_config:\n  cert_file: {ca.dir / 'server.pem'}\n  key_file: {ca.dir / 'server-key.pem'}\n{extra}"


def _basic(user: str, password: str = PASSWORD) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def _ok_server(**kwargs: object) -> Server:
    def respond(request: Request) -> Response:
        return Response(200, "text/plain", b"ok\n")

    server = Server(bind("127.0.0.1", 0), respond, **kwargs)  # type: ignore[arg-type]
    server.start()
    return server


def _port(server: Server) -> int:
    return int(server._sock.getsockname()[1])


def _get(sock: socket.socket, path: str = "/metrics", extra: str = "") -> bytes:
    """One request on ``sock`` and its whole answer (Content-Length framed)."""
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\n{extra}\r\n".encode())
    answer = b""
    while b"\r\n\r\n" not in answer:
        chunk = sock.recv(65536)
        assert chunk, answer
        answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    length = int(next(line.split(b":", 1)[1] for line in head.split(b"\r\n")
                      if line.lower().startswith(b"content-length")))
    while len(body) < length:
        chunk = sock.recv(65536)
        assert chunk
        body += chunk
    return head + b"\r\n\r\n" + body


def test_keep_alive_serves_several_requests_on_one_plain_connection(daemon: Daemon) -> None:
    server = HttpServer(daemon.holder, "127.0.0.1", 0)
    server.start()
    try:
        connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=20)
        connection.connect()
        first = connection.sock
        for path in ("/metrics", "/healthz", "/status", "/metrics", "/nowhere"):
            connection.request("GET", path)
            response = connection.getresponse()
            response.read()
            assert response.status in (200, 404)
            assert response.getheader("Connection") is None  # HTTP/1.1: persistent unless said otherwise
            assert connection.sock is first  # the same socket: never closed by the server
        connection.close()
    finally:
        server.stop()


def test_keep_alive_over_tls_with_basic_auth(daemon: Daemon, ca: Authority, tmp_path: Path) -> None:
    hashed = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(4)).decode()
    web = tmp_path / "web.yml"
    web.write_text(_tls(ca) + f"basic_auth_users:\n  prometheus: {hashed}\n")
    server = HttpServer(daemon.holder, "127.0.0.1", 0, web_config=web)
    server.start()
    try:
        connection = http.client.HTTPSConnection("127.0.0.1", server.port, timeout=20,
                                                 context=ssl.create_default_context(cafile=ca.cert))
        connection.connect()
        first = connection.sock
        for _ in range(5):
            connection.request("GET", "/metrics", headers={"Authorization": _basic("prometheus")})
            response = connection.getresponse()
            assert response.status == 200 and b"gpuwatch_gpu_up" in response.read()
            assert connection.sock is first
        connection.request("GET", "/metrics")  # a 401 keeps the connection too
        response = connection.getresponse()
        response.read()
        assert response.status == 401 and connection.sock is first
        connection.close()
    finally:
        server.stop()


def test_an_idle_connection_is_closed_after_its_idle_time_and_max_requests_hold() -> None:
    server = _ok_server(keepalive_idle_s=0.5, max_requests=3)
    try:
        with socket.create_connection(("127.0.0.1", _port(server)), timeout=20) as sock:
            assert b" 200 " in _get(sock)
            assert sock.recv(1) == b""  # closed by the server once idle for 0.5 s
        with socket.create_connection(("127.0.0.1", _port(server)), timeout=20) as sock:
            answers = [_get(sock) for _ in range(3)]
            assert all(b"Connection: close" not in a for a in answers[:2])
            assert b"Connection: close" in answers[2]  # the last allowed request says so
            assert sock.recv(1) == b""
        with socket.create_connection(("127.0.0.1", _port(server)), timeout=20) as sock:
            assert b"Connection: close" in _get(sock, extra="Connection: close\r\n")  # the client's choice
            assert sock.recv(1) == b""
    finally:
        server.stop()


def test_a_slow_next_request_on_a_kept_connection_is_cut_by_the_request_deadline() -> None:
    server = _ok_server(request_deadline_s=1.0, keepalive_idle_s=60.0)
    try:
        with socket.create_connection(("127.0.0.1", _port(server)), timeout=20) as sock:
            assert b" 200 " in _get(sock)
            sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")  # and never the end of its head
            assert sock.recv(1) == b""  # cut at the deadline, not kept for the idle minute
    finally:
        server.stop()


def test_idle_keep_alive_connections_count_against_the_caps_and_are_closed_first() -> None:
    server = _ok_server(max_connections=8, keepalive_idle_s=600.0)
    try:
        idle = [socket.create_connection(("127.0.0.1", _port(server)), timeout=20) for _ in range(8)]
        for sock in idle:
            assert b" 200 " in _get(sock)
        waiting = socket.create_connection(("127.0.0.1", _port(server)), timeout=20)  # a 9th: over the cap
        assert b" 200 " in _get(waiting)
        assert idle[0].recv(1) == b""  # the oldest idle one was closed to make room
        assert server._connections.max_connections == 8
        wait_for(lambda: len(server._connections) <= 8, "the open connections under the cap")
        for sock in idle[1:]:
            sock.close()
        waiting.close()
    finally:
        server.stop()


def test_gzip_round_trip_when_the_client_asks(daemon: Daemon) -> None:
    server = HttpServer(daemon.holder, "127.0.0.1", 0)
    server.start()
    try:
        connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=20)
        connection.request("GET", "/metrics", headers={"Accept-Encoding": "gzip"})
        response = connection.getresponse()
        packed = response.read()
        assert response.getheader("Content-Encoding") == "gzip"
        assert response.getheader("Vary") == "Accept-Encoding"
        connection.request("GET", "/metrics")
        response = connection.getresponse()
        plain = response.read()
        assert response.getheader("Content-Encoding") is None
        assert gzip.decompress(packed) == plain and b"gpuwatch_gpu_up" in plain
        connection.close()
    finally:
        server.stop()


@pytest.mark.parametrize(("header", "expected"), [
    ("gzip", True), ("deflate, gzip;q=0.5", True), ("*", True), ("gzip;q=0", False), ("identity", False),
    ("", False), ("gzip;q=bad", False),
])
def test_accept_encoding(header: str, expected: bool) -> None:
    assert accepts_gzip({"accept-encoding": header}) is expected


def test_every_answer_carries_the_configured_headers_and_two_authorizations_are_refused(
        daemon: Daemon, ca: Authority, tmp_path: Path) -> None:
    hashed = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(4)).decode()
    web = tmp_path / "web.yml"
    web.write_text(_tls(ca) + "http_server_config:\n  headers:\n    X-Frame-Options: deny\n"
                   f"basic_auth_users:\n  prometheus: {hashed}\n")
    server = HttpServer(daemon.holder, "127.0.0.1", 0, web_config=web)
    server.start()
    context = ssl.create_default_context(cafile=ca.cert)
    try:
        for request in (b"garbage\r\n\r\n",
                        ("GET /metrics HTTP/1.1\r\nHost: x\r\nAuthorization: " + _basic("prometheus") +
                         "\r\nAuthorization: " + _basic("prometheus", "other") + "\r\n\r\n").encode()):
            with socket.create_connection(("127.0.0.1", server.port), timeout=20) as raw:
                with context.wrap_socket(raw, server_hostname="127.0.0.1") as sock:
                    sock.sendall(request)
                    answer = b""
                    while chunk := sock.recv(65536):
                        answer += chunk
            assert answer.startswith(b"HTTP/1.1 400 "), answer
            assert b"\r\nX-Frame-Options: deny\r\n" in answer and b"Connection: close" in answer
        with pytest.raises(ValueError, match="more than one Authorization"):
            parse_head(b"GET / HTTP/1.1\r\nAuthorization: a\r\nauthorization: b\r\n\r\n")
    finally:
        server.stop()


def _rsa_certificate(directory: Path) -> tuple[Path, Path]:
    cert, key = directory / "rsa.pem", directory / "rsa-key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
                    "-subj", "/CN=127.0.0.1", "-days", "2", "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True, timeout=120)
    return cert, key


def _tls12_handshake(port: int, ciphers: str) -> str:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    context.maximum_version = ssl.TLSVersion.TLSv1_2
    context.set_ciphers(ciphers)
    with socket.create_connection(("127.0.0.1", port), timeout=20) as raw:
        with context.wrap_socket(raw) as sock:
            cipher = sock.cipher()
            assert cipher is not None
            return cipher[0]


def test_tls12_without_cipher_suites_refuses_rsa_key_exchange(daemon: Daemon, tmp_path: Path) -> None:
    cert, key = _rsa_certificate(tmp_path)
    web = tmp_path / "web.yml"
    web.write_text(f"tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\n")
    server = HttpServer(daemon.holder, "127.0.0.1", 0, web_config=web)
    server.start()
    try:
        for rsa_kex in ("AES128-SHA", "AES256-GCM-SHA384"):
            with pytest.raises(ssl.SSLError):
                _tls12_handshake(server.port, rsa_kex)
        assert _tls12_handshake(server.port, "ECDHE-RSA-AES128-GCM-SHA256") == "ECDHE-RSA-AES128-GCM-SHA256"
    finally:
        server.stop()
    # Named in cipher_suites, RSA key exchange is the operator's choice and honoured (as in Go).
    web.write_text(f"tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\n"
                   "  cipher_suites: [TLS_RSA_WITH_AES_128_CBC_SHA]\n")
    server = HttpServer(daemon.holder, "127.0.0.1", 0, web_config=web)
    server.start()
    try:
        assert _tls12_handshake(server.port, "AES128-SHA") == "AES128-SHA"
    finally:
        server.stop()


def test_a_password_flood_from_one_address_leaves_room_for_other_logins(
        daemon: Daemon, ca: Authority, tmp_path: Path) -> None:
    """A real flood of wrong passwords from 127.0.0.2 while a correct client on 127.0.0.1 (its password not
    yet verified: a restarted daemon) and a correct new user on 127.0.0.3 log in: no 429 for them."""
    cost10 = {user: bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(10)).decode() for user in ("prometheus", "alice")}
    web = tmp_path / "web.yml"
    web.write_text(_tls(ca) + "basic_auth_users:\n" + "".join(f"  {u}: {h}\n" for u, h in cost10.items()))
    server = HttpServer(daemon.holder, "127.0.0.1", 0, web_config=web)
    server.start()
    context = ssl.create_default_context(cafile=ca.cert)
    flood: list[int] = []
    stop = threading.Event()

    def get(source: str, user: str, password: str) -> int:
        connection = http.client.HTTPSConnection("127.0.0.1", server.port, timeout=120, context=context,
                                                 source_address=(source, 0))
        try:
            connection.request("GET", "/metrics", headers={"Authorization": _basic(user, password)})
            response = connection.getresponse()
            response.read()
            return response.status
        finally:
            connection.close()

    def guess() -> None:
        while not stop.is_set():
            flood.append(get("127.0.0.2", "prometheus", "guess"))

    guessers = [threading.Thread(target=guess) for _ in range(30)]
    for thread in guessers:
        thread.start()
    try:
        wait_for(lambda: 401 in flood and 429 in flood, "the flood answered 401 and 429", timeout_s=120)
        assert get("127.0.0.1", "prometheus", PASSWORD) == 200
        assert get("127.0.0.3", "alice", PASSWORD) == 200
        assert get("127.0.0.1", "prometheus", PASSWORD) == 200  # cached now
    finally:
        stop.set()
        for thread in guessers:
            thread.join(180)
        server.stop()
    assert set(flood) <= {401, 429}


def test_bcrypt_budget_is_shared_per_address_with_room_for_clean_ones() -> None:
    """The admission rule as a table: per-address cap, then the failing addresses' share."""
    now = [0.0]
    checker = BasicAuth(monotonic=lambda: now[0])
    try:
        checker._pending.update({"10.0.0.1": auth.MAX_PENDING_PER_CLIENT})
        assert not checker.admits("10.0.0.1") and checker.admits("10.0.0.2")
        checker._pending.clear()
        for index in range(auth.MAX_PENDING - auth.RESERVED_FOR_CLEAN):
            checker._failed(f"10.0.1.{index}")
            checker._pending[f"10.0.1.{index}"] = 1
        checker._failed("10.0.2.1")
        assert not checker.admits("10.0.2.1")  # failing addresses have used their share
        assert checker.admits("10.0.2.2")  # a clean one still gets in
        now[0] = auth.FAILURE_MEMORY_S + 1  # a minute later they are clean again
        assert checker.admits("10.0.2.1")
    finally:
        checker.close()


def test_the_dummy_hash_for_unknown_users_follows_the_configured_cost(monkeypatch: pytest.MonkeyPatch) -> None:
    checked: list[bytes] = []
    real = bcrypt.checkpw

    def spy(password: bytes, hashed: bytes) -> bool:
        checked.append(hashed)
        return real(password, hashed)

    monkeypatch.setattr(bcrypt, "checkpw", spy)
    users = {"low": bcrypt.hashpw(b"x", bcrypt.gensalt(4)).decode(),
             "high": bcrypt.hashpw(b"x", bcrypt.gensalt(5)).decode()}
    checker = BasicAuth()
    try:
        assert asyncio.run(checker.check(users, "nobody", "x")) == "denied"
        assert asyncio.run(checker.check({}, "nobody", "x")) == "denied"
    finally:
        checker.close()
    assert checked[0].startswith(b"$2b$05$")  # the highest configured cost
    assert checked[1].startswith(b"$2b$10$")  # none configured: htpasswd -B's


def test_metrics_are_rendered_ahead_once_scraped_and_not_before(daemon: Daemon) -> None:
    server = HttpServer(daemon.holder, "127.0.0.1", 0)
    server.start()
    cache = server._metrics
    try:
        daemon.tick()
        assert cache._rendered_for is None  # nobody scraped yet: nothing rendered ahead
        connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=20)
        connection.request("GET", "/metrics")
        connection.getresponse().read()
        connection.close()
        state = daemon.tick()
        wait_for(lambda: cache._rendered_for is state and cache._gzipped is not None,
                 "the new tick's /metrics rendered and compressed before any scrape asked")
    finally:
        server.stop()


# What Prometheus 2.x sends (scrape/scrape.go's acceptHeader), as benchmarks/scrape_loop.py does.
_PROMETHEUS = {"Accept": "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;"
               "q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1", "Accept-Encoding": "gzip",
               "User-Agent": "Prometheus/2.53.0"}


def test_one_render_per_tick_however_the_scrapes_fall(daemon: Daemon, monkeypatch: pytest.MonkeyPatch) -> None:
    """A scrape just after a tick (before the prerender got to it) or long after renders nothing twice: each
    published state is rendered once, and a scrape of an unchanged state is sent from the cached bytes."""
    server = HttpServer(daemon.holder, "127.0.0.1", 0)
    cache = server._metrics
    renders: list[object] = []
    render = cache._text

    def counted(registry: object) -> bytes:
        renders.append(daemon.holder.latest())
        return render(registry)  # type: ignore[arg-type]

    monkeypatch.setattr(cache, "_text", counted)
    server.start()
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=20)
    try:
        for tick in range(6):
            state = daemon.tick()
            for _ in range(tick % 3 + 1):  # one, two or three scrapes of the same state on the kept connection
                connection.request("GET", "/metrics", headers=_PROMETHEUS)
                response = connection.getresponse()
                body = gzip.decompress(response.read())
                assert response.status == 200 and b"gpuwatch_gpu_up" in body
            wait_for(lambda: cache._rendered_for is state, "the tick's state rendered")  # noqa: B023
        assert len(renders) == 6 and len({id(s) for s in renders}) == 6
    finally:
        connection.close()
        server.stop()


@pytest.mark.parametrize(("head", "headers_or_error"), [
    (b"GET /metrics HTTP/1.1\r\nHost: x\r\nAccept-Encoding:  gzip \t\r\nX-A: 1\r\nx-a: 2\r\n\r\n",
     {"host": "x", "accept-encoding": "gzip", "x-a": "2"}),  # the last value of a repeated header
    (b"GET / HTTP/1.1\r\nHost: x\nAccept: */*\r\n\r\n", {"host": "x", "accept": "*/*"}),  # a bare LF ends a line
    (b"GET / HTTP/1.1\r\nX-Empty:\r\n\r\n", {"x-empty": ""}),
    (b"GET / HTTP/1.1\r\n\r\n", {}),
    (b"GET / HTTP/1.1\r\nHost: x\r\n folded\r\n\r\n", "malformed header line"),  # RFC 9112 5.2
    (b"GET / HTTP/1.1\r\nHost : x\r\n\r\n", "malformed header line"),  # RFC 9112 5.1
    (b"GET / HTTP/1.1\r\nNo colon here\r\nAuthorization: a\r\n\r\n", "malformed header line"),
    (b"GET / HTTP/1.1\r\n: x\r\n\r\n", "malformed header line"),
    (b"GET / HTTP/1.1\r\nX: a\rb\r\n\r\n", "bad character"),
    (b"GET / HTTP/1.1\r\nX: a\0b\r\n\r\n", "bad character"),
    (b"GET / HTTP/1.1\r\n" + b"X: 1\r\n" * 101 + b"\r\n", "more than 100 headers"),
    (b"GET / HTTP/1.1\r\nContent-Length: 1\r\ncontent-length: 2\r\n\r\n", "more than one Content-Length"),
    (b"GET / HTTP/1.1\r\nHost: a\r\nHOST: b\r\n\r\n", "more than one Host"),
    (b"GET / HTTP/1.1\r\nContent-Length: -1\r\n\r\n", "bad Content-Length"),
    (b"GET / HTTP/1.1\r\nContent-Length: +1\r\n\r\n", "bad Content-Length"),  # 1*DIGIT, which int() is not
    (b"GET / HTTP/1.1\r\nContent-Length: 1_0\r\n\r\n", "bad Content-Length"),
    (b"GET / HTTP/1.1\r\nContent-Length: \xd9\xa1\r\n\r\n", "bad Content-Length"),  # not an ASCII digit
    (b"GET / HTTP/2\r\n\r\n", "not an HTTP/1.x request line"),
])
def test_parse_head(head: bytes, headers_or_error: dict[str, str] | str) -> None:
    if isinstance(headers_or_error, str):
        with pytest.raises(ValueError, match=headers_or_error):
            parse_head(head)
    else:
        assert parse_head(head).headers == headers_or_error
