"""Per-user bounds on the control socket: what one local user may cost the daemon (``now`` is an argument).

The socket is every user's (mode 0666), so one user's load must never cost the loop its tick nor root its
commands. ``Bucket``: a token bucket (``rate_per_s`` refilled, ``burst`` at most) for the lines and the bytes a
user's sessions send: an empty bucket says how long to wait, and the session's thread waits before it reads
more (the kernel's socket buffer fills, the sender blocks: back-pressure, never a busy loop). ``Slots``: how
many connections each uid holds while they are read; a privileged peer is never counted (it has its own socket
too: daemon/control.py), an unprivileged uid over ``per_user`` or all of them over ``total`` is refused at once.

``RateLimitedLog``: a log line a local user can cause on demand, one per key per ``every_s``, with how many
were left out since (a hostile client must not fill the journal, and the first of each kind is never lost).
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass

LINES_PER_S = 20.0  # a wrapper beats once a second per run; a user with many runs shares this
LINES_BURST = 100.0
BYTES_PER_S = 512 * 1024.0  # a 64-rank Beat is about 20 KiB
BYTES_BURST = 2 * 1024 * 1024.0
CONNECTIONS_PER_USER = 4  # being read at once (an attach session, once attached, is bounded by max_runs_per_user)
CONNECTIONS_TOTAL = 16  # unprivileged, being read at once


@dataclass
class Bucket:
    rate_per_s: float
    burst: float
    tokens: float = -1.0  # -1: full at its first take
    at: float = 0.0

    def take(self, amount: float, now: float) -> float:
        """Take ``amount``; the seconds to wait before the next take may succeed (0: none). The debt is kept, so a
        sender faster than the rate waits in proportion to what it sent."""
        if self.tokens < 0:
            self.tokens, self.at = self.burst, now
        self.tokens = min(self.burst, self.tokens + (now - self.at) * self.rate_per_s)
        self.at = now
        self.tokens -= amount
        return 0.0 if self.tokens >= 0 else -self.tokens / self.rate_per_s


@dataclass
class UserRate:
    """One user's lines and bytes (all its sessions together)."""

    lines: Bucket
    size: Bucket

    @classmethod
    def default(cls) -> UserRate:
        return cls(Bucket(LINES_PER_S, LINES_BURST), Bucket(BYTES_PER_S, BYTES_BURST))

    def take(self, lines: int, size_bytes: int, now: float) -> float:
        return max(self.lines.take(lines, now), self.size.take(size_bytes, now))


class Slots:
    """Connections being read, per uid (privileged peers are not counted and never refused)."""

    def __init__(self, per_user: int = CONNECTIONS_PER_USER, total: int = CONNECTIONS_TOTAL) -> None:
        self.per_user = per_user
        self.total = total
        self.held: dict[int, int] = {}

    def refusal(self, uid: int) -> str | None:
        """Why one more connection of ``uid`` is refused (one line), None when it may take a slot."""
        if self.held.get(uid, 0) >= self.per_user:
            return f"too many connections of uid {uid} at once (at most {self.per_user})"
        if sum(self.held.values()) >= self.total:
            return f"too many connections at once (at most {self.total} of unprivileged users)"
        return None

    def take(self, uid: int) -> None:
        self.held[uid] = self.held.get(uid, 0) + 1

    def give(self, uid: int) -> None:
        left = self.held.get(uid, 0) - 1
        if left > 0:
            self.held[uid] = left
        else:
            self.held.pop(uid, None)


EVERY_S = 10.0


class RateLimitedLog:
    def __init__(self, logger: logging.Logger, every_s: float = EVERY_S) -> None:
        self.logger = logger
        self.every_s = every_s
        self._lock = threading.Lock()
        self._last: dict[str, tuple[float, int]] = {}  # key -> (when last written, left out since)

    def warning(self, key: str, message: str, *args: object, now: float | None = None) -> bool:
        """Log ``message % args`` at WARNING unless ``key`` was logged less than ``every_s`` ago; whether it was."""
        now = time.monotonic() if now is None else now
        with self._lock:
            last, left_out = self._last.get(key, (-self.every_s, 0))
            if now - last < self.every_s:
                self._last[key] = (last, left_out + 1)
                return False
            self._last[key] = (now, 0)
            if len(self._last) > 1024:  # keys name uids and kinds: bounded anyway, never a leak
                self._last = {key: (now, 0)}
        suffix = f" ({left_out} more like it in the last {now - last:.0f} s not logged)" if left_out else ""
        self.logger.warning(message + suffix, *args)
        return True
