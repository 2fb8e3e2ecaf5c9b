"""`gpuwatch status --remote`: read other machines' /status and /healthz over HTTP, never raising.

The thin side of the fleet table (cli/fleet.py renders it): every host is fetched concurrently with
its own timeout, and every way a host can fail (refused, unknown name, timeout, an HTTP error, a body
that is not a gpuwatch document) becomes a one-line reason in its HostResult.

Freshness comes from the host's /healthz, which the daemon computes on its own monotonic clock: the
document's ``taken_unix`` compared with this machine's clock would call every host "stale" whose
clock is a few seconds off.

A host behind a web config (docs/security.md) is reached with ``Access``: the CA that signs the hosts'
certificates and basic auth credentials, the password read from a file (never the command line: every
user sees another's argv in ps). Credentials go to https hosts only; a host that answers 401 is said
plainly ("wants credentials (401)").
"""

from __future__ import annotations

import base64
import http.client
import json
import socket
import ssl
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from gpuwatch.config.sections import StatusConfig
from gpuwatch.publish import decode
from gpuwatch.publish.decode import SCHEMA_VERSION
from gpuwatch.publish.document import StatusDocument

MAX_BODY_BYTES = 16 << 20  # a 16-GPU document is ~40 KiB; anything near this is not one
MAX_PARALLEL = 16


@dataclass(frozen=True)
class HostResult:
    url: str  # the base URL (config.remote_base_url)
    document: StatusDocument | None  # None: ``error`` says why
    error: str | None = None
    stale: str | None = None  # /healthz's reason when it answered 503 or could not be read

    @property
    def host(self) -> str:
        """The name shown in the table: the URL without its scheme."""
        return self.url.split("://", 1)[-1]


ENV_USER = "GPUWATCH_REMOTE_USER"
ENV_PASSWORD_FILE = "GPUWATCH_REMOTE_PASSWORD_FILE"
ENV_CA_FILE = "GPUWATCH_REMOTE_CA_FILE"


@dataclass(frozen=True)
class Access:
    """How https hosts are reached: the TLS context (the CA that signs them) and basic auth credentials."""

    context: ssl.SSLContext | None = None  # None: the system's CAs
    user: str | None = None
    password: str = ""

    def authorization(self, url: str) -> str | None:
        """The Authorization header for ``url``: only over https (plain http would show the password)."""
        if self.user is None or not url.startswith("https://"):
            return None
        return "Basic " + base64.b64encode(f"{self.user}:{self.password}".encode()).decode()


def access(status: StatusConfig, env: Mapping[str, str], ca_file: Path | None = None, user: str | None = None,
           password_file: Path | None = None) -> Access:
    """The Access of the command line's options, else the environment's, else ``[status]``'s; ValueError with
    a one-line reason when a file cannot be read."""
    ca = ca_file or (Path(env[ENV_CA_FILE]) if env.get(ENV_CA_FILE) else None) or status.ca_file
    who = user or env.get(ENV_USER) or status.user
    secret = password_file or (Path(env[ENV_PASSWORD_FILE]) if env.get(ENV_PASSWORD_FILE) else None) \
        or status.password_file
    context = None
    if ca is not None:
        try:
            context = ssl.create_default_context(cafile=str(ca))
        except (OSError, ssl.SSLError) as exc:
            raise ValueError(f"CA file {ca}: {getattr(exc, 'strerror', None) or exc}") from None
    password = ""
    if secret is not None:
        if who is None:
            raise ValueError(f"a password file ({secret}) but no user: set [status] user or {ENV_USER}")
        try:
            password = secret.read_text(encoding="utf-8").splitlines()[0] if secret.stat().st_size else ""
        except (OSError, UnicodeDecodeError) as exc:
            raise ValueError(f"password file {secret}: cannot read: {getattr(exc, 'strerror', None) or exc}") from None
    return Access(context, who, password)


class _Failed(Exception):
    """One request failed; the message is the one-line reason."""


def fetch_all(urls: Sequence[str], timeout_s: float, access: Access | None = None) -> list[HostResult]:
    """Every host's result, in the order given."""
    if not urls:
        return []
    with ThreadPoolExecutor(max_workers=min(MAX_PARALLEL, len(urls))) as pool:
        return list(pool.map(lambda url: fetch(url, timeout_s, access), urls))


def fetch(url: str, timeout_s: float, access: Access | None = None) -> HostResult:
    reach = access or Access()
    try:
        status, body = _get(f"{url}/status", timeout_s, reach)
    except _Failed as exc:
        return HostResult(url, None, str(exc))
    if status == 401:
        return HostResult(url, None, _unauthorized(url, reach))
    if status != 200:
        return HostResult(url, None, f"HTTP {status}: {_first_line(body)}")
    try:
        document = parse_document(body)
    except ValueError as exc:
        return HostResult(url, None, f"bad response: {exc}")
    return HostResult(url, document, stale=_staleness(url, timeout_s, reach))


