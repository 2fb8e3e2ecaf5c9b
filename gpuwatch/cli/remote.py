"""`gpuwatch status --remote`: read other machines' /status and /healthz over HTTP, never raising.

The thin side of the fleet table (cli/fleet.py renders it): every host is fetched concurrently with
its own timeout, and every way a host can fail (refused, unknown name, timeout, an HTTP error, a body
that is not a gpuwatch document) becomes a one-line reason in its HostResult.

Freshness comes from the host's /healthz, which the daemon computes on its own monotonic clock: the
document's ``taken_unix`` compared with this machine's clock would call every host "stale" whose
clock is a few seconds off.
"""

from __future__ import annotations

import http.client
import json
import socket
import urllib.error
import urllib.request
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from gpuwatch.publish.schema import SCHEMA_VERSION, StatusDocument

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


class _Failed(Exception):
    """One request failed; the message is the one-line reason."""


def fetch_all(urls: Sequence[str], timeout_s: float) -> list[HostResult]:
    """Every host's result, in the order given."""
    if not urls:
        return []
    with ThreadPoolExecutor(max_workers=min(MAX_PARALLEL, len(urls))) as pool:
        return list(pool.map(lambda url: fetch(url, timeout_s), urls))


def fetch(url: str, timeout_s: float) -> HostResult:
    try:
        status, body = _get(f"{url}/status", timeout_s)
    except _Failed as exc:
        return HostResult(url, None, str(exc))
    if status != 200:
        return HostResult(url, None, f"HTTP {status}: {_first_line(body)}")
    try:
        document = parse_document(body)
    except ValueError as exc:
        return HostResult(url, None, f"bad response: {exc}")
    return HostResult(url, document, stale=_staleness(url, timeout_s))


def parse_document(body: bytes) -> StatusDocument:
    """The status document in ``body``; ValueError with the reason when it is not one."""
    try:
        document = json.loads(body)
    except ValueError:
        raise ValueError("not JSON (is this gpuwatch's HTTP port?)") from None
    if not isinstance(document, dict) or not isinstance(document.get("gpus"), list):
        raise ValueError("JSON, but not a gpuwatch status document")
    if document.get("schema") != SCHEMA_VERSION:
        raise ValueError(f"status document schema {document.get('schema')!r}, this gpuwatch reads {SCHEMA_VERSION}")
    return document  # type: ignore[return-value]  # checked above as far as the table needs


def _staleness(url: str, timeout_s: float) -> str | None:
    """None when the host's /healthz says its last tick is fresh, else the reason."""
    try:
        status, body = _get(f"{url}/healthz", timeout_s)
    except _Failed as exc:
        return f"/healthz: {exc}"
    if status == 200:
        return None
    return _first_line(body) if status == 503 else f"/healthz: HTTP {status}"


def _get(url: str, timeout_s: float) -> tuple[int, bytes]:
    """(HTTP status, body) of a GET; _Failed with a one-line reason when there is no HTTP answer."""
    request = urllib.request.Request(url, headers={"Accept": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
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
