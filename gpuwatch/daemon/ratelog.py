"""A log line that a local user can cause on demand, rate-limited: one line per key per ``every_s``, with how many
were left out since (a hostile client must not fill the journal, and the first of each kind is never lost)."""

from __future__ import annotations

import logging
import threading
import time

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
