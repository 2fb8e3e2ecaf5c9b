"""The web config file (config/web.py, publish/tls.py): every exporter-toolkit key known, a bad file one line
naming the key, what Python's ssl cannot do warned or refused; the shipped example passes promtool and
gpuwatch alike; a daemon with a bad one exits 2 at start and rejects it at a reload."""

from __future__ import annotations

import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpuwatch.config.base import ConfigError
from gpuwatch.config.web import load_web_config
from gpuwatch.publish.tls import build_context, certificate_expiry_unix, load_gate
from tests.support.certs import Authority
from tests.support.paths import REPO
from tests.support.stack import PROMTOOL

HASH = "$2y$10$3qkAPlgdRioNX827CAbMpeelPCx6cOkZt3lmVlZ/3TRauenIz5Lm6"  # "change-me"
TLS = "tls_server_config:\n  cert_file: s.pem\n  key_file: s-key.pem\n"


@pytest.mark.parametrize(("text", "names"), [
    ("bogus: 1\n", "bogus: unknown key"),
    ("tls_server_config:\n  cert_file: a\n  key_file: b\n  cert_fil: c\n", "tls_server_config.cert_fil: unknown key"),
    ("tls_server_config:\n  cert_file: a\n", "cert_file and key_file are both required"),
    (TLS + "  min_version: TLS14\n", "tls_server_config.min_version"),
    (TLS + "  min_version: TLS13\n  max_version: TLS12\n", "min_version TLS13 is above max_version TLS12"),
    (TLS + "  client_auth_type: RequireAnyClientCert\n", "RequireAnyClientCert"),
    (TLS + "  client_auth_type: RequireAndVerifyClientCert\n", "needs client_ca_file"),
    (TLS + "  client_allowed_sans: [a]\n", "client_allowed_sans needs client_auth_type RequireAndVerifyClientCert"),
    (TLS + "  cipher_suites: [TLS_RSA_WITH_RC4_128_SHA]\n", "unknown cipher suite(s) TLS_RSA_WITH_RC4_128_SHA"),
    (TLS + "  curve_preferences: [CurveP999]\n", "unknown curve(s) CurveP999"),
    (TLS + "  cert: inline\n", "tls_server_config.cert: inline PEM is not supported"),
    ("http_server_config:\n  headers:\n    X-Powered-By: me\n", "header 'X-Powered-By' is not one"),
    ("http_server_config:\n  headers:\n    X-Frame-Options: allow\n", "X-Frame-Options: 'allow' is not one of"),
    ("basic_auth_users:\n  alice: hunter2\n", "basic_auth_users: user 'alice': not a bcrypt hash"),
    ("rate_limit:\n  interval: 1s\n  burst: 5\n", "rate_limit: not supported by gpuwatch"),
    ("- a\n- b\n", "is a YAML mapping"),
    ("tls_server_config: [\n", "not valid YAML (line"),
])
def test_a_bad_web_config_is_one_line_naming_the_key(tmp_path: Path, text: str, names: str) -> None:
    path = tmp_path / "web.yml"
    path.write_text(text)
    with pytest.raises(ConfigError) as raised:
        load_web_config(path)
    message = str(raised.value)
    assert names in message and message.startswith(f"{path}: ") and "\n" not in message


def test_what_ssl_cannot_honour_is_accepted_with_a_warning(tmp_path: Path) -> None:
    path = tmp_path / "web.yml"
    path.write_text(TLS + "  curve_preferences: [X25519]\n  client_auth_type: RequestClientCert\n"
                    "http_server_config:\n  http2: true\n")
    warnings = load_web_config(path).warnings
    assert [w.split()[0] for w in warnings] == ["tls_server_config.curve_preferences",
                                                 "tls_server_config.client_auth_type", "http_server_config.http2"]


def test_basic_auth_without_tls_is_warned(tmp_path: Path) -> None:
    path = tmp_path / "web.yml"
    path.write_text(f"basic_auth_users:\n  alice: {HASH}\n")
    assert [w.split()[0] for w in load_web_config(path).warnings] == ["basic_auth_users"]


