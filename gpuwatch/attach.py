"""The attach protocol: how a run started by `gpuwatch train` (any user, any venv) joins the daemon.

One long-lived connection per run on the daemon's control socket (``config.runtime.CONTROL_SOCKET_NAME``),
JSON lines both ways. The wrapper (`gpuwatch train`, the run's parent) speaks first:

1. wrapper -> daemon: ``Attach`` (once per connection). The daemon takes who is asking from the kernel
   (SO_PEERCRED), never from the message: the run's ``pid`` must exist, belong to that user and be the
   peer or a descendant of it. Reply: ``Attached`` (``ok`` false with a one-line ``message``, then the
   daemon closes; ``ok`` true with a ``message``: a note the wrapper says, such as a ``--gpu`` not
   here). A re-attach after a daemon restart sends the ``run_id`` and the pause state it holds.
2. wrapper -> daemon: ``Beat`` (the ranks' heartbeats as the wrapper read them from its own run directory, every
   ``BEAT_INTERVAL_S``; the daemon never opens a user's files), when it differs from the last one sent and at
   least every ``BEAT_KEEPALIVE_S`` (the daemon judges a beat by its own stamps, not by when it came), and
   ``Exited`` when the command ended (``restarting``: the wrapper starts it again, ``--restart``) or
   ``Restarted`` with the new pid. A ``Beat`` with ``suspended`` (the signal) says its user stopped the run
   (Ctrl-Z): the wrapper sends it before it stops itself, so the daemon keeps the silent session and never
   judges the run hung; its first ``Beat`` once continued has none (an older daemon ignores the key and drops
   the silent session as before: the wrapper re-attaches when continued).
3. daemon -> wrapper, whenever its tick decides: ``Event``: ``pause`` (with the reason: the wrapper
   creates the pause file and refreshes it every ``heartbeat.PAUSE_REFRESH_S``), ``resume`` (removes it),
   ``stop`` (a user's `gpuwatch stop`: the tree is stopped gracefully and not restarted), ``hung`` (no
   heartbeat for the hang timeout: the wrapper restarts the command when ``--restart`` allows, else
   says so).

The daemon gone (end of stream): the wrapper keeps the pause state it holds for ``HOLD_WITHOUT_DAEMON_S``
while it reconnects every ``RECONNECT_S``; a daemon that answers gets ``Attach`` with ``run_id`` and
``paused`` and decides at its next tick; none within that time, the pause is released with one line.
No daemon at the start: the run trains anyway, says once that it is not protected, and attaches when
a daemon appears.

Every line is decoded by one function (``json_object``, under ``decode_request`` and ``decode_reply``), which
bounds what a local user can send: the line (``MAX_LINE_BYTES``), its nesting (``MAX_DEPTH``: no RecursionError),
its numbers (no ``NaN``/``Infinity``/``1e999``: no OverflowError later; pids within ``MAX_PID``), and every
string in it, keys included (``text_refusal``: at most ``TEXT_MAX_CHARS``, printable: no control character,
no terminal escape, no lone surrogate that would make /metrics or a UTF-8 terminal fail later). Fields with
a meaning have their own tighter bounds (``JOB_ID_MAX_CHARS``, ``REASON_MAX_CHARS``, ``RUN_ID_MAX_CHARS``).
``LineFramer`` splits a stream into lines in linear time (a flood of blank lines costs each byte once).

Stdlib only (the wrapper runs in the user's interpreter; the daemon never imports torch).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

# Connecting is a leaf of its own (the CLI's commands connect without this module); the wrapper's names here.
from gpuwatch.connect import CONNECT_RETRY_S as CONNECT_RETRY_S
from gpuwatch.connect import REFUSED_GRACE_S as REFUSED_GRACE_S
from gpuwatch.connect import connect_retrying as connect_retrying

PROTOCOL_VERSION = 1
MAX_LINE_BYTES = 64 * 1024  # a Beat of 64 ranks' heartbeats fits; a longer line is a protocol error
BEAT_INTERVAL_S = 1.0
# An unchanged Beat goes again after this long: the session's keep-alive, well inside the daemon's silence bound
# (daemon/attach_sessions.SESSION_SILENCE_S, ten intervals).
BEAT_KEEPALIVE_S = 3 * BEAT_INTERVAL_S
RECONNECT_S = 1.0
HOLD_WITHOUT_DAEMON_S = 60.0  # heartbeat.PAUSE_STALE_S: what the training side already tolerates
NAME_MAX_CHARS = 64
TEXT_MAX_CHARS = 4096  # any one string of a line (an argv element, a heartbeat's field)
JOB_ID_MAX_CHARS = 64  # a Slurm job id ("123_4", "123+1") is far shorter
REASON_MAX_CHARS = 256
RUN_ID_MAX_CHARS = 64
LOG_PATH_MAX_BYTES = 4096  # PATH_MAX (include/uapi/linux/limits.h)
MAX_DEPTH = 8  # a Beat nests 3 deep (message, heartbeats, a heartbeat's fields)
MAX_PID = 1 << 22  # PID_MAX_LIMIT on 64-bit (include/linux/threads.h)
MAX_CODE = 1 << 16  # an exit status or a signal number (negative: killed by that signal)
EventKind = Literal["pause", "resume", "stop", "hung"]
EVENT_KINDS: tuple[EventKind, ...] = ("pause", "resume", "stop", "hung")


class ProtocolError(ValueError):
    """A line that is not a message of this protocol; the text is one line for the log."""


@dataclass(frozen=True)
class Attach:
    pid: int  # the training command's root process (the wrapper's child)
    argv: list[str]
    name: str | None = None  # `--name`; the daemon derives one from argv when None and keeps names unique
    gpus: list[str] | None = None  # `--gpu` slots declared up front; None: found from DRM fdinfo
    restart: str = "no"  # the wrapper's own policy, for status: "no" | "on-failure" | "on-failure:N"
    run_id: str | None = None  # set when re-attaching to a new daemon
    paused: bool = False  # the wrapper holds the pause file now (re-attach)
    reason: str | None = None  # the held pause's reason
    job_id: str | None = None  # SLURM_JOB_ID of the wrapper's environment, when set
    # The run's log, written by the wrapper as its user (cli/train/output.py): published for `gpuwatch logs`, which
    # reads it as its caller; the daemon never opens it. None: an older wrapper, or no copy kept.
    log_path: str | None = None
    cmd: Literal["attach"] = "attach"
    v: int = PROTOCOL_VERSION


@dataclass(frozen=True)
class Attached:
    ok: bool
    message: str = ""
    run_id: str | None = None
    name: str | None = None
    interval_s: float | None = None  # the daemon's tick


@dataclass(frozen=True)
class Beat:
    heartbeats: list[dict[str, Any]] = field(default_factory=list)  # heartbeat.Heartbeat as JSON, per rank
    cmd: Literal["beat"] = "beat"
    # Its user stopped the run (Ctrl-Z: SIGTSTP, or SIGTTIN/SIGTTOU) and the wrapper stops next: the signal.
    # None: it runs. Sent before the wrapper stops and again once continued; an older daemon ignores the key.
    suspended: int | None = None


@dataclass(frozen=True)
class Exited:
    code: int  # the command's exit status (negative: killed by that signal)
    restarting: bool
    # The signal the wrapper passed on to the command (its user's Ctrl-C, a kill of the wrapper): the run was
    # ended on purpose, not failed. None: it ended on its own (or a daemon's `stop`).
    signalled: int | None = None
    cmd: Literal["exited"] = "exited"


@dataclass(frozen=True)
class Restarted:
    pid: int
    cmd: Literal["restarted"] = "restarted"


@dataclass(frozen=True)
class Event:
    event: EventKind
    reason: str | None = None


Message = Attach | Beat | Exited | Restarted


def encode(message: Attach | Attached | Beat | Exited | Restarted | Event) -> bytes:
    return json.dumps(asdict(message), separators=(",", ":")).encode() + b"\n"


def text_refusal(text: str, max_chars: int = TEXT_MAX_CHARS) -> str | None:
    """Why ``text`` from a local user is refused (one line), None when it is usable: longer than ``max_chars``, or
    holding a character that is not printable (str.isprintable: the C0/C1 controls such as ESC, whose sequences
    would reach a terminal raw; lone surrogates, which no UTF-8 encoder takes; format and unassigned code points)."""
    if len(text) > max_chars:
        return f"{len(text)} characters (at most {max_chars})"
    if not text.isprintable():
        bad = next(c for c in text if not c.isprintable())
        return f"holds {ascii(bad)} (control characters and lone surrogates are refused)"
    return None


def log_path_refusal(path: str) -> str | None:
    """Why an attached run's log path is refused (one line): not absolute, not printable, over ``LOG_PATH_MAX_BYTES``
    (encoded) or holding a NUL."""
    why = text_refusal(path, LOG_PATH_MAX_BYTES)
    if why is not None:
        return why
    if len(path.encode("utf-8", "surrogateescape")) > LOG_PATH_MAX_BYTES:
        return f"over {LOG_PATH_MAX_BYTES} bytes"
    if not path.startswith("/"):
        return "not an absolute path"
    return None


class LineFramer:
    """A byte stream into lines (without the newline), in linear time: each byte is searched once, the buffer is
    compacted once per ``feed``. A line (or the unfinished rest) over ``max_bytes`` raises ProtocolError."""

    def __init__(self, max_bytes: int = MAX_LINE_BYTES) -> None:
        self.max_bytes = max_bytes
        self._buffer = bytearray()

    def feed(self, chunk: bytes) -> list[bytes]:
        start = len(self._buffer)
        self._buffer += chunk
        lines: list[bytes] = []
        begin = 0
        while (end := self._buffer.find(b"\n", start)) >= 0:
            if end - begin > self.max_bytes:
                raise ProtocolError(f"a line over {self.max_bytes} bytes")
            lines.append(bytes(self._buffer[begin:end]))
            begin = start = end + 1
        del self._buffer[:begin]
        if len(self._buffer) > self.max_bytes:
            raise ProtocolError(f"a line over {self.max_bytes} bytes")
        return lines

    @property
    def pending(self) -> bytes:
        """What was received after the last newline."""
        return bytes(self._buffer)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number here")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text[:20]} is out of range")
    return value


def json_object(line: bytes, max_bytes: int = MAX_LINE_BYTES) -> dict[str, Any]:
    """One line of a local client as a JSON object, every string and number in it checked (see the module's
    docstring); raises ProtocolError with one line. The control socket's plain requests use it too."""
    if len(line) > max_bytes:
        raise ProtocolError(f"line of {len(line)} bytes (at most {max_bytes})")
    try:
        raw = json.loads(line, parse_constant=_no_constant, parse_float=_finite)
    except RecursionError:
        raise ProtocolError("not JSON: nested too deep") from None
    except ValueError as exc:  # UnicodeDecodeError (not UTF-8) included
        raise ProtocolError(f"not JSON: {str(exc)[:200]}") from None
    if not isinstance(raw, dict):
        raise ProtocolError("not a JSON object")
    _check_values(raw)
    return raw


