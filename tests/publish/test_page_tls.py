"""The live page behind the web config (issues 35 and 37): over TLS with ``basic_auth_users``, / and /events
answer 401 without credentials and serve the page and its stream (the snapshot, then each tick) with them;
with client certificates required, only a certificate the client CA signed gets the page and the stream;
and the stream carries no sensitive field to a client that /status would give the redacted document (not
loopback and unauthenticated, or authenticated under ``expose_sensitive = "local"``), while the full
document of the same daemon does carry them; a reader /status gives in full gets the processes' names and users
on the page too (never an argument). Real sockets, certificates made by openssl."""

from __future__ import annotations

import base64
import dataclasses
import json
import os
import socket
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import bcrypt
import pytest

from gpuwatch.config.cooling import FanConfig
from gpuwatch.config.file import Config
from gpuwatch.config.sections import ExposeSensitive, HttpConfig, ProcessesConfig
from gpuwatch.daemon.loop import Daemon
from gpuwatch.publish.document import to_document
from gpuwatch.publish.http import HttpServer
from gpuwatch.publish.live_feed import LiveFeed, page
from gpuwatch.publish.redact import SENSITIVE
from gpuwatch.publish.state import StateHolder
from gpuwatch.sim.proctree import RENDER_NODE, FakeProcTree, amdgpu_fdinfo
from tests.publish.test_redact import FRAGMENTS, SECRET_ARGV, other_local_address
from tests.support.certs import Authority
from tests.support.published import GPU_A, example_state, two_gpu_tree
from tests.support.waiting import wait_for

PASSWORD = "page-pass"
HASH = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(4)).decode()  # cost 4: fast tests, same code path
OTHER = other_local_address()  # an address of this machine that is not loopback (None: only loopback here)
LOG_PATH = "/home/alice/secret-project/resnet-run.log"


@pytest.fixture
def ca(tmp_path: Path) -> Authority:
    authority = Authority(tmp_path / "ca")
    authority.issue("server", "DNS:localhost,IP:127.0.0.1" + (f",IP:{OTHER}" if OTHER else ""))
    return authority


def web_config(tmp_path: Path, ca: Authority, users: bool) -> Path:
    web = tmp_path / "web.yml"
    web.write_text(f"tls_server_config:\n  cert_file: {ca.dir / 'server.pem'}\n"
                   f"  key_file: {ca.dir / 'server-key.pem'}\n"
                   + (f"basic_auth_users:\n  viewer: {HASH}\n" if users else ""))
    return web


class Client:
    """One HTTPS request on a raw TLS socket: the response head, then the body or one SSE message at a time."""

    def __init__(self, ca: Authority, port: int, path: str, host: str = "127.0.0.1", user: str | None = None,
                 method: str = "GET", cert: tuple[Path, Path] | None = None) -> None:
        context = ssl.create_default_context(cafile=ca.cert)
        if cert is not None:
            context.load_cert_chain(*cert)
        raw = socket.create_connection((host, port), timeout=30)
        self.method = method
        self.sock = context.wrap_socket(raw, server_hostname=host)
        auth = ("Authorization: Basic " + base64.b64encode(f"{user}:{PASSWORD}".encode()).decode() + "\r\n"
                if user else "")
        self.sock.sendall(f"{method} {path} HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n{auth}\r\n".encode())
        self.buffer = self.received = b""
        head = self._until(b"\r\n\r\n").decode("latin-1").split("\r\n")
        self.status = int(head[0].split()[1])
        self.headers = {name: value for name, _, value in (line.partition(": ") for line in head[1:])}
        self.received = self.buffer  # every byte of the body read so far

    def _read(self) -> bytes:
        chunk = self.sock.recv(65536)
        if not chunk:
            raise EOFError(self.buffer[:200])
        self.received += chunk
        return chunk

    def _until(self, end: bytes) -> bytes:
        while end not in self.buffer:
            self.buffer += self._read()
        part, _, self.buffer = self.buffer.partition(end)
        return part

    def body(self) -> bytes:
        """The rest of a response: its Content-Length (the connection stays open), else up to the close."""
        if self.method == "HEAD":
            return self.buffer
        if "Content-Length" in self.headers:
            while len(self.buffer) < int(self.headers["Content-Length"]):
                self.buffer += self._read()
            return self.buffer
        try:
            while True:
                self.buffer += self._read()
        except EOFError:
            pass
        return self.buffer

    def message(self) -> tuple[str | None, Any]:
        """The next SSE message with data: (its event name, the JSON of its data line)."""
        while True:
            lines = self._until(b"\n\n").decode().split("\n")
            fields = dict(line.split(": ", 1) for line in lines if ": " in line)
            if "data" in fields:
                return fields.get("event"), json.loads(fields["data"])

    def close(self) -> None:
        self.sock.close()


def fetch(ca: Authority, port: int, path: str, host: str = "127.0.0.1", user: str | None = None,
          method: str = "GET", cert: tuple[Path, Path] | None = None) -> tuple[int, dict[str, str], bytes]:
    client = Client(ca, port, path, host, user, method, cert)
    try:
        return client.status, client.headers, client.body()
    finally:
        client.close()


