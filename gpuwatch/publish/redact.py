"""What of the status document may leave the machine, and to whom: the one home of the sensitive-field list.

A process's command line can carry a secret (``--db-url=postgres://ml:PASSWORD@db/exp``, issue 35), its
user name and a trainer's log and dump paths say who runs what where. ``SENSITIVE`` lists every such
field; ``redact`` blanks them (strings the reader renders become ``REDACTED``, optional ones ``None``) and
marks the document ``"redacted": true``. ``sees_sensitive`` is the rule of ``[http] expose_sensitive``:
who gets the full document. /status uses both; the control socket's status for a peer that is neither
root nor the daemon's user is meant to use ``redact`` too. /metrics never carries any of these fields
(tests/publish/test_redact.py scans every series).
"""

from __future__ import annotations

import copy
import ipaddress
from typing import Any

from gpuwatch.config.sections import ExposeSensitive
from gpuwatch.publish.schema import StatusDocument

REDACTED = "(redacted)"

# (list in the document, field, what it becomes): every path-, environment- or identity-derived field.
SENSITIVE: tuple[tuple[str, str, str | None], ...] = (
    ("processes", "command", REDACTED),
    ("processes", "user", None),
    ("trainers", "command", None),
    ("trainers", "user", None),
    ("trainers", "log_path", None),
    ("gpus.reset", "dump_path", None),
)


def is_loopback(client: str) -> bool:
    """Whether a peer address is this machine's loopback (127.0.0.0/8, ::1, ::ffff:127.x.y.z)."""
    try:
        address = ipaddress.ip_address(client.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped.is_loopback
    return address.is_loopback


def sees_sensitive(setting: ExposeSensitive, loopback: bool, authenticated: bool) -> bool:
    """Whether a client gets the full document: ``local`` loopback only, ``authenticated`` (the default)
    loopback and authenticated clients (basic auth or a verified client certificate), ``all`` everyone,
    ``none`` nobody (a reverse proxy on this machine makes every client loopback)."""
    if setting == "none":
        return False
    if setting == "all":
        return True
    if setting == "authenticated":
        return loopback or authenticated
    return loopback


def redact(document: StatusDocument) -> StatusDocument:
    """A copy of ``document`` with every SENSITIVE field blanked and ``redacted`` true (the original is shared
    by every reader and never changed)."""
    out: dict[str, Any] = copy.deepcopy(dict(document))
    for where, key, blank in SENSITIVE:
        for row in _rows(out, where):
            if key in row:
                row[key] = blank
    out["redacted"] = True
    return out  # type: ignore[return-value]  # the same keys, blanked


def _rows(document: dict[str, Any], where: str) -> list[dict[str, Any]]:
    top, _, sub = where.partition(".")
    rows = [row for row in document.get(top) or [] if isinstance(row, dict)]
    if sub:
        rows = [row[sub] for row in rows if isinstance(row.get(sub), dict)]
    return rows
