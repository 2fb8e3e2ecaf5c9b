"""`status --remote`'s fetching (gpuwatch/cli/remote.py) against real sockets on 127.0.0.1 that fail in
every way a host can: refused, silent (timeout), not HTTP, HTTP errors, not JSON, not a status document;
and the command itself: one table, exit codes, usage errors as one line."""

from __future__ import annotations

import errno
import json
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from gpuwatch.cli.remote import HostResult, fetch, fetch_all
from gpuwatch.config.sections import remote_base_url
from gpuwatch.publish.document import to_document
from tests.support.endpoints import Routes, banner_server, http_server, refused_address, silent_listener
from tests.support.published import example_state

Serve = Callable[[Routes], str]


@pytest.fixture(scope="module")
def document(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    doc = to_document(example_state(tmp_path_factory.mktemp("remote") / "sys"), "daemon")
    assert doc["daemon"]
    doc["daemon"]["failures"] = []
    doc["gpus"] = [g for g in doc["gpus"] if g["up"] and not (g["fan_controller"] or {}).get("stalled")]
    doc["taken_unix"] = 1.0  # 1970: a clock far off ours must not read as stale
    return json.dumps(doc).encode()


@pytest.fixture
def serve() -> Iterator[Serve]:
    """serve(routes) -> the base URL of an HTTP server answering GETs from ``routes``."""
    with ExitStack() as stack:
        yield lambda routes: "http://" + stack.enter_context(http_server(routes))


def test_a_healthy_host_with_a_skewed_clock_is_fresh(serve: Serve, document: bytes) -> None:
    url = serve({"/status": (200, document), "/healthz": (200, b"ok\n")})
    result = fetch(url, 2.0)
    assert result.error is None and result.stale is None and result.document is not None
    assert result.document["taken_unix"] == 1.0 and result.host == url.removeprefix("http://")


def test_a_stuck_daemon_is_stale_by_its_own_healthz(serve: Serve, document: bytes) -> None:
    url = serve({"/status": (200, document),
                 "/healthz": (503, b"last sample is 31.2s old: the control loop is stuck\n")})
    assert fetch(url, 2.0).stale == "last sample is 31.2s old: the control loop is stuck"


@pytest.mark.parametrize(("routes", "error"), [
    ({"/status": (200, b"<html>hello</html>")}, "bad response: not JSON (is this gpuwatch's HTTP port?)"),
    ({"/status": (200, b'{"hello": 1}')}, "bad response: JSON, but not a gpuwatch status document"),
    ({"/status": (200, b'{"schema": 2, "gpus": []}')}, "bad response: status document schema 2, this gpuwatch reads 1"),
    ({}, "HTTP 404: not found"),
    ({"/status": (503, b"no sample published yet\n")}, "HTTP 503: no sample published yet"),
])
def test_bad_answers_are_one_line_reasons(serve: Serve, routes: Routes, error: str) -> None:
    url = serve(routes)
    assert fetch(url, 2.0) == HostResult(url, None, error)


def test_a_refused_address_stays_refused_while_other_servers_start() -> None:
    """The refused host of these tests is held (bound, not listening): no server started meanwhile, here
    or by a neighbour, can take its port (a port that was only free a moment ago once answered as the
    silent listener, 1 run in ~20)."""
    with refused_address() as refused:
        port = int(refused.rsplit(":", 1)[1])
        with socket.socket() as other:
            other.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as http.server's servers do
            with pytest.raises(OSError) as taken:
                other.bind(("127.0.0.1", port))
            assert taken.value.errno == errno.EADDRINUSE
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port), timeout=5).close()


def test_dead_hosts_are_one_line_reasons() -> None:
    with refused_address() as refused_host, silent_listener() as silent, banner_server() as not_http:
        refused = f"http://{refused_host}"
        urls = [refused, f"http://{silent}", f"http://{not_http}"]
        results = fetch_all(urls, 0.5)
    assert [r.error for r in results] == ["unreachable: connection refused", "timeout after 0.5s",
                                          "bad response: not HTTP (BadStatusLine)"]
    assert [r.url for r in results] == urls


