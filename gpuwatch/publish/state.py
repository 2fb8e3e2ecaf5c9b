"""Publishes each tick's state: an in-memory holder for HTTP and an atomic JSON file for the CLI.

Scrapes and `gpuwatch status` read what was published here and never touch sysfs while the daemon
runs, so a hung GPU read can never hang them.
"""

from __future__ import annotations

import os
import time

from gpuwatch.safefs import client_refusal, read_bounded, write_all

# `gpuwatch health` imports this module for is_stale: the model's classes cost it 20-40 ms, typing, pathlib and
# threading (annotations only here; the daemon's StateHolder imports threading) a tenth of its time
# (tests/cluster/test_health_imports.py).
TYPE_CHECKING = False
if TYPE_CHECKING:
    import threading
    from collections.abc import Callable
    from pathlib import Path

    from gpuwatch.model import PublishedState
    from gpuwatch.publish.document import StatusDocument

# Its logger is "gpuwatch.state" (the name log lines had before the move), made where it logs: `gpuwatch health`
# imports this module for is_stale alone, and importing logging would be a sixth of its time.

# A published state older than this many intervals (+ slack) means the control loop is stuck:
# /healthz answers 503 and `gpuwatch status` reports a failure.
STALE_AFTER_TICKS = 5
STALE_SLACK_S = 2.0
# The state document of a large machine is a few hundred KiB; a file near this bound is not one (safefs).
STATE_FILE_MAX_BYTES = 32 * 1024 * 1024


# A state stamped further ahead than this is from the future (a clock stepped, or the file is not the daemon's):
# a finding of its own (G015), never "fresh".
FUTURE_SLACK_S = 2.0
# The kernel's random id of this boot (Documentation/admin-guide/sysctl/kernel.rst, "random"): CLOCK_BOOTTIME
# stamps compare only within one boot, and a restarted daemon takes receipts back only from its own boot.
BOOT_ID_FILE = "sys/kernel/random/boot_id"  # under a proc root
BOOT_ID_PATH = "/proc/" + BOOT_ID_FILE


def is_stale(age_s: float, interval_s: float) -> bool:
    """Whether a state published ``age_s`` ago by a daemon ticking every ``interval_s`` is stale."""
    return age_s > STALE_AFTER_TICKS * interval_s + STALE_SLACK_S


def from_future(age_s: float) -> bool:
    """Whether ``state_age``'s answer says the state was stamped ahead of now."""
    return age_s < -FUTURE_SLACK_S


def boot_id(path: str = BOOT_ID_PATH) -> str | None:
    """The boot id in ``path`` (a UUID, 36 characters); None where it cannot be read or is empty."""
    try:
        with open(path, "rb") as handle:
            return handle.read(64).decode("ascii", "replace").strip() or None
    except OSError:
        return None


def this_boot() -> tuple[str | None, float]:
    """This boot's id (None where /proc does not say) and CLOCK_BOOTTIME now (clock_gettime(2): counts suspend)."""
    return boot_id(), time.clock_gettime(time.CLOCK_BOOTTIME)


def state_age(document: StatusDocument, now_unix: float, boot: str | None, now_boottime_s: float) -> float:
    """Seconds since the tick of a decoded ``document`` (publish/decode.py). By CLOCK_BOOTTIME when the daemon
    stamped it on this boot (``boot``: ``this_boot``), which no settimeofday, NTP step or RTC fault moves; else by
    the wall clocks, which then must agree. Negative: stamped in the future (``from_future``)."""
    daemon = document.get("daemon")
    if daemon is not None and boot is not None and daemon.get("boot_id") == boot:
        stamp = daemon.get("taken_boottime_s")
        if stamp is not None:
            return now_boottime_s - float(stamp)
    return now_unix - float(document["taken_unix"])


