"""The web configuration in force for the HTTP endpoint: its TLS context, users and headers, re-read when
its files change on disk.

``Gate`` is one whole, frozen web configuration made usable: the ``ssl.SSLContext`` built from
``tls_server_config`` (None: plain HTTP), the bcrypt users, the response headers, the server
certificate's expiry. ``GateWatch`` holds the one in force and, at most once a second (asked by each new
connection), compares the web config file and every file it names (mtime, inode, size) with what the Gate
was built from: a change builds a new Gate for new connections (a rotated certificate is picked up
without a restart; open connections keep theirs). A change that does not build (a half-written key, an
unreadable file) keeps the old Gate and says so once, until it builds again. ``reload()`` (SIGHUP)
rebuilds whatever the files say.
"""

from __future__ import annotations

import calendar
import logging
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from gpuwatch.config.base import ConfigError
from gpuwatch.config.web import CIPHER_SUITES, GO_DEFAULT_CIPHER_SUITES, TlsServerConfig, WebConfig, load_web_config

log = logging.getLogger("gpuwatch.http")

CHECK_EVERY_S = 1.0  # the files are stat()ed at most this often (by the connections that arrive)
_VERSIONS = {"TLS10": ssl.TLSVersion.TLSv1, "TLS11": ssl.TLSVersion.TLSv1_1, "TLS12": ssl.TLSVersion.TLSv1_2,
             "TLS13": ssl.TLSVersion.TLSv1_3}
_VERIFY = {"NoClientCert": ssl.CERT_NONE, "RequestClientCert": ssl.CERT_NONE,
           "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL, "RequireAndVerifyClientCert": ssl.CERT_REQUIRED}

FileKey = tuple[str, int, int, int, int]  # path, mtime_ns, inode, device, size


@dataclass(frozen=True)
class Gate:
    """One usable web configuration (plain HTTP, no users, no headers when built from None)."""

    context: ssl.SSLContext | None = None
    users: dict[str, str] = field(default_factory=dict)  # user -> bcrypt hash
    headers: tuple[tuple[str, str], ...] = ()
    allowed_sans: frozenset[str] = frozenset()
    certificate_expiry_unix: float | None = None  # the server certificate's notAfter

    @property
    def verifies_clients(self) -> bool:
        return self.context is not None and self.context.verify_mode != ssl.CERT_NONE


def build_gate(web: WebConfig) -> Gate:
    """The Gate of a validated web config; ConfigError (one line naming the key and file) when a file it
    names cannot be used."""
    tls = web.tls_server_config
    context = expiry = None
    if tls is not None:
        context = build_context(tls)
        assert tls.cert_file is not None
        expiry = certificate_expiry_unix(_read(tls.cert_file, "cert_file"))
    return Gate(context, dict(web.basic_auth_users), tuple(web.http_server_config.headers.items()),
                frozenset(tls.client_allowed_sans if tls is not None else ()), expiry)


def load_gate(path: Path) -> tuple[Gate, WebConfig]:
    """The web config file read, validated and built (the start's check and every rebuild)."""
    web = load_web_config(path)
    return build_gate(web), web


def build_context(tls: TlsServerConfig) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = _VERSIONS[tls.min_version]
    context.maximum_version = _VERSIONS[tls.max_version]
    # TLS 1.2 and older; TLS 1.3's suites are all AEAD with ECDHE, as in Go (not configurable there either).
    try:
        context.set_ciphers(":".join(CIPHER_SUITES[name] for name in tls.cipher_suites or GO_DEFAULT_CIPHER_SUITES))
    except ssl.SSLError:
        raise ConfigError("tls_server_config.cipher_suites: none of them is available in this OpenSSL") from None
    if tls.prefer_server_cipher_suites:
        context.options |= ssl.OP_CIPHER_SERVER_PREFERENCE
    assert tls.cert_file is not None and tls.key_file is not None
    _read(tls.cert_file, "cert_file")
    _read(tls.key_file, "key_file")
    try:
        context.load_cert_chain(tls.cert_file, tls.key_file)
    except ssl.SSLError as exc:
        raise ConfigError(f"tls_server_config.cert_file/key_file ({tls.cert_file}, {tls.key_file}): not a "
                          f"certificate and its key ({exc.reason or exc})") from None
    # No TLS 1.3 session tickets: scrapers make full handshakes (Go's and Python's clients keep no session
    # cache by default), so the two tickets OpenSSL sends after each handshake were work for nobody.
    context.num_tickets = 0
    context.verify_mode = _VERIFY[tls.client_auth_type]
    if tls.client_ca_file is not None or tls.client_ca is not None:
        if tls.client_ca_file is not None:
            _read(tls.client_ca_file, "client_ca_file")
        try:
            context.load_verify_locations(cafile=tls.client_ca_file, cadata=tls.client_ca)
        except (ssl.SSLError, ValueError) as exc:
            raise ConfigError(f"tls_server_config.client_ca_file: no CA certificate in it ({exc})") from None
    return context


def _read(path: Path, key: str) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"tls_server_config.{key} {path}: cannot read: {exc.strerror or exc}") from None