def gpuwatch(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gpuwatch", *args], capture_output=True, text=True, timeout=60)


@pytest.fixture
def refused() -> Iterator[str]:
    """A host:port that refuses every connection while the test runs (``refused_address``)."""
    with refused_address() as address:
        yield address


def test_the_command_shows_every_host_and_exits_1_for_one_it_cannot_read(
        serve: Serve, document: bytes, tmp_path: Path, refused: str) -> None:
    fine = serve({"/status": (200, document), "/healthz": (200, b"ok\n")})
    config = tmp_path / "gpuwatch.toml"
    config.write_text(f'[status]\nremote = ["{fine}"]\ntimeout_s = 2\n')
    alone = gpuwatch("status", "--remote", "-c", str(config))  # the hosts of [status] remote
    assert alone.returncode == 0, alone.stdout + alone.stderr
    assert "1 host, 1 GPU" in alone.stdout
    both = gpuwatch("status", "-c", str(config), "--remote", fine, refused, "--timeout", "2")
    assert both.returncode == 1 and both.stderr == ""
    assert f"{refused}  " in both.stdout and "ERROR unreachable: connection refused" in both.stdout
    doc = json.loads(gpuwatch("status", "-c", str(config), "--remote", fine, refused, "--json").stdout)
    assert [h["exit_code"] for h in doc["hosts"]] == [0, 1] and doc["exit_code"] == 1


@pytest.mark.parametrize(("args", "message"), [
    (["--remote", "http://box3:99999"], "gpuwatch status --remote: 'http://box3:99999': the port must be a number"),
    (["--remote"], "gpuwatch status --remote: no machines: name them"),
    (["--remote", "box1", "--timeout", "0"], "argument --timeout: 0 must be above 0"),
])
def test_usage_errors_are_one_line_and_exit_2(args: list[str], message: str, tmp_path: Path) -> None:
    config = tmp_path / "gpuwatch.toml"
    config.write_text("")
    done = gpuwatch("status", "-c", str(config), *args)
    assert done.returncode == 2 and message in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_a_bad_host_in_the_config_is_a_config_error(tmp_path: Path) -> None:
    config = tmp_path / "gpuwatch.toml"
    config.write_text('[status]\nremote = ["box1", "ftp://box2"]\n')
    done = gpuwatch("status", "-c", str(config), "--remote")
    assert done.returncode == 2 and "status.remote" in done.stderr and "ftp://box2" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(("given", "base"), [
    ("box3", "http://box3:9840"),
    ("box3:9841", "http://box3:9841"),
    ("http://box3:9840/status", "http://box3:9840"),
    ("http://box3", "http://box3"),  # a scheme: the port as written (80)
    ("https://gw.lab/box3/", "https://gw.lab/box3"),  # behind a reverse proxy
    ("[::1]", "http://[::1]:9840"),
])
def test_host_names_become_base_urls(given: str, base: str) -> None:
    assert remote_base_url(given) == base


@pytest.mark.parametrize("bad", ["", "box 3", "ftp://box3", "http://", "http://box3/?x=1", "box3:port"])
def test_bad_host_names_are_rejected(bad: str) -> None:
    with pytest.raises(ValueError):
        remote_base_url(bad)


# ---- https and basic auth (issue 35): a real gpuwatch endpoint with a web config ----

@pytest.fixture
def secured(tmp_path: Path) -> Iterator[tuple[str, Path, Path]]:
    """(https base URL, the CA file, a password file) of a daemon's endpoint with TLS and basic auth."""
    import bcrypt

    from gpuwatch.config.cooling import FanConfig
    from gpuwatch.config.file import Config
    from gpuwatch.config.sections import HttpConfig
    from gpuwatch.daemon.loop import Daemon
    from gpuwatch.publish.http import HttpServer
    from tests.support.certs import Authority
    from tests.support.published import two_gpu_tree

    ca = Authority(tmp_path / "ca")
    cert, key = ca.issue("server")
    web = tmp_path / "web.yml"
    web.write_text(f"tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\nbasic_auth_users:\n"
                   f"  ops: {bcrypt.hashpw(b'fleet-pass', bcrypt.gensalt(4)).decode()}\n")
    password = tmp_path / "password"
    password.write_text("fleet-pass\n")
    daemon = Daemon(Config(sysfs_root=two_gpu_tree(tmp_path / "sys").root, runtime_dir=tmp_path / "run",
                           fan=FanConfig(mode="off"), http=HttpConfig(enabled=False)))
    daemon.tick()
    server = HttpServer(daemon.holder, "127.0.0.1", 0, web_config=web)
    server.start()
    try:
        yield f"https://127.0.0.1:{server.port}", ca.cert, password
    finally:
        server.stop()
        daemon.shutdown()


def test_https_with_a_ca_file_and_credentials_reads_the_host(secured: tuple[str, Path, Path]) -> None:
    from gpuwatch.cli.remote import access
    from gpuwatch.config.sections import StatusConfig

    url, ca, password = secured
    good = access(StatusConfig(ca_file=ca, user="ops", password_file=password), {})
    result = fetch(url, 10.0, good)
    assert result.error is None and result.document is not None and result.stale is None
    anonymous = fetch(url, 10.0, access(StatusConfig(ca_file=ca), {}))
    assert anonymous.error is not None and anonymous.error.startswith("wants credentials (401): set [status] user")
    wrong = access(StatusConfig(ca_file=ca, user="ops"), {"GPUWATCH_REMOTE_PASSWORD_FILE": str(ca)})
    assert fetch(url, 10.0, wrong).error == "wants credentials (401): user 'ops' and its password were refused"
    untrusted = fetch(url, 10.0, access(StatusConfig(user="ops", password_file=password), {}))
    assert untrusted.error is not None and untrusted.error.startswith("TLS: the host's certificate is not trusted")
    plain = fetch(url.replace("https://", "http://"), 10.0, good)  # the TLS port spoken to in plain HTTP
    assert plain.error == "unreachable: closed the connection without answering"


def test_credentials_never_go_over_plain_http(serve: Serve, document: bytes) -> None:
    from gpuwatch.cli.remote import Access

    url = serve({"/status": (401, b"credentials required\n")})
    result = fetch(url, 5.0, Access(None, "ops", "fleet-pass"))
    assert result.error == "wants credentials (401): they are sent over https only (name the host https://...)"
    assert Access(None, "ops", "x").authorization("http://box3:9840") is None
    assert Access(None, "ops", "x").authorization("https://box3:9840") == "Basic b3BzOng="


@pytest.mark.parametrize(("status", "env", "message"), [
    ({"password_file": "/nonexistent/pw", "user": "ops"}, {}, "password file /nonexistent/pw: cannot read"),
    ({"password_file": "/dev/null"}, {}, "but no user"),
    ({"ca_file": "/nonexistent/ca.pem"}, {}, "CA file /nonexistent/ca.pem"),
    ({}, {"GPUWATCH_REMOTE_CA_FILE": "/nonexistent/env-ca.pem"}, "CA file /nonexistent/env-ca.pem"),
])
def test_unusable_access_settings_are_one_line(status: dict[str, str], env: dict[str, str], message: str) -> None:
    from gpuwatch.cli.remote import access
    from gpuwatch.config.sections import StatusConfig

    with pytest.raises(ValueError, match=message):
        access(StatusConfig.model_validate(status), env)


def test_the_command_line_wins_over_the_environment_over_the_config(tmp_path: Path) -> None:
    from gpuwatch.cli.remote import access
    from gpuwatch.config.sections import StatusConfig

    files = {name: tmp_path / name for name in ("config-pw", "env-pw", "cli-pw")}
    for name, path in files.items():
        path.write_text(f"{name}\n")
    config = StatusConfig(user="cfg", password_file=files["config-pw"])
    assert (access(config, {}).user, access(config, {}).password) == ("cfg", "config-pw")
    env = {"GPUWATCH_REMOTE_USER": "envuser", "GPUWATCH_REMOTE_PASSWORD_FILE": str(files["env-pw"])}
    assert (access(config, env).user, access(config, env).password) == ("envuser", "env-pw")
    given = access(config, env, user="cliuser", password_file=files["cli-pw"])
    assert (given.user, given.password) == ("cliuser", "cli-pw")


def test_the_command_says_plainly_that_a_host_wants_credentials(secured: tuple[str, Path, Path],
                                                                tmp_path: Path) -> None:
    url, ca, password = secured
    config = tmp_path / "gpuwatch.toml"
    config.write_text(f'[status]\nca_file = "{ca}"\n')
    host = url.removeprefix("https://")
    refused = gpuwatch("status", "-c", str(config), "--remote", url)
    assert refused.returncode == 1 and f"{host}" in refused.stdout and "wants credentials (401)" in refused.stdout
    done = gpuwatch("status", "-c", str(config), "--remote", url, "--user", "ops", "--password-file", str(password))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "wants credentials" not in done.stdout and host in done.stdout