def _check_values(raw: dict[str, Any]) -> None:
    """Every string (keys too) printable and bounded, at most ``MAX_DEPTH`` levels (iterative: no recursion)."""
    todo: list[tuple[Any, int]] = [(raw, 1)]
    while todo:
        value, depth = todo.pop()
        if depth > MAX_DEPTH:
            raise ProtocolError(f"nested deeper than {MAX_DEPTH}")
        if isinstance(value, dict):
            todo.extend((key, depth) for key in value)
            todo.extend((item, depth + 1) for item in value.values())
        elif isinstance(value, list):
            todo.extend((item, depth + 1) for item in value)
        elif isinstance(value, str) and (why := text_refusal(value)):
            raise ProtocolError(f"a string {why}")


def _text(raw: dict[str, Any], key: str, max_chars: int = TEXT_MAX_CHARS) -> str | None:
    """An optional string field: a string within ``max_chars`` (printable: ``json_object`` checked), or None."""
    value = raw.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise ProtocolError(f"{key} is not a string")
    if len(value) > max_chars:
        raise ProtocolError(f"{key} of {len(value)} characters (at most {max_chars})")
    return value


def _log_path(raw: dict[str, Any]) -> str | None:
    path = _text(raw, "log_path", LOG_PATH_MAX_BYTES)
    if path is not None and (why := log_path_refusal(path)):
        raise ProtocolError(f"log_path {why}")
    return path