def test_relative_files_are_relative_to_the_web_config_and_every_key_builds(tmp_path: Path) -> None:
    ca = Authority(tmp_path / "tls")
    ca.issue("s")
    path = tmp_path / "web.yml"
    path.write_text("tls_server_config:\n  cert_file: tls/s.pem\n  key_file: tls/s-key.pem\n"
                    "  client_ca_file: tls/ca.pem\n  client_auth_type: RequireAndVerifyClientCert\n"
                    "  client_allowed_sans: [scraper.example]\n  min_version: TLS12\n  max_version: TLS13\n"
                    "  cipher_suites: [TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256]\n"
                    "  prefer_server_cipher_suites: true\n"
                    "http_server_config:\n  http2: false\n  headers:\n    X-Content-Type-Options: nosniff\n"
                    f"basic_auth_users:\n  alice: {HASH}\n")
    gate, web = load_gate(path)
    assert web.tls_server_config is not None and web.tls_server_config.cert_file == tmp_path / "tls/s.pem"
    assert gate.context is not None and gate.context.verify_mode == ssl.CERT_REQUIRED
    assert gate.context.minimum_version == ssl.TLSVersion.TLSv1_2
    assert gate.context.options & ssl.OP_CIPHER_SERVER_PREFERENCE
    assert gate.users == {"alice": HASH} and gate.headers == (("X-Content-Type-Options", "nosniff"),)
    assert gate.allowed_sans == {"scraper.example"}
    expiry = gate.certificate_expiry_unix
    assert expiry is not None and abs(expiry - (time.time() + 365 * 86400)) < 3600


def test_files_that_cannot_be_used_name_the_key(tmp_path: Path) -> None:
    ca = Authority(tmp_path / "tls")
    cert, key = ca.issue("s")
    path = tmp_path / "web.yml"
    path.write_text(f"tls_server_config:\n  cert_file: {cert}\n  key_file: {tmp_path / 'missing.pem'}\n")
    with pytest.raises(ConfigError, match=r"tls_server_config.key_file .*missing.pem: cannot read"):
        load_gate(path)
    path.write_text(f"tls_server_config:\n  cert_file: {key}\n  key_file: {key}\n")  # a key is no certificate
    with pytest.raises(ConfigError, match="not a certificate and its key"):
        load_gate(path)
    web = load_web_config(path)
    assert web.tls_server_config is not None
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not PEM\n")
    with pytest.raises(ConfigError, match="no CA certificate"):
        build_context(web.tls_server_config.model_copy(update={"cert_file": cert, "client_ca_file": garbage}))


def test_an_empty_web_config_is_plain_http(tmp_path: Path) -> None:
    path = tmp_path / "web.yml"
    path.write_text("")
    gate, _ = load_gate(path)
    assert gate.context is None and not gate.users and gate.certificate_expiry_unix is None