@pytest.fixture
def tls_daemon(tmp_path: Path, ca: Authority) -> Iterator[Daemon]:
    """A daemon with ``[http] web_config``: TLS and one basic auth user."""
    config = Config(sysfs_root=two_gpu_tree(tmp_path / "sys").root, runtime_dir=tmp_path / "run", interval_s=0.1,
                    fan=FanConfig(mode="off"),
                    http=HttpConfig(listen="127.0.0.1", port=0, web_config=web_config(tmp_path, ca, users=True)))
    made = Daemon(config)
    try:
        made.start_http()
        assert made.http is not None and made.http.tls
        yield made
    finally:
        made.shutdown()


def test_the_page_and_its_stream_want_credentials(tls_daemon: Daemon, ca: Authority) -> None:
    tls_daemon.tick()
    port = tls_daemon.http_port
    for path in ("/", "/index.html", "/events"):
        for user in (None, "nobody"):
            code, headers, body = fetch(ca, port, path, user=user)
            assert code == 401 and headers["WWW-Authenticate"] == 'Basic realm="gpuwatch"', (path, user, code)
            assert b"<html" not in body.lower() and b"data:" not in body
    assert fetch(ca, port, "/events", method="HEAD")[0] == 401
    assert tls_daemon.live.clients == 0  # a refused /events never took a live page's place


def test_with_credentials_the_page_and_its_stream_over_tls(tls_daemon: Daemon, ca: Authority) -> None:
    tls_daemon.tick()
    tls_daemon.tick()
    port = tls_daemon.http_port
    code, headers, body = fetch(ca, port, "/", user="viewer")
    assert code == 200 and headers["Content-Type"] == "text/html; charset=utf-8" and body == page()
    assert "connect-src 'self'" in headers["Content-Security-Policy"]  # the stream is the page's own origin: https
    client = Client(ca, port, "/events", user="viewer")
    try:
        assert client.status == 200 and "text/event-stream" in client.headers["Content-Type"]
        assert client.sock.version() in ("TLSv1.2", "TLSv1.3")
        event, snapshot = client.message()
        assert event == "snapshot" and snapshot["summary"]["tick"] == 2 and len(snapshot["points"]) == 2
        state = tls_daemon.tick()
        event, tick = client.message()
        assert event is None and tick["summary"]["tick"] == 3
        assert tick["point"]["t"] == round(state.snapshot.taken_unix, 3)
        assert tls_daemon.live.clients == 1
    finally:
        client.close()
    # Under TLS too, a page that went away gives its place back at the next tick's write.
    wait_for(lambda: tls_daemon.tick() and tls_daemon.live.clients == 0, "the closed stream to be let go",
             timeout_s=30)


def test_with_client_certificates_the_page_needs_one_the_ca_signed(tmp_path: Path, ca: Authority) -> None:
    state = example_state(tmp_path / "sys")
    holder, feed = StateHolder(), LiveFeed()
    config = Config(runtime_dir=tmp_path / "run")
    holder.publish(state, to_document(state, source="daemon"))
    feed.publish(state, config)
    web = tmp_path / "web.yml"
    web.write_text(web_config(tmp_path, ca, users=False).read_text()
                   + f"  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: {ca.cert}\n")
    other_ca = Authority(tmp_path / "other-ca", name="someone else's CA")
    server = HttpServer(holder, "127.0.0.1", 0, web_config=web, live=feed)
    server.start()
    client: Client | None = None
    try:
        for cert in (None, other_ca.issue("browser", "DNS:laptop.example", client=True)):
            with pytest.raises((ssl.SSLError, ConnectionError, EOFError)):  # refused in the handshake
                fetch(ca, server.port, "/", cert=cert)
        signed = ca.issue("browser", "DNS:laptop.example", client=True)
        code, _, body = fetch(ca, server.port, "/", cert=signed)
        assert code == 200 and body == page()
        client = Client(ca, server.port, "/events", cert=signed)
        assert client.status == 200 and client.message()[0] == "snapshot"
        feed.publish(state, config)
        assert client.message()[0] is None
    finally:
        if client is not None:
            client.close()
        server.stop()


# ---- nothing sensitive in the stream ----

def secret_daemon(tmp_path: Path, http: HttpConfig) -> Daemon:
    """A daemon whose GPU process carries a secret on its command line, serving HTTP as ``http`` says."""
    proc = FakeProcTree(tmp_path / "proc")
    proc.add_process(4242, cmdline=SECRET_ARGV, uid=os.getuid())
    proc.set_fd(4242, 7, RENDER_NODE, amdgpu_fdinfo(217, GPU_A, vram_bytes=2**30, engines_ns={"gfx": 10**9}))
    return Daemon(Config(sysfs_root=two_gpu_tree(tmp_path / "sys").root, proc_root=proc.root,
                         runtime_dir=tmp_path / "run", fan=FanConfig(mode="off"), http=http,
                         processes=ProcessesConfig(scan_all_every_s=0.1)))


