"""What may leave the machine, and to whom: the one home of the sensitive-field list (issues 35, 47).

The rule: **nothing that names a person or a place on disk, or may carry a secret, reaches a reader who has
not proved who it is**: no user name, no path (a script's, a log's, a dump's, a working directory), no
command line or code, no environment. A process's command line can carry a secret
(``--db-url=postgres://ml:PASSWORD@db/exp``), its user name and a trainer's paths say who runs what where.

``SENSITIVE`` lists every such field of the status document and what it becomes; ``redact`` applies it
(the unauthenticated /status, the control socket's status for a peer that is neither root nor the
daemon's user) and marks the document ``"redacted": true``. A free-text reason (a failed spawn's names
the program's path, a dump's summary the process) is kept as its class, ``reason_class``: the words
before its first detail (``spawn failed: cannot start '/home/alice/x'`` -> ``spawn failed``). /metrics
is read by everyone and cached once for all: its label names never include a sensitive field
(``families.py`` refuses one, ``METRIC_LABELS_REFUSED``) and a reason label carries only the class. The
live page is an allow-list (``live.py``) whose processes' names and users reach only the readers
``sees_sensitive`` names (``live.redacted`` for the others). Run names never come from code or argument values
(supervise/run_name.py). ``sees_sensitive`` is the rule of ``[http] expose_sensitive``: who gets the full
document. docs/security.md has the table; tests/publish/test_redact.py and tests/e2e/test_redaction.py scan
every route.
"""

from __future__ import annotations

import copy
import ipaddress
import re
from collections.abc import Callable
from typing import Any

from gpuwatch.config.sections import ExposeSensitive
from gpuwatch.publish.document import StatusDocument

REDACTED = "(redacted)"
# A reason's detail starts at the first of these: a colon or semicolon, a parenthesis, a quote, a path, an
# assignment (every reason gpuwatch writes puts what it quotes after one: supervise/process.py, exits.py).
_DETAIL = re.compile(r"[:;(\[\"'`/=\\\n]")


def reason_class(text: str | None) -> str | None:
    """A free-text reason without its detail: ``spawn failed: cannot start '/x'`` -> ``spawn failed``,
    ``crash (exit 1); restart in 2.0s`` -> ``crash``, ``exit 1`` stays (None stays None)."""
    if text is None:
        return None
    head = _DETAIL.split(text, maxsplit=1)[0].strip(" ,.-")
    return head or REDACTED


Blank = str | None | Callable[[str | None], str | None]

# (list in the document, field, what it becomes): every path-, environment-, code- or identity-derived field.
SENSITIVE: tuple[tuple[str, str, Blank], ...] = (
    ("processes", "command", REDACTED),
    ("processes", "user", None),
    ("trainers", "command", None),
    ("trainers", "user", None),
    ("trainers", "log_path", None),
    ("trainers", "reason", reason_class),
    ("trainers", "last_exit_reason", reason_class),
    ("jobs", "user", None),
    ("gpus.reset", "dump_path", None),
    ("gpus.reset", "last_summary", reason_class),
)
# /metrics has no per-reader view: no label may be named after a field blanked above (a reason label is
# allowed, its value only as ``reason_class``), nor after a pid, a path, a working directory, an environment.
METRIC_LABELS_REFUSED = frozenset({field for _, field, blank in SENSITIVE if not callable(blank)}
                                  | {"pid", "path", "cwd", "env", "argv"})


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
                row[key] = blank(row[key]) if callable(blank) else blank
    out["redacted"] = True
    return out


def _rows(document: dict[str, Any], where: str) -> list[dict[str, Any]]:
    top, _, sub = where.partition(".")
    rows = [row for row in document.get(top) or [] if isinstance(row, dict)]
    if sub:
        rows = [row[sub] for row in rows if isinstance(row.get(sub), dict)]
    return rows
