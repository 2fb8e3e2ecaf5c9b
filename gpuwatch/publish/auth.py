"""HTTP basic authentication against the web config's bcrypt hashes, without bcrypt's cost on every scrape.

bcrypt is slow on purpose (cost 10: tens of milliseconds). A password once verified is remembered: the
cache is keyed by the user and holds a SHA-256 of the password (never the password) with the bcrypt hash
it was verified against, so a changed hash in the web config is verified again; it is bounded
(``CACHE_SIZE``, least recently used out) and compared in constant time. A miss runs bcrypt on one
worker thread, never on the server's event loop, and at most ``MAX_PENDING`` misses wait at once, shared
per client address (issue 47: one global first-come budget let a flood from one address lock out every
correct login not yet cached, Prometheus after a restart included): one address has at most
``MAX_PENDING_PER_CLIENT`` waiting, and the addresses with a wrong password in the last ``FAILURE_MEMORY_S``
together at most ``MAX_PENDING - RESERVED_FOR_CLEAN``, so the rest stays free for addresses without recent
failures. Beyond that the answer is 429; scrapes whose password is cached go on unaffected. A wrong password
is never cached. An unknown user is checked against a dummy hash of the configured hashes' highest cost, so
the answer takes as long as for a known one (the exporter-toolkit does the same, at a fixed cost).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import functools
import hashlib
import hmac
import logging
import os
import time
from collections import Counter, OrderedDict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Literal

import bcrypt

log = logging.getLogger("gpuwatch.http")

CACHE_SIZE = 256
MAX_PENDING = 8  # bcrypt checks waiting or running at once, all clients together
MAX_PENDING_PER_CLIENT = 2  # from one address
RESERVED_FOR_CLEAN = 4  # of MAX_PENDING, only for addresses without a wrong password lately
FAILURE_MEMORY_S = 60.0  # an address is "failing" this long after its last wrong password
FAILING_ADDRESSES = 4096  # addresses remembered at most (the least recent forgotten first)
DEFAULT_COST = 10  # the dummy hash's cost without any configured user (htpasswd -B's)


def bcrypt_cost(hashed: str) -> int:
    """The cost of a modular-crypt bcrypt hash (``$2b$12$...`` -> 12); config/web.py validated the form."""
    return int(hashed.split("$")[2])


@functools.cache
def _dummy_hash(cost: int) -> str:
    """Verified against when the user is unknown, at the cost of the configured hashes; made on first use."""
    return bcrypt.hashpw(b"gpuwatch: no such user", bcrypt.gensalt(cost)).decode()


Verdict = Literal["ok", "denied", "busy"]


def credentials(authorization: str | None) -> tuple[str, str] | None:
    """(user, password) of an ``Authorization: Basic ...`` header; None when there is none or it is not one."""
    if not authorization:
        return None
    scheme, _, encoded = authorization.strip().partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        decoded = base64.b64decode(encoded.strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None
    user, colon, password = decoded.partition(":")
    return (user, password) if colon else None


class BasicAuth:
    """Checks credentials against a user table (the Gate's, which may change between calls)."""

    def __init__(self, monotonic: Callable[[], float] = time.monotonic) -> None:
        self._salt = os.urandom(16)  # the cache's password digests are of this process only
        self._cache: OrderedDict[str, tuple[bytes, str]] = OrderedDict()  # user -> (digest, the bcrypt hash)
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gpuwatch-bcrypt")
        self._mono = monotonic
        self._pending: Counter[str] = Counter()  # client address -> its checks waiting or running
        self._failed_at: OrderedDict[str, float] = OrderedDict()  # client address -> its last wrong password

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _digest(self, user: str, password: str) -> bytes:
        return hashlib.sha256(self._salt + user.encode() + b"\0" + password.encode()).digest()

    def cached(self, users: dict[str, str], user: str, password: str) -> bool:
        """Whether this password was verified for this user's current hash (no bcrypt)."""
        entry = self._cache.get(user)
        hashed = users.get(user)
        if entry is None or hashed is None or entry[1] != hashed:
            return False
        if not hmac.compare_digest(entry[0], self._digest(user, password)):
            return False
        self._cache.move_to_end(user)
        return True

    def failing(self, client: str) -> bool:
        """Whether ``client`` sent a wrong password in the last ``FAILURE_MEMORY_S``."""
        failed_at = self._failed_at.get(client)
        return failed_at is not None and self._mono() - failed_at < FAILURE_MEMORY_S

    def admits(self, client: str) -> bool:
        """Whether a bcrypt check for ``client`` may wait now (pure apart from reading the counts)."""
        total = sum(self._pending.values())
        if total >= MAX_PENDING or self._pending[client] >= MAX_PENDING_PER_CLIENT:
            return False
        if not self.failing(client):
            return True
        by_failing = sum(n for address, n in self._pending.items() if self.failing(address))
        return by_failing < MAX_PENDING - RESERVED_FOR_CLEAN

    async def check(self, users: dict[str, str], user: str, password: str, client: str = "?") -> Verdict:
        if self.cached(users, user, password):
            return "ok"
        if not self.admits(client):
            return "busy"
        hashed = users.get(user)
        cost = max((bcrypt_cost(h) for h in users.values()), default=DEFAULT_COST)
        self._pending[client] += 1
        try:
            ok = await asyncio.get_running_loop().run_in_executor(self._pool, _verify, password, hashed, cost)
        finally:
            self._pending[client] -= 1
            if not self._pending[client]:
                del self._pending[client]
        if not ok or hashed is None:
            self._failed(client)
            return "denied"
        self._cache[user] = (self._digest(user, password), hashed)
        self._cache.move_to_end(user)
        while len(self._cache) > CACHE_SIZE:
            self._cache.popitem(last=False)
        return "ok"

    def _failed(self, client: str) -> None:
        self._failed_at[client] = self._mono()
        self._failed_at.move_to_end(client)
        while len(self._failed_at) > FAILING_ADDRESSES:
            self._failed_at.popitem(last=False)


def _verify(password: str, hashed: str | None, dummy_cost: int) -> bool:
    """On the bcrypt worker: whether ``password`` matches ``hashed``; an unknown user (None) costs the same:
    a dummy hash of ``dummy_cost``."""
    try:
        ok = bcrypt.checkpw(password.encode("utf-8"), (hashed or _dummy_hash(dummy_cost)).encode("ascii"))
    except ValueError:  # a malformed hash (the web config's validation lets none through), a password over 72 bytes
        return False
    return ok and hashed is not None