def parse(data: bytes) -> object:
    """The state file's JSON as Python objects, exactly as ``json.loads`` gives them, by the C scanner that
    ``json.loads`` itself runs (CPython's ``_json``) without importing ``json``: its import, with re and enum under
    it, was a third of `gpuwatch health`'s own time (tests/cluster/test_health_imports.py). The daemon writes one
    compact object in UTF-8; anything else, and a document the scanner does not take whole, goes to
    ``json.loads`` itself (its encoding detection, its error and message: a ValueError)."""
    scan = _c_scanner() if data[:1] == b"{" else None
    if scan is not None:
        try:
            text = data.decode("utf-8")
            value, end = scan(text, 0)
        except (UnicodeDecodeError, StopIteration, ValueError, SystemError):
            # Not JSON: _json's error needs json.decoder imported (it takes JSONDecodeError from sys.modules; a
            # SystemError when it is not there): json.loads below raises it with its message.
            pass
        else:
            if not text[end:].strip(" \t\n\r"):  # JSON's whitespace (RFC 8259, section 2) only after it
                return value
    import json

    return json.loads(data)


def _c_scanner() -> Callable[[str, int], tuple[object, int]] | None:
    try:
        from _json import make_scanner
    except ImportError:  # pragma: no cover - an interpreter without CPython's accelerator
        return None
    return make_scanner(_Decoder)  # type: ignore[arg-type]  # it reads a JSONDecoder's attributes, duck-typed


class _Decoder:
    """What ``_json.make_scanner`` reads from its context: a default ``json.JSONDecoder``'s settings (strict
    strings, no hooks, Python's int and float; NaN and the infinities as ``float`` spells them, which are
    json.decoder's own constants)."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = float


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

    def wait_newer(self, than: object | None, timeout_s: float,
                   stopping: threading.Event | None = None) -> PublishedState | None:
        """The latest state once it is not ``than`` (a tick published), once ``stopping`` is set (and ``wake``
        called), or after ``timeout_s``, whatever it is."""
        with self._lock:
            self._published.wait_for(
                lambda: self._state is not than or (stopping is not None and stopping.is_set()), timeout_s)
            return self._state

    def wake(self) -> None:
        """Every ``wait_newer`` looks at its ``stopping`` again (a server stopping)."""
        with self._lock:
            self._published.notify_all()

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
    O_NOFOLLOW all the same. The bytes go out with os.write: a text-mode file object's encoder and buffer
    were a third of this function's time.
    """
    data = _encoder()(document).encode("ascii")  # ensure_ascii: the encoder's output is ASCII
    directory = os.fspath(path.parent)
    tmp = os.path.join(directory, f".state-{os.getpid()}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    try:
        try:
            write_all(fd, data)
            os.fchmod(fd, 0o644)  # the umask's bits back: `gpuwatch status` runs as any user
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


_ENCODE: Callable[[object], str] | None = None


def _encoder() -> Callable[[object], str]:
    """The state file's encoder, made once: compact, and C's one-shot encoder (``encode``, not ``iterencode``:
    json.dump's chunked pure-Python path was half of a tick's CPU, docs/performance.md). check_circular off:
    the document is a tree made fresh each tick (publish/document.py), never a cycle, and the check kept a
    dict of every container's id per encode."""
    global _ENCODE
    if _ENCODE is None:
        import json  # here, not above: the readers parse without it (``parse``)

        _ENCODE = json.JSONEncoder(separators=(",", ":"), check_circular=False).encode
    return _ENCODE


def read_state(path: str | Path) -> tuple[StatusDocument | None, str | None]:
    """The daemon's last document (decoded: publish/decode.py), or None and why it cannot be used; (None, None)
    when there is none (daemon not running or never wrote). A client reads it only in a directory root or the
    caller owns, that nobody else can write (``safefs.client_refusal``), and only a regular file within
    ``STATE_FILE_MAX_BYTES``."""
    from gpuwatch.publish.decode import Invalid, document

    refusal = client_refusal(os.path.dirname(os.path.abspath(path)))
    if refusal is not None:
        return None, refusal
    try:
        return document(parse(read_bounded(path, STATE_FILE_MAX_BYTES))), None
    except FileNotFoundError:
        return None, None
    except OSError as exc:
        return None, exc.strerror or str(exc)
    except RecursionError:
        return None, "nested too deep"
    except (ValueError, Invalid) as exc:  # JSON's and UTF-8's errors are ValueErrors too
        return None, str(exc)


def read_state_file(path: Path) -> StatusDocument | None:
    """The daemon's last document, or None when there is none or it cannot be used (said in one log line)."""
    document, problem = read_state(path)
    if problem is not None:
        import logging

        logging.getLogger("gpuwatch.state").warning("cannot use state file %s: %s", path, problem)
    return document
