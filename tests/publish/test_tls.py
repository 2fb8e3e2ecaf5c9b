"""The endpoint over TLS with a web config (issue 35), on real sockets with certificates made by openssl:
basic auth (401, a wrong password, the verified-password cache), client certificates per client_auth_type,
response headers, a handshake that never finishes cut at the deadline and counted against the per-client
cap, certificates replaced on disk (an expired one too) picked up without a restart, a broken one kept out."""

from __future__ import annotations

import asyncio
import base64
import http.client
import logging
import shutil
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import bcrypt
import pytest

from gpuwatch.config.cooling import FanConfig
from gpuwatch.config.file import Config
from gpuwatch.config.sections import HttpConfig
from gpuwatch.daemon.loop import Daemon
from gpuwatch.publish.auth import BasicAuth, credentials
from gpuwatch.publish.http import HttpServer
from tests.support.certs import Authority
from tests.support.published import GPU_A, two_gpu_tree
from tests.support.waiting import wait_for

PASSWORD = "s3cret-scrape"
HASH = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(4)).decode()  # cost 4: fast tests, same code path


@dataclass
class Reply:
    status: int
    headers: http.client.HTTPMessage
    body: str


@dataclass
class Rig:
    tmp: Path
    ca: Authority
    web: Path
    daemon: Daemon
    server: HttpServer | None = None

    def serve(self, web: str, **kwargs: object) -> HttpServer:
        self.web.write_text(web)
        self.server = HttpServer(self.daemon.holder, "127.0.0.1", 0, web_config=self.web, **kwargs)  # type: ignore[arg-type]
        self.server.start()
        return self.server

    def client(self, cert: tuple[Path, Path] | None = None, ca: Path | None = None) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=ca or self.ca.cert)
        if cert is not None:
            context.load_cert_chain(*cert)
        return context

    def get(self, path: str = "/metrics", context: ssl.SSLContext | None = None, user: str | None = None,
            password: str = PASSWORD, timeout_s: float = 20) -> Reply:
        assert self.server is not None
        connection = http.client.HTTPSConnection("127.0.0.1", self.server.port, context=context or self.client(),
                                                 timeout=timeout_s)
        headers = {}
        if user is not None:
            headers["Authorization"] = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
        try:
            connection.request("GET", path, headers=headers)
            response = connection.getresponse()
            return Reply(response.status, response.headers, response.read().decode())
        finally:
            connection.close()


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Rig]:
    daemon = Daemon(Config(sysfs_root=two_gpu_tree(tmp_path / "sys").root, runtime_dir=tmp_path / "run",
                           fan=FanConfig(mode="off"), http=HttpConfig(enabled=False)))
    daemon.tick()
    ca = Authority(tmp_path / "ca")
    ca.issue("server")
    made = Rig(tmp_path, ca, tmp_path / "web.yml", daemon)
    try:
        yield made
    finally:
        if made.server is not None:
            made.server.stop()
        daemon.shutdown()


def tls(ca: Authority, extra: str = "") -> str:
    return f"tls_server_config:\n  cert_file: {ca.dir / 'server.pem'}\n  key_file: {ca.dir / 'server-key.pem'}\n{extra}"


def test_basic_auth_over_tls_401_without_or_with_a_wrong_password(rig: Rig) -> None:
    rig.serve(tls(rig.ca) + f"basic_auth_users:\n  prometheus: {HASH}\n"
              "http_server_config:\n  http2: false\n  headers:\n    X-Content-Type-Options: nosniff\n"
              "    Strict-Transport-Security: max-age=31536000\n")
    anonymous = rig.get()
    assert anonymous.status == 401 and anonymous.headers["WWW-Authenticate"] == 'Basic realm="gpuwatch"'
    assert anonymous.headers["Strict-Transport-Security"] == "max-age=31536000"  # on a refusal too
    assert rig.get(user="prometheus", password="wrong").status == 401
    assert rig.get(user="nobody").status == 401
    for _ in range(2):  # the second one from the cache
        good = rig.get(user="prometheus")
        assert good.status == 200 and f'gpuwatch_gpu_up{{gpu="{GPU_A}"}} 1.0' in good.body
        assert good.headers["X-Content-Type-Options"] == "nosniff"
    assert rig.get("/healthz", user="prometheus").status == 200