def certificate_expiry_unix(pem: bytes) -> float | None:
    """The first certificate's notAfter in a PEM file as Unix seconds; None when it cannot be read."""
    text = pem.decode("ascii", "replace")
    begin, end = "-----BEGIN CERTIFICATE-----", "-----END CERTIFICATE-----"
    if begin not in text or end not in text:
        return None
    try:
        der = ssl.PEM_cert_to_DER_cert(text[text.index(begin):text.index(end) + len(end)] + "\n")
        return _not_after(der)
    except (ValueError, IndexError):
        return None


def _tlv(der: bytes, at: int) -> tuple[int, int, int]:
    """(tag, start of the value, end of the value) of the DER element at ``at``."""
    tag, length = der[at], der[at + 1]
    at += 2
    if length & 0x80:
        count = length & 0x7F
        length = int.from_bytes(der[at:at + count], "big")
        at += count
    return tag, at, at + length


def _not_after(der: bytes) -> float:
    """X.509 (RFC 5280 4.1): Certificate -> tbsCertificate -> [0] version?, serial, signature, issuer,
    validity {notBefore, notAfter}."""
    _, at, _ = _tlv(der, 0)  # Certificate SEQUENCE
    _, at, _ = _tlv(der, at)  # tbsCertificate SEQUENCE: its first element
    tag, _, end = _tlv(der, at)
    if tag == 0xA0:  # the explicit version
        at = end
    for _ in range(3):  # serialNumber, signature, issuer
        _, _, at = _tlv(der, at)
    _, at, _ = _tlv(der, at)  # validity SEQUENCE
    _, _, at = _tlv(der, at)  # notBefore
    tag, start, end = _tlv(der, at)
    text = der[start:end].decode("ascii")
    if tag == 0x17:  # UTCTime YYMMDDHHMMSSZ: 50-99 are 19xx (RFC 5280 4.1.2.5.1)
        text = ("19" if int(text[:2]) >= 50 else "20") + text
    return float(calendar.timegm(time.strptime(text, "%Y%m%d%H%M%SZ")))


class GateWatch:
    """The Gate in force for ``path`` (None: plain HTTP without a web config), rebuilt when its files change."""

    def __init__(self, path: Path | None, monotonic: Callable[[], float] = time.monotonic) -> None:
        """Raises ConfigError when the web config cannot be used (the daemon's start: exit 2)."""
        self._path = path
        self._mono = monotonic
        self._lock = threading.Lock()
        self._checked_at = monotonic()
        self._problem: str | None = None
        self._names: tuple[Path, ...] = ()  # the files the web config names
        self._files: tuple[FileKey, ...] = ()  # their stat when the Gate was built
        self._gate = Gate()
        if path is None:
            return
        self._gate, web = load_gate(path)
        for warning in web.warnings:
            log.warning("%s: %s", path, warning)
        self._names = tuple(web.files())
        self._files = self._keys_now()

    def gate(self) -> Gate:
        """The Gate for a new connection; the files are checked first when CHECK_EVERY_S has passed."""
        with self._lock:
            if self._path is not None and self._mono() - self._checked_at >= CHECK_EVERY_S:
                self._checked_at = self._mono()
                if self._keys_now() != self._files:
                    self._rebuild("changed on disk")
            return self._gate

    def reload(self) -> None:
        """Rebuild from the files whatever their stat says (SIGHUP)."""
        with self._lock:
            if self._path is not None:
                self._checked_at = self._mono()
                self._rebuild("reloaded")

    def _rebuild(self, why: str) -> None:
        assert self._path is not None
        before = self._keys_now()  # taken first: a file that changes while it is read is read again
        try:
            gate, web = load_gate(self._path)
        except ConfigError as exc:
            if str(exc) != self._problem:  # said once per problem, not once a second
                log.error("web config %s %s but cannot be used; new connections keep the previous one: %s",
                          self._path, why, exc)
                self._problem = str(exc)
            self._files = before  # retried when the files change again (or at a reload)
            return
        names = tuple(web.files())
        self._gate, self._problem = gate, None
        if names != self._names:
            self._names, before = names, self._keys_now()
        self._files = before
        log.info("web config %s %s: new connections use it (certificate valid until %s)", self._path, why,
                 time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime(gate.certificate_expiry_unix))
                 if gate.certificate_expiry_unix is not None else "-")

    def _keys_now(self) -> tuple[FileKey, ...]:
        assert self._path is not None
        return tuple(_stat(path) for path in (self._path, *self._names))


def _stat(path: Path) -> FileKey:
    try:
        st = path.stat()
    except OSError:
        return (str(path), -1, -1, -1, -1)
    return (str(path), st.st_mtime_ns, st.st_ino, st.st_dev, st.st_size)