def fetch_history(url: str, range_name: str, timeout_s: float,
                  access: Access | None = None) -> tuple[dict[str, Any] | None, str | None]:
    """`gpuwatch status --history --remote HOST`: the host's /history document, or None and the one-line reason."""
    reach = access or Access()
    try:
        status, body = _get(f"{url}/history?range={range_name}", timeout_s, reach)
    except _Failed as exc:
        return None, str(exc)
    if status == 401:
        return None, _unauthorized(url, reach)
    if status != 200:
        older = " (a gpuwatch without /history?)" if status == 404 else ""
        return None, f"HTTP {status}: {_first_line(body)}{older}"
    try:
        document = json.loads(body)
    except (ValueError, RecursionError):
        return None, "not JSON (is this gpuwatch's HTTP port?)"
    if not isinstance(document, dict) or document.get("schema") != 1 or not isinstance(document.get("t"), list):
        return None, "JSON, but not a gpuwatch history document (schema 1)"
    return document, None


def _unauthorized(url: str, reach: Access) -> str:
    if reach.user is None:
        return (f"wants credentials (401): set [status] user and password_file (or {ENV_USER} and "
                f"{ENV_PASSWORD_FILE})")
    if not url.startswith("https://"):
        return "wants credentials (401): they are sent over https only (name the host https://...)"
    return f"wants credentials (401): user {reach.user!r} and its password were refused"


def parse_document(body: bytes) -> StatusDocument:
    """The status document in ``body``; ValueError with the reason when it is not one."""
    try:
        document = json.loads(body)
    except (ValueError, RecursionError):
        raise ValueError("not JSON (is this gpuwatch's HTTP port?)") from None
    if not isinstance(document, dict) or not isinstance(document.get("gpus"), list):
        raise ValueError("JSON, but not a gpuwatch status document")
    if document.get("schema") != SCHEMA_VERSION:
        raise ValueError(f"status document schema {document.get('schema')!r}, this gpuwatch reads {SCHEMA_VERSION}")
    try:
        return cast(StatusDocument, decode.document(document))
    except decode.Invalid as exc:  # a ValueError too; said as what it is
        raise ValueError(f"a gpuwatch status document that cannot be used: {exc}") from None


def _staleness(url: str, timeout_s: float, reach: Access) -> str | None:
    """None when the host's /healthz says its last tick is fresh, else the reason."""
    try:
        status, body = _get(f"{url}/healthz", timeout_s, reach)
    except _Failed as exc:
        return f"/healthz: {exc}"
    if status == 200:
        return None
    return _first_line(body) if status == 503 else f"/healthz: HTTP {status}"


def _get(url: str, timeout_s: float, reach: Access) -> tuple[int, bytes]:
    """(HTTP status, body) of a GET; _Failed with a one-line reason when there is no HTTP answer."""
    headers = {"Accept": "application/json"}
    authorization = reach.authorization(url)
    if authorization is not None:
        headers["Authorization"] = authorization
    request = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout_s, context=reach.context) as response:
            return int(response.status), response.read(MAX_BODY_BYTES)
    except urllib.error.HTTPError as exc:
        with exc:
            return int(exc.code), exc.read(4096)
    except urllib.error.URLError as exc:
        raise _Failed(_reason(exc.reason, timeout_s)) from None
    except (TimeoutError, OSError, http.client.HTTPException, ValueError) as exc:
        raise _Failed(_reason(exc, timeout_s)) from None


def _reason(error: object, timeout_s: float) -> str:
    if isinstance(error, TimeoutError):  # socket.timeout is TimeoutError
        return f"timeout after {timeout_s:g}s"
    if isinstance(error, socket.gaierror):
        return "unreachable: unknown host"
    if isinstance(error, ConnectionRefusedError):
        return "unreachable: connection refused"
    if isinstance(error, ssl.SSLCertVerificationError):
        return f"TLS: the host's certificate is not trusted ({error.verify_message}; [status] ca_file)"
    if isinstance(error, ssl.SSLError):
        return f"TLS handshake failed ({error.reason or error}; an http:// host named https://, or the reverse?)"
    if isinstance(error, http.client.RemoteDisconnected):
        return "unreachable: closed the connection without answering"
    if isinstance(error, http.client.HTTPException):
        return f"bad response: not HTTP ({type(error).__name__})"
    if isinstance(error, OSError) and error.strerror:
        return f"unreachable: {error.strerror.lower()}"
    return f"unreachable: {error}"


def _first_line(body: bytes) -> str:
    text = body.decode("utf-8", "replace").strip()
    line = text.splitlines()[0] if text else "(empty body)"
    return line if len(line) <= 120 else line[:117] + "..."