def test_plain_http_to_the_tls_port_is_refused_and_counted(rig: Rig, caplog: pytest.LogCaptureFixture) -> None:
    server = rig.serve(tls(rig.ca))
    with caplog.at_level(logging.WARNING, logger="gpuwatch.http"):
        with socket.create_connection(("127.0.0.1", server.port), timeout=20) as sock:
            sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            data = b""
            while chunk := sock.recv(4096):
                data += chunk
            assert b"gpuwatch_" not in data
        assert rig.get().status == 200
        server.stop()  # the cut-off summary is written at the stop at the latest
    assert any("TLS handshake failed" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("auth_type", ["RequireAndVerifyClientCert", "VerifyClientCertIfGiven"])
def test_client_certificates_from_another_ca_are_refused(rig: Rig, auth_type: str) -> None:
    rig.serve(tls(rig.ca, f"  client_auth_type: {auth_type}\n  client_ca_file: {rig.ca.cert}\n"))
    trusted = rig.ca.issue("scraper", "DNS:scraper.example", client=True)
    stranger = Authority(rig.tmp / "other", "another CA").issue("intruder", "DNS:scraper.example", client=True)
    assert rig.get(context=rig.client(trusted)).status == 200
    with pytest.raises((ssl.SSLError, ConnectionError)):
        rig.get(context=rig.client(stranger))
    if auth_type == "RequireAndVerifyClientCert":
        with pytest.raises((ssl.SSLError, ConnectionError)):
            rig.get()  # no certificate at all
    else:
        assert rig.get().status == 200  # none given: allowed


def test_client_allowed_sans_answer_403_to_other_names(rig: Rig) -> None:
    rig.serve(tls(rig.ca, f"  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: {rig.ca.cert}\n"
                  "  client_allowed_sans: [prometheus.example]\n"))
    allowed = rig.ca.issue("prometheus", "DNS:prometheus.example", client=True)
    other = rig.ca.issue("other", "DNS:laptop.example", client=True)
    assert rig.get(context=rig.client(allowed)).status == 200
    assert rig.get(context=rig.client(other)).status == 403


def test_a_client_that_never_finishes_its_handshake_is_cut_and_counts_against_its_cap(
        rig: Rig, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    from gpuwatch.publish import serve

    monkeypatch.setattr(serve, "MAX_PER_CLIENT", 10)
    rig.web.write_text(tls(rig.ca) + f"basic_auth_users:\n  prometheus: {HASH}\n")
    server = HttpServer(rig.daemon.holder, "127.0.0.1", 0, request_deadline_s=2.0, web_config=rig.web)
    rig.server = server
    server.start()
    with caplog.at_level(logging.WARNING, logger="gpuwatch.http"):
        stalled = [socket.create_connection(("127.0.0.1", server.port), timeout=20) for _ in range(10)]
        try:
            stalled[1].sendall(b"\x16\x03\x01\x00\xff\x01")  # the start of a ClientHello, never the rest
            # Ten handshakes in progress fill this address's cap: a scrape still gets in, the oldest makes room.
            assert rig.get(user="prometheus").status == 200
            assert stalled[0].recv(1) == b""
            # The others are cut at the deadline, handshake or not.
            for sock in stalled[1:]:
                assert sock.recv(1) == b""
            wait_for(lambda: any("no TLS handshake within 2 s" in r.getMessage() for r in caplog.records),
                     "the warning about stalled handshakes")
            assert any("per-client connection limit" in r.getMessage() for r in caplog.records)
        finally:
            for sock in stalled:
                sock.close()


def test_a_flood_of_wrong_passwords_is_bounded_and_a_cached_scrape_still_gets_in(rig: Rig) -> None:
    """bcrypt runs on one worker off the event loop; past MAX_PENDING waiting checks the answer is 429."""
    slow = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(12)).decode()  # a quarter second a check or more
    rig.serve(tls(rig.ca) + f"basic_auth_users:\n  prometheus: {slow}\n")
    assert rig.get(user="prometheus").status == 200  # verified once: cached from here on
    statuses: list[int] = []
    lock = threading.Lock()

    def guess() -> None:
        status = rig.get(user="prometheus", password="guess", timeout_s=110).status  # 8 queued checks, loaded
        with lock:
            statuses.append(status)

    guessers = [threading.Thread(target=guess) for _ in range(20)]
    for thread in guessers:
        thread.start()
    try:
        wait_for(lambda: len(statuses) >= 1, "a first answer to the guessers", timeout_s=60)
        assert rig.get(user="prometheus").status == 200  # the cached password is answered meanwhile
    finally:
        for thread in guessers:
            thread.join(120)
    assert set(statuses) <= {401, 429} and 429 in statuses and 401 in statuses, statuses


def _served_expiry(rig: Rig) -> float:
    """The notAfter of the certificate a new connection gets."""
    assert rig.server is not None
    context = ssl.create_default_context(cafile=rig.ca.cert)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE  # an expired one must be seen too
    with socket.create_connection(("127.0.0.1", rig.server.port), timeout=20) as raw:
        with context.wrap_socket(raw, server_hostname="127.0.0.1") as sock:
            der = sock.getpeercert(binary_form=True)
    assert der is not None
    from gpuwatch.publish.tls import certificate_expiry_unix

    expiry = certificate_expiry_unix(ssl.DER_cert_to_PEM_cert(der).encode())
    assert expiry is not None
    return expiry


def _expiry_metric(rig: Rig) -> str:
    rig.daemon.tick()  # /metrics is rendered once per published state
    body = rig.get().body
    return next(line for line in body.splitlines() if line.startswith("gpuwatch_web_certificate_expiry"))


def test_an_expired_certificate_replaced_on_disk_is_served_without_a_restart(
        rig: Rig, caplog: pytest.LogCaptureFixture) -> None:
    now = time.time()
    cert, key = rig.ca.issue("expired", not_before=now - 7200, not_after=now - 60)
    live_cert, live_key = rig.tmp / "live.pem", rig.tmp / "live-key.pem"
    shutil.copy(cert, live_cert)
    shutil.copy(key, live_key)
    rig.serve(f"tls_server_config:\n  cert_file: {live_cert}\n  key_file: {live_key}\n")
    with pytest.raises(ssl.SSLCertVerificationError, match="expired"):
        rig.get()
    fresh_cert, fresh_key = rig.ca.issue("fresh", not_after=now + 30 * 86400)
    # Rotation as certbot's deploy hooks do it: new files renamed into place (key first, then the certificate).
    for source, target in ((fresh_key, live_key), (fresh_cert, live_cert)):
        shutil.copy(source, target.with_suffix(".new"))
        target.with_suffix(".new").replace(target)
    wait_for(lambda: abs(_served_expiry(rig) - (now + 30 * 86400)) < 5, "the new certificate served", timeout_s=30)
    assert rig.get().status == 200
    expiry = float(_expiry_metric(rig).split()[-1])
    assert abs(expiry - (now + 30 * 86400)) < 5


def test_a_broken_replacement_keeps_the_old_certificate_and_says_so_once(
        rig: Rig, caplog: pytest.LogCaptureFixture) -> None:
    now = time.time()
    cert, key = rig.ca.issue("first", not_after=now + 86400)
    live_cert, live_key = rig.tmp / "live.pem", rig.tmp / "live-key.pem"
    shutil.copy(cert, live_cert)
    shutil.copy(key, live_key)
    server = rig.serve(f"tls_server_config:\n  cert_file: {live_cert}\n  key_file: {live_key}\n")
    with caplog.at_level(logging.ERROR, logger="gpuwatch.http"):
        live_key.write_text("-----BEGIN PRIVATE KEY-----\nhalf a key")
        wait_for(lambda: rig.get().status == 200 and any("cannot be used" in r.getMessage()
                                                          for r in caplog.records), "the error", timeout_s=30)
        for _ in range(3):  # a second apart: still the old certificate, no new line
            time.sleep(0.4)  # lets CHECK_EVERY_S pass between connections (not a synchronisation)
            assert rig.get().status == 200
        assert sum("cannot be used" in r.getMessage() for r in caplog.records) == 1
        assert abs(_served_expiry(rig) - (now + 86400)) < 5
        # Fixed and reloaded (SIGHUP does this): the new pair is used.
        second_cert, second_key = rig.ca.issue("second", not_after=now + 2 * 86400)
        shutil.copy(second_key, live_key)
        shutil.copy(second_cert, live_cert)
        server.reload()
        assert abs(_served_expiry(rig) - (now + 2 * 86400)) < 5


def test_without_tls_there_is_no_expiry_series(rig: Rig) -> None:
    rig.serve("basic_auth_users: {}\n")
    assert rig.server is not None
    connection = http.client.HTTPConnection("127.0.0.1", rig.server.port, timeout=20)
    connection.request("GET", "/metrics")
    body = connection.getresponse().read().decode()
    connection.close()
    assert "gpuwatch_gpu_up" in body and "web_certificate_expiry" not in body


def test_credentials_parse_only_basic_headers() -> None:
    def basic(text: bytes) -> str:
        return "Basic " + base64.b64encode(text).decode()

    assert credentials(basic(b"alice:pa:ss")) == ("alice", "pa:ss")
    assert credentials("basic " + base64.b64encode(b"a:").decode()) == ("a", "")
    for bad in (None, "", "Bearer abc", "Basic !!!", basic(b"no-colon"), basic(b"\xff:x")):
        assert credentials(bad) is None


def test_the_verified_password_cache_remembers_only_a_right_password_for_the_current_hash() -> None:
    auth = BasicAuth()
    users = {"alice": HASH}
    try:
        assert not auth.cached(users, "alice", PASSWORD)
        assert asyncio.run(auth.check(users, "alice", "wrong")) == "denied"
        assert not auth.cached(users, "alice", "wrong")  # a wrong password is never remembered
        assert asyncio.run(auth.check(users, "nobody", PASSWORD)) == "denied"
        assert asyncio.run(auth.check(users, "alice", PASSWORD)) == "ok"
        assert auth.cached(users, "alice", PASSWORD) and not auth.cached(users, "alice", PASSWORD + "x")
        # The web config's hash changed (a new password): verified again, not from the cache.
        changed = {"alice": bcrypt.hashpw(b"new", bcrypt.gensalt(4)).decode()}
        assert not auth.cached(changed, "alice", PASSWORD)
        assert asyncio.run(auth.check(changed, "alice", PASSWORD)) == "denied"
    finally:
        auth.close()