def sensitive_values(document: Any) -> set[str]:
    """Every value of a SENSITIVE field in a full status document (publish/redact.py, the list's one home)."""
    values = set()
    for where, key, _ in SENSITIVE:
        top, _, sub = where.partition(".")
        rows = [row for row in document.get(top) or [] if isinstance(row, dict)]
        if sub:
            rows = [row[sub] for row in rows if isinstance(row.get(sub), dict)]
        values |= {row[key] for row in rows if isinstance(row.get(key), str) and row[key]}
    return values


# (web config with users, expose_sensitive, the remote client's user): both get the redacted /status.
REDACTED_CASES = [(False, "authenticated", None), (True, "local", "viewer")]


@pytest.mark.skipif(OTHER is None, reason="this machine has no address but loopback")
@pytest.mark.parametrize(("users", "expose", "user"), REDACTED_CASES)
def test_the_stream_carries_no_argv_secret_to_a_redacted_client(tmp_path: Path, ca: Authority, users: bool,
                                                               expose: ExposeSensitive, user: str | None) -> None:
    assert OTHER is not None
    daemon = secret_daemon(tmp_path, HttpConfig(listen="0.0.0.0", port=0, expose_sensitive=expose,
                                                web_config=web_config(tmp_path, ca, users)))
    client: Client | None = None
    try:
        def seen() -> bool:
            daemon.tick()
            document = daemon.holder.document()
            return document is not None and any(row["pid"] == 4242 for row in document["processes"])

        wait_for(seen, "the daemon to see the process with the secret argv")
        daemon.start_http()
        port = daemon.http_port
        full = fetch(ca, port, "/status", user=user)[2].decode()
        assert "--db-url=postgres://ml:PASSWORD@db/exp" in full  # the secret is there to leak (loopback: in full)
        code, _, body = fetch(ca, port, "/status", host=OTHER, user=user)
        assert code == 200 and json.loads(body)["redacted"] is True  # this client is one /status redacts for

        client = Client(ca, port, "/events", host=OTHER, user=user)
        assert client.status == 200
        assert client.message()[0] == "snapshot"
        daemon.tick()
        assert client.message()[0] is None  # and a tick
        stream = client.received.decode()
        leaks = [fragment for fragment in FRAGMENTS if fragment in stream]
        assert leaks == []
        assert not any(f'"{key}"' in stream for key in ("command", "user", "log_path", "dump_path", "cmdline"))
    finally:
        if client is not None:
            client.close()
        daemon.shutdown()


@pytest.mark.skipif(OTHER is None, reason="this machine has no address but loopback")
def test_the_stream_carries_no_sensitive_field_of_any_kind(tmp_path: Path, ca: Authority) -> None:
    """Every field publish/redact.py lists (commands, users, a trainer's log path, a reset's dump path) has a
    value in the full document, and none of those values is in the stream of a redacted client."""
    assert OTHER is not None
    state = example_state(tmp_path / "sys")
    state = dataclasses.replace(state, trainers=tuple(dataclasses.replace(t, log_path=LOG_PATH)
                                                      for t in state.trainers))
    holder, feed = StateHolder(), LiveFeed()
    config = Config(runtime_dir=tmp_path / "run")
    holder.publish(state, to_document(state, source="daemon"))
    feed.publish(state, config)
    server = HttpServer(holder, "0.0.0.0", 0, web_config=web_config(tmp_path, ca, users=False), live=feed)
    server.start()
    client: Client | None = None
    try:
        full = json.loads(fetch(ca, server.port, "/status")[2])
        secrets = sensitive_values(full)
        # Every kind is there to leak: a command, a user, a log path, a dump path.
        assert {"python3 train.py", "alice", LOG_PATH, "/var/lib/gpuwatch/gpu-resets/x-devcd3.txt"} <= secrets
        assert json.loads(fetch(ca, server.port, "/status", host=OTHER)[2])["redacted"] is True

        client = Client(ca, server.port, "/events", host=OTHER)
        assert client.status == 200 and client.message()[0] == "snapshot"
        feed.publish(state, config)
        assert client.message()[0] is None
        stream = client.received.decode()
        assert [secret for secret in secrets if secret in stream] == []
        assert '"process_count":3' in stream  # the processes counted, as /metrics counts them

        # A loopback reader gets /status in full, and the processes' names and users on the page (no argument).
        client.close()
        client = Client(ca, server.port, "/events")
        event, snapshot = client.message()
        assert event == "snapshot" and snapshot["summary"]["gpus"][0]["processes"][0]["user"] == "alice"
        feed.publish(state, config)
        _, tick = client.message()
        assert [(p["name"], p["user"]) for p in tick["summary"]["gpus"][0]["processes"]] == [
            ("python3", "alice"), ("python3", "alice"), ("gnome-shell", "bob")]
        assert "train.py" not in client.received.decode()
    finally:
        if client is not None:
            client.close()
        server.stop()
