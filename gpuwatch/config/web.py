"""The web configuration file (``[http] web_config``): the Prometheus exporter-toolkit's YAML format, the one
node_exporter reads with ``--web.config.file`` and ``promtool check web-config`` validates.

Every key the exporter-toolkit defines is known here; an unknown key is an error naming it. What Python's
``ssl`` module cannot do is decided per key (docs/security.md, "The web configuration"):

- honoured: ``cert_file``, ``key_file``, ``client_ca_file``, ``client_ca`` (inline PEM), ``client_auth_type``
  (NoClientCert, VerifyClientCertIfGiven, RequireAndVerifyClientCert), ``client_allowed_sans``,
  ``min_version``, ``max_version``, ``cipher_suites`` (Go's names, mapped to OpenSSL's; TLS 1.2 and older, as
  in Go), ``prefer_server_cipher_suites``, ``http_server_config.headers``, ``basic_auth_users``;
- accepted with a warning (ignoring them weakens nothing): ``curve_preferences`` (``ssl`` sets one curve at
  most: OpenSSL's default groups are used), ``http2: true`` (gpuwatch speaks HTTP/1.1; clients fall back),
  ``client_auth_type: RequestClientCert`` (a certificate asked for but never verified is never used: the
  same as NoClientCert);
- refused (ignoring them would be less safe than the file asks): ``client_auth_type: RequireAnyClientCert``
  (``ssl`` verifies every certificate it requires), inline ``cert``/``key`` (``ssl`` loads them from files),
  ``rate_limit`` (not implemented; gpuwatch's per-client connection caps apply instead).

A leaf: pydantic and PyYAML only; the files the keys name are read by publish/tls.py.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import Field, ValidationError, field_validator, model_validator

from gpuwatch.config.base import ConfigError, Strict

ClientAuthType = Literal["NoClientCert", "RequestClientCert", "RequireAnyClientCert", "VerifyClientCertIfGiven",
                         "RequireAndVerifyClientCert"]
TlsVersion = Literal["TLS10", "TLS11", "TLS12", "TLS13"]
TLS_VERSION_ORDER: tuple[TlsVersion, ...] = ("TLS10", "TLS11", "TLS12", "TLS13")

# Go's crypto/tls names (tls.CipherSuites(), the ones the exporter-toolkit accepts) -> OpenSSL's.
CIPHER_SUITES: dict[str, str] = {
    "TLS_RSA_WITH_AES_128_CBC_SHA": "AES128-SHA",
    "TLS_RSA_WITH_AES_256_CBC_SHA": "AES256-SHA",
    "TLS_RSA_WITH_AES_128_GCM_SHA256": "AES128-GCM-SHA256",
    "TLS_RSA_WITH_AES_256_GCM_SHA384": "AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA": "ECDHE-ECDSA-AES128-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA": "ECDHE-ECDSA-AES256-SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA": "ECDHE-RSA-AES128-SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA": "ECDHE-RSA-AES256-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256": "ECDHE-ECDSA-AES128-GCM-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384": "ECDHE-ECDSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": "ECDHE-RSA-AES128-GCM-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": "ECDHE-RSA-AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-ECDSA-CHACHA20-POLY1305",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-RSA-CHACHA20-POLY1305",
}
# Without ``cipher_suites``, Go's defaults (crypto/tls defaults.go since Go 1.22, golang/go#63413: no RSA key
# exchange; 3DES gone since 1.23), in Go's order: ECDHE only, AEADs first. OpenSSL's own default would also
# accept RSA key exchange (AES128-SHA: no forward secrecy, CBC, SHA-1).
GO_DEFAULT_CIPHER_SUITES = (
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA",
)
CURVES = ("CurveP256", "CurveP384", "CurveP521", "X25519")
# The exporter-toolkit's allowed response headers and, where it restricts them, their values.
HEADERS: dict[str, tuple[str, ...] | None] = {
    "Content-Security-Policy": None,
    "X-Frame-Options": ("deny", "sameorigin"),
    "X-Content-Type-Options": ("nosniff",),
    "X-XSS-Protection": None,
    "Strict-Transport-Security": None,
}
# bcrypt's modular crypt format: $2a$, $2b$ or $2y$, a two-digit cost, 53 characters of salt and hash.
_BCRYPT = re.compile(r"^\$2[aby]\$\d\d\$[./A-Za-z0-9]{53}$")


class TlsServerConfig(Strict):
    cert_file: Path | None = None
    key_file: Path | None = None
    cert: str | None = None
    key: str | None = None
    client_auth_type: ClientAuthType = "NoClientCert"
    client_ca_file: Path | None = None
    client_ca: str | None = None
    client_allowed_sans: list[str] = []
    min_version: TlsVersion = "TLS12"
    max_version: TlsVersion = "TLS13"
    cipher_suites: list[str] = []
    prefer_server_cipher_suites: bool = True
    curve_preferences: list[str] = []

    @field_validator("cert", "key")
    @classmethod
    def _no_inline(cls, value: str | None) -> str | None:
        if value is not None:
            raise ValueError("inline PEM is not supported (Python's ssl loads them from files): use cert_file "
                             "and key_file")
        return value

    @field_validator("client_auth_type")
    @classmethod
    def _verifiable(cls, value: ClientAuthType) -> ClientAuthType:
        if value == "RequireAnyClientCert":
            raise ValueError("RequireAnyClientCert (a certificate required but not verified) is not supported: "
                             "use RequireAndVerifyClientCert with client_ca_file")
        return value

    @field_validator("cipher_suites")
    @classmethod
    def _ciphers(cls, names: list[str]) -> list[str]:
        unknown = [name for name in names if name not in CIPHER_SUITES]
        if unknown:
            raise ValueError(f"unknown cipher suite(s) {', '.join(unknown)} (Go's names, e.g. "
                             "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256)")
        return names

    @field_validator("curve_preferences")
    @classmethod
    def _curves(cls, names: list[str]) -> list[str]:
        unknown = [name for name in names if name not in CURVES]
        if unknown:
            raise ValueError(f"unknown curve(s) {', '.join(unknown)} (one of {', '.join(CURVES)})")
        return names

    @model_validator(mode="after")
    def _consistent(self) -> TlsServerConfig:
        if self.cert_file is None or self.key_file is None:
            raise ValueError("cert_file and key_file are both required (the server's certificate and its key)")
        if TLS_VERSION_ORDER.index(self.min_version) > TLS_VERSION_ORDER.index(self.max_version):
            raise ValueError(f"min_version {self.min_version} is above max_version {self.max_version}")
        verifies = self.client_auth_type in ("VerifyClientCertIfGiven", "RequireAndVerifyClientCert")
        if verifies and self.client_ca_file is None and self.client_ca is None:
            raise ValueError(f"client_auth_type {self.client_auth_type} needs client_ca_file (the CA that signs "
                             "the clients' certificates)")
        if self.client_allowed_sans and self.client_auth_type != "RequireAndVerifyClientCert":
            raise ValueError("client_allowed_sans needs client_auth_type RequireAndVerifyClientCert")
        return self

    @property
    def warnings(self) -> list[str]:
        """What is accepted but not done (module docstring)."""
        out = []
        if self.curve_preferences:
            out.append("tls_server_config.curve_preferences is ignored (Python's ssl cannot order curves): "
                       "OpenSSL's default groups are used")
        if self.client_auth_type == "RequestClientCert":
            out.append("tls_server_config.client_auth_type RequestClientCert: a client certificate is asked for "
                       "but never verified, so never used (the same as NoClientCert)")
        return out


class HttpServerConfig(Strict):
    http2: bool = True
    headers: dict[str, str] = {}

    @field_validator("headers")
    @classmethod
    def _known(cls, headers: dict[str, str]) -> dict[str, str]:
        for name, value in headers.items():
            if name not in HEADERS:
                raise ValueError(f"header {name!r} is not one the web configuration may set "
                                 f"({', '.join(HEADERS)})")
            allowed = HEADERS[name]
            if allowed is not None and value.lower() not in allowed:
                raise ValueError(f"header {name}: {value!r} is not one of {', '.join(allowed)}")
            if any(c in value for c in "\r\n"):
                raise ValueError(f"header {name}: a value on one line")
        return {name: value for name, value in headers.items() if value}  # blank: unset


class WebConfig(Strict):
    """The whole web configuration file; ``{}`` (an empty file) is plain HTTP without authentication."""

    tls_server_config: TlsServerConfig | None = None
    http_server_config: HttpServerConfig = HttpServerConfig()
    basic_auth_users: dict[str, str] = Field(default_factory=dict)
    rate_limit: dict[str, Any] | None = None

    @field_validator("basic_auth_users")
    @classmethod
    def _bcrypt(cls, users: dict[str, str]) -> dict[str, str]:
        for user, hashed in users.items():
            if not _BCRYPT.match(hashed):
                raise ValueError(f"user {user!r}: not a bcrypt hash (htpasswd -nBC 10 \"\" | tr -d ':\\n' makes one)")
            if ":" in user:
                raise ValueError(f"user {user!r}: a basic auth user name has no ':'")
        return users

    @field_validator("rate_limit")
    @classmethod
    def _no_rate_limit(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is not None:
            raise ValueError("not supported by gpuwatch (its per-client connection limits apply); remove the key")
        return value

    @property
    def warnings(self) -> list[str]:
        out = self.tls_server_config.warnings if self.tls_server_config is not None else []
        if self.basic_auth_users and self.tls_server_config is None:
            out.append("basic_auth_users without tls_server_config: passwords cross the network in clear "
                       "(base64); add tls_server_config")
        http = self.http_server_config
        if http.http2 and "http2" in http.model_fields_set and self.tls_server_config is not None:
            out.append("http_server_config.http2 is ignored: gpuwatch speaks HTTP/1.1 only (clients fall back "
                       "to it)")
        return out

    def files(self) -> list[Path]:
        """The files the configuration names (watched for changes: publish/tls.py)."""
        tls = self.tls_server_config
        if tls is None:
            return []
        return [path for path in (tls.cert_file, tls.key_file, tls.client_ca_file) if path is not None]


def load_web_config(path: Path) -> WebConfig:
    """The web configuration in ``path``, relative file names resolved against its directory (as the
    exporter-toolkit does); ConfigError in one line naming the file and the key for anything wrong."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such web config file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read the web config: {getattr(exc, 'strerror', None) or exc}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        line = f" (line {where.line + 1})" if where is not None else ""
        raise ConfigError(f"{path}: not valid YAML{line}: {getattr(exc, 'problem', None) or exc}") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the web config is a YAML mapping (tls_server_config, basic_auth_users, ...)")
    try:
        config = WebConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_one_line(exc, path)) from None
    return _resolved(config, path.parent)


def _one_line(exc: ValidationError, path: Path) -> str:
    problems = []
    for err in exc.errors():
        key = ".".join(str(part) for part in err["loc"]) or "(top level)"
        rule = "unknown key" if err["type"] == "extra_forbidden" else err["msg"].removeprefix("Value error, ")
        problems.append(f"{key}: {rule}")
    return f"{path}: " + "; ".join(problems)


def _resolved(config: WebConfig, directory: Path) -> WebConfig:
    tls = config.tls_server_config
    if tls is None:
        return config
    update = {key: directory / value for key in ("cert_file", "key_file", "client_ca_file")
              if (value := getattr(tls, key)) is not None and not value.is_absolute()}
    return config.model_copy(update={"tls_server_config": tls.model_copy(update=update)}) if update else config
