"""Publishes each tick's state: an in-memory holder for HTTP and an atomic JSON file for the CLI.

Scrapes and `gpuwatch status` read what was published here and never touch sysfs while the daemon
runs, so a hung GPU read can never hang them.
"""

from __future__ import annotations

import json
import os

from gpuwatch.safefs import client_refusal, read_bounded

# `gpuwatch health` imports this module for is_stale: the model's classes cost it 20-40 ms, typing, pathlib and
# threading (annotations only here; the daemon's StateHolder imports threading) a tenth of its time
# (tests/cluster/test_health_imports.py).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path

    from gpuwatch.model import PublishedState
    from gpuwatch.publish.schema import StatusDocument

# Its logger is "gpuwatch.state" (the name log lines had before the move), made where it logs: `gpuwatch health`
# imports this module for is_stale alone, and importing logging would be a sixth of its time.

# A published state older than this many intervals (+ slack) means the control loop is stuck:
# /healthz answers 503 and `gpuwatch status` reports a failure.
STALE_AFTER_TICKS = 5
STALE_SLACK_S = 2.0
# The state document of a large machine is a few hundred KiB; a file near this bound is not one (safefs).
STATE_FILE_MAX_BYTES = 32 * 1024 * 1024


def is_stale(age_s: float, interval_s: float) -> bool:
    """Whether a state published ``age_s`` ago by a daemon ticking every ``interval_s`` is stale."""
    return age_s > STALE_AFTER_TICKS * interval_s + STALE_SLACK_S


class StateHolder:
    """The latest PublishedState and its JSON document, swapped atomically under a lock."""

    def __init__(self) -> None:
        import threading  # here, not above: see the imports

        self._lock = threading.Lock()
        self._published = threading.Condition(self._lock)
        self._state: PublishedState | None = None
        self._document: StatusDocument | None = None

    def publish(self, state: PublishedState, document: StatusDocument) -> None:
        with self._lock:
            self._state, self._document = state, document
            self._published.notify_all()

    def wait_newer(self, than: object | None, timeout_s: float) -> PublishedState | None:
        """The latest state once it is not ``than`` (a tick published), or after ``timeout_s`` whatever it is."""
        with self._lock:
            self._published.wait_for(lambda: self._state is not than, timeout_s)
            return self._state

    def latest(self) -> PublishedState | None:
        with self._lock:
            return self._state

    def document(self) -> StatusDocument | None:
        with self._lock:
            return self._document


def write_state_file(path: Path, document: StatusDocument) -> None:
    """tmp + rename in the same directory: a reader sees the old or the new file, never half of one.

    The tmp name is fixed per process (one writer: the daemon's tick) rather than mkstemp's random
    one, whose name generation and exclusive create were a tenth of a tick (docs/performance.md). That is
    safe because the daemon refuses a runtime directory that another user can write (daemon/lock.py);
    O_NOFOLLOW all the same.
    """
    directory = os.fspath(path.parent)
    tmp = os.path.join(directory, f".state-{os.getpid()}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    try:
        with os.fdopen(fd, "w") as handle:
            # dumps, not dump: only the one-shot path uses the C encoder; json.dump's chunked
            # pure-Python encoder was half of a tick's CPU (docs/performance.md).
            handle.write(json.dumps(document, separators=(",", ":")))
            os.fchmod(handle.fileno(), 0o644)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def read_state_file(path: Path) -> StatusDocument | None:
    """The daemon's last document, or None when there is none (daemon not running or never wrote). A client
    reads it only in a directory root or the caller owns, that nobody else can write (``safefs.client_refusal``),
    and only a regular file within ``STATE_FILE_MAX_BYTES``; else one line says why."""
    refusal = client_refusal(os.path.dirname(os.path.abspath(path)))
    try:
        if refusal is not None:
            raise OSError(refusal)
        document: StatusDocument = json.loads(read_bounded(path, STATE_FILE_MAX_BYTES))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        import logging

        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        logging.getLogger("gpuwatch.state").warning("cannot read state file %s: %s", path, why)
        return None
    return document
