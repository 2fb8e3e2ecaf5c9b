"""The HTTP server's open connections counted against its caps, and the clients it cut off (serve.py's
bookkeeping; no I/O but the log).

A connection is registered when accepted and counts until its socket is closed (it holds a descriptor
until then: issue 31), oldest first, and per client address. When a cap is reached, the oldest idle
keep-alive connection (answered, waiting for a next request that may never come) is closed to make room,
else the oldest connection still waiting for its request (or in its TLS handshake) is cut; a client whose every
connection is already being answered has its new one refused. Cut-offs are counted by reason and address
and summarised in one warning at most every ``REPORT_EVERY_S``, so a crowd of slow clients cannot flood
the log; so is an accept that failed (EMFILE).

Everything here runs on the server's event loop thread: no lock.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

log = logging.getLogger("gpuwatch.http")

REPORT_EVERY_S = 10.0  # cut-off clients (and failed accepts) are summarised at most this often


@dataclass(eq=False)
class Connection:
    client: str
    transport: asyncio.Transport | None = None  # None until the socket is wrapped
    waiting: bool = True  # still reading its request: the one to cut when a cap is reached
    idle: bool = False  # kept alive after an answer, no byte of a next request yet: the first to close
    cut: bool = False  # cut to make room (its descriptor goes on the loop's next turn)
    task: asyncio.Task[None] | None = None  # cancelled when cut before its socket is wrapped (a TLS handshake)


@dataclass
class CutOffs:
    """Cut-off clients since the last warning, by reason and by address."""

    reasons: Counter[str] = field(default_factory=Counter)
    clients: Counter[str] = field(default_factory=Counter)
    reported_at: float = float("-inf")


class Connections:
    """The connections holding a descriptor now, under ``max_connections`` and ``max_per_client``."""

    def __init__(self, max_connections: int, max_per_client: int, monotonic: Callable[[], float],
                 held: Callable[[], None] = lambda: None) -> None:
        """``held()`` is called when a cut-off is held back for a later warning (serve.py then waits for
        ``held_for_s`` and calls ``report_if_due``)."""
        self.max_connections = max_connections
        self.max_per_client = max_per_client
        self._mono = monotonic
        self._held = held
        self._open: OrderedDict[Connection, None] = OrderedDict()  # oldest first; each holds a descriptor
        self._per_client: Counter[str] = Counter()
        self._cut = CutOffs()
        self._accept_failed_at = float("-inf")

    def __len__(self) -> int:
        return len(self._open)

    def __iter__(self) -> Iterator[Connection]:
        return iter(list(self._open))

    @property
    def full(self) -> bool:
        return len(self._open) >= self.max_connections

    def add(self, client: str) -> Connection | None:
        """A new connection from ``client`` registered; None when refused: the client is at its cap and
        every one of its connections is being answered (nothing to cut). The caller closes a refused socket."""
        if self._per_client[client] >= self.max_per_client and not self.cut_oldest(
                lambda c: c.client == client, "over the per-client connection limit"):
            self.note_cut(client, "over the per-client connection limit")
            return None
        connection = Connection(client)
        self._open[connection] = None
        self._per_client[client] += 1
        return connection

    def closed(self, connection: Connection) -> None:
        """The connection's socket is closed: its descriptor is free again (called once or more)."""
        if connection in self._open:
            del self._open[connection]
            self._per_client[connection.client] -= 1
            if not self._per_client[connection.client]:
                del self._per_client[connection.client]

    def cut_oldest(self, which: Callable[[Connection], bool], reason: str) -> bool:
        """Close the oldest idle keep-alive connection that ``which`` accepts, else cut the oldest one still
        waiting for its request; False if there is none. Closing an idle connection is not a cut-off (its
        client got its answers and opens a new connection when it needs one): it is not warned about."""
        candidates = [c for c in self._open if c.waiting and not c.cut and which(c)]
        connection = next((c for c in candidates if c.idle), None) or next(iter(candidates), None)
        if connection is None:
            return False
        if not connection.idle:
            self.note_cut(connection.client, reason)
        connection.cut = True
        if connection.transport is not None:
            connection.transport.abort()  # its reader sees the end at once; the socket closes next turn
        elif connection.task is not None:
            connection.task.cancel()  # still in its TLS handshake: closes its socket
        return True

    # ---- warnings ----
    def note_cut(self, client: str, reason: str) -> None:
        self._cut.reasons[reason] += 1
        self._cut.clients[client] += 1
        if self._mono() - self._cut.reported_at >= REPORT_EVERY_S:
            self.report()
        else:
            self._held()

    def held_for_s(self) -> float | None:
        """Seconds until the cut-offs held back are due to be said (0 or less: now); None when none are held."""
        if not self._cut.reasons:
            return None
        return self._cut.reported_at + REPORT_EVERY_S - self._mono()

    def report_if_due(self) -> None:
        """The cut-offs held back since the last warning, once ``REPORT_EVERY_S`` has passed."""
        if self._cut.reasons and self._mono() - self._cut.reported_at >= REPORT_EVERY_S:
            self.report()

    def report(self) -> None:
        cut = self._cut
        if not cut.reasons:
            return
        total = sum(cut.reasons.values())
        reasons = ", ".join(f"{n} {why}" for why, n in cut.reasons.most_common())
        clients = ", ".join(f"{address} ({n})" for address, n in cut.clients.most_common(5))
        more = f" and {len(cut.clients) - 5} more" if len(cut.clients) > 5 else ""
        log.warning("cut off %d slow HTTP client connection(s): %s; from %s%s", total, reasons, clients, more)
        self._cut = CutOffs(reported_at=self._mono())

    def accept_failed(self, exc: OSError, retry_s: float) -> None:
        """An accept that failed (out of descriptors), said at most every REPORT_EVERY_S: EMFILE must not
        flood the log."""
        if self._mono() - self._accept_failed_at >= REPORT_EVERY_S:
            self._accept_failed_at = self._mono()
            log.warning("HTTP: cannot accept a connection (%s, %d open); retrying in %g s",
                        exc.strerror or exc, len(self._open), retry_s)
