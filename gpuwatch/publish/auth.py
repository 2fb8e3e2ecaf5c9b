"""HTTP basic authentication against the web config's bcrypt hashes, without bcrypt's cost on every scrape.

bcrypt is slow on purpose (cost 10: tens of milliseconds). A password once verified is remembered: the
cache is keyed by the user and holds a SHA-256 of the password (never the password) with the bcrypt hash
it was verified against, so a changed hash in the web config is verified again; it is bounded
(``CACHE_SIZE``, least recently used out) and compared in constant time. A miss runs bcrypt on one
worker thread, never on the server's event loop, and at most ``MAX_PENDING`` misses wait at once: a
client guessing passwords gets 429 beyond that, while scrapes whose password is cached go on unaffected.
A wrong password is never cached. An unknown user is checked against a dummy hash, so the answer takes
as long as for a known one (the exporter-toolkit does the same).
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
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from typing import Literal

import bcrypt

log = logging.getLogger("gpuwatch.http")

CACHE_SIZE = 256
MAX_PENDING = 8


@functools.cache
def _dummy_hash() -> str:
    """Verified against when the user is unknown (cost 10, as htpasswd -B makes them); made on first use."""
    return bcrypt.hashpw(b"gpuwatch: no such user", bcrypt.gensalt(10)).decode()


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

    def __init__(self) -> None:
        self._salt = os.urandom(16)  # the cache's password digests are of this process only
        self._cache: OrderedDict[str, tuple[bytes, str]] = OrderedDict()  # user -> (digest, the bcrypt hash)
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gpuwatch-bcrypt")
        self._pending = 0

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

    async def check(self, users: dict[str, str], user: str, password: str) -> Verdict:
        if self.cached(users, user, password):
            return "ok"
        if self._pending >= MAX_PENDING:
            return "busy"
        hashed = users.get(user)
        self._pending += 1
        try:
            ok = await asyncio.get_running_loop().run_in_executor(
                self._pool, _verify, password, hashed)
        finally:
            self._pending -= 1
        if not ok or hashed is None:
            return "denied"
        self._cache[user] = (self._digest(user, password), hashed)
        self._cache.move_to_end(user)
        while len(self._cache) > CACHE_SIZE:
            self._cache.popitem(last=False)
        return "ok"


def _verify(password: str, hashed: str | None) -> bool:
    """On the bcrypt worker: whether ``password`` matches ``hashed``; an unknown user (None) costs the same."""
    try:
        ok = bcrypt.checkpw(password.encode("utf-8"), (hashed or _dummy_hash()).encode("ascii"))
    except ValueError:  # a malformed hash (the web config's validation lets none through), a password over 72 bytes
        return False
    return ok and hashed is not None