def _int(raw: dict[str, Any], key: str, low: int, high: int, default: int | None = None) -> int:
    """An integer field within [low, high] (a bool or a float is not one)."""
    value = raw.get(key, default)
    if value is None:
        raise ProtocolError(f"no {key}")
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ProtocolError(f"{key} is not an integer in [{low}, {high}]")
    return value


def _strings(raw: dict[str, Any], key: str) -> list[str] | None:
    value = raw.get(key)
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ProtocolError(f"{key} is not a list of strings")
    return value


def decode_request(line: bytes) -> Message:
    """A wrapper's line; raises ProtocolError for anything else (unknown keys are ignored)."""
    raw = json_object(line)
    cmd = raw.get("cmd")
    try:
        if cmd == "attach":
            argv = _strings(raw, "argv")
            if argv is None:
                raise ProtocolError("no argv")
            return Attach(pid=_int(raw, "pid", 1, MAX_PID), argv=argv, name=_text(raw, "name", NAME_MAX_CHARS),
                          gpus=_strings(raw, "gpus"), restart=_text(raw, "restart", NAME_MAX_CHARS) or "no",
                          run_id=_text(raw, "run_id", RUN_ID_MAX_CHARS), paused=raw.get("paused") is True,
                          reason=_text(raw, "reason", REASON_MAX_CHARS), job_id=_text(raw, "job_id", JOB_ID_MAX_CHARS),
                          log_path=_log_path(raw), v=_int(raw, "v", 0, MAX_CODE, PROTOCOL_VERSION))
        if cmd == "beat":
            beats = raw.get("heartbeats", [])
            if not isinstance(beats, list) or not all(isinstance(b, dict) for b in beats):
                raise ProtocolError("heartbeats is not a list of objects")
            suspended = None if raw.get("suspended") is None else _int(raw, "suspended", 1, MAX_CODE)
            return Beat(heartbeats=beats, suspended=suspended)
        if cmd == "exited":
            signalled = None if raw.get("signalled") is None else _int(raw, "signalled", 1, MAX_CODE)
            restarting = raw.get("restarting")
            if not isinstance(restarting, bool):
                raise ProtocolError("restarting is not true or false")
            return Exited(code=_int(raw, "code", -MAX_CODE, MAX_CODE), restarting=restarting, signalled=signalled)
        if cmd == "restarted":
            return Restarted(pid=_int(raw, "pid", 1, MAX_PID))
    except ProtocolError as exc:
        raise ProtocolError(f"{cmd}: {exc}") from None
    raise ProtocolError(f"unknown cmd {ascii(cmd)[:80]}")


def decode_reply(line: bytes) -> Attached | Event:
    """A daemon's line to a wrapper; raises ProtocolError for anything else."""
    raw = json_object(line)
    try:
        if "event" in raw:
            if raw["event"] not in EVENT_KINDS:
                raise ProtocolError(f"unknown event {raw['event']!r}")
            return Event(event=raw["event"], reason=_text(raw, "reason"))
        interval = raw.get("interval_s")
        return Attached(ok=bool(raw["ok"]), message=_text(raw, "message") or "", run_id=_text(raw, "run_id"),
                        name=_text(raw, "name"), interval_s=None if interval is None else float(interval))
    except (KeyError, TypeError, ValueError) as exc:
        raise ProtocolError(f"reply: {exc!r}") from None