def test_certificate_expiry_reads_utc_time_and_garbage(tmp_path: Path) -> None:
    ca = Authority(tmp_path / "tls")
    cert, _ = ca.issue("s", not_after=2_000_000_000)  # 2033: UTCTime
    assert certificate_expiry_unix(cert.read_bytes()) == 2_000_000_000
    cert, _ = ca.issue("t", not_after=2_600_000_000)  # 2052: GeneralizedTime (RFC 5280: 2050 on)
    assert certificate_expiry_unix(cert.read_bytes()) == 2_600_000_000
    assert certificate_expiry_unix(b"garbage") is None
    assert certificate_expiry_unix(b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n") is None


@pytest.mark.prometheus
@pytest.mark.skipif(PROMTOOL is None, reason="promtool is not installed (Debian: prometheus)")
def test_the_shipped_example_passes_promtool_and_gpuwatch(tmp_path: Path) -> None:
    example = tmp_path / "web.yml"
    shutil.copy(REPO / "config" / "web.yml.example", example)
    ca = Authority(tmp_path / "ca")
    cert, key = ca.issue("gpuwatch")
    (tmp_path / "tls").mkdir()
    shutil.copy(cert, tmp_path / "tls/gpuwatch.crt")
    shutil.copy(key, tmp_path / "tls/gpuwatch.key")
    assert PROMTOOL is not None
    done = subprocess.run([PROMTOOL, "check", "web-config", str(example)], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    gate, web = load_gate(example)
    assert gate.context is not None and "prometheus" in gate.users and not web.warnings


def _gpuwatch(*args: str, timeout_s: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gpuwatch", *args], capture_output=True, text=True,
                          timeout=timeout_s, cwd=REPO)


def test_a_daemon_with_a_bad_web_config_exits_2_naming_the_key(tmp_path: Path) -> None:
    web = tmp_path / "web.yml"
    web.write_text(TLS + "  min_versoin: TLS12\n")
    config = tmp_path / "gpuwatch.toml"
    config.write_text(f'runtime_dir = "{tmp_path / "run"}"\n[http]\nport = 0\nweb_config = "{web}"\n'
                      '[fan]\nmode = "off"\n')
    done = _gpuwatch("run", "-c", str(config), "--sysfs-root", str(tmp_path))
    assert done.returncode == 2, done.stderr
    assert "tls_server_config.min_versoin: unknown key" in done.stderr and "Traceback" not in done.stderr
    assert done.stderr.strip().count("\n") == 0
    checked = _gpuwatch("check-config", str(config))
    assert checked.returncode == 2 and "tls_server_config.min_versoin: unknown key" in checked.stderr


def test_a_reload_rejects_a_bad_web_config_and_rereads_a_good_one(tmp_path: Path) -> None:
    from tests.support.processes import Processes, wait_up
    from tests.support.published import two_gpu_tree
    from tests.support.stack import daemon_config, start_gpuwatch

    ca = Authority(tmp_path / "ca")
    first_cert, first_key = ca.issue("first", not_after=time.time() + 86400)
    web = tmp_path / "web.yml"
    web.write_text(f"tls_server_config:\n  cert_file: {first_cert}\n  key_file: {first_key}\n")
    config = tmp_path / "gpuwatch.toml"
    config.write_text(f'sysfs_root = "{two_gpu_tree(tmp_path / "sys").root}"\n'
                      + daemon_config(tmp_path / "run", f'web_config = "{web}"\n[fan]\nmode = "off"\n'))

    def served_expiry(address: str) -> float | None:
        host, port = address.split(":")
        context = ssl.create_default_context(cafile=ca.cert)
        with context.wrap_socket(socket.create_connection((host, int(port)), timeout=20),
                                 server_hostname=host) as sock:
            der = sock.getpeercert(binary_form=True)
        assert der is not None
        return certificate_expiry_unix(ssl.DER_cert_to_PEM_cert(der).encode())

    with Processes(tmp_path / "logs") as processes:
        child, address = start_gpuwatch(processes, "gpuwatch", config)
        first = served_expiry(address)
        web.write_text(f"tls_server_config:\n  cert_file: {first_cert}\n  key_file: {first_key}\n  bogus: 1\n")
        child.process.send_signal(signal.SIGHUP)
        wait_up("the reload rejected", lambda: "config reload rejected" in child.log.read_text(), child)
        assert "tls_server_config.bogus: unknown key" in child.log.read_text()
        assert served_expiry(address) == first  # still served with the running web config
        second_cert, second_key = ca.issue("second", not_after=time.time() + 2 * 86400)
        web.write_text(f"tls_server_config:\n  cert_file: {second_cert}\n  key_file: {second_key}\n")
        child.process.send_signal(signal.SIGHUP)
        wait_up("the new certificate served", lambda: served_expiry(address) != first, child)
        assert "Traceback" not in child.log.read_text()
