"""The attach protocol: how a run started by `gpuwatch train` (any user, any venv) joins the daemon.

One long-lived connection per run on the daemon's control socket (``config.base.CONTROL_SOCKET_NAME``),
JSON lines both ways. The wrapper (`gpuwatch train`, the run's parent) speaks first:

1. wrapper -> daemon: ``Attach`` (once per connection). The daemon takes who is asking from the kernel
   (SO_PEERCRED), never from the message: the run's ``pid`` must exist, belong to that user and be the
   peer or a descendant of it. Reply: ``Attached`` (``ok`` false with a one-line ``message``, then the
   daemon closes; ``ok`` true with a ``message``: a note the wrapper says, such as a ``--gpu`` not
   here). A re-attach after a daemon restart sends the ``run_id`` and the pause state it holds.
2. wrapper -> daemon, at least every ``BEAT_INTERVAL_S``: ``Beat`` (the ranks' heartbeats as the wrapper
   read them from its own run directory; the daemon never opens a user's files), and ``Exited`` when the
   command ended (``restarting``: the wrapper starts it again, ``--restart``) or ``Restarted`` with the
   new pid. A ``Beat`` with ``suspended`` (the signal) says its user stopped the run (Ctrl-Z): the wrapper
   sends it before it stops itself, so the daemon keeps the silent session and never judges the run hung;
   its first ``Beat`` once continued has none (an older daemon ignores the key and drops the silent session
   as before: the wrapper re-attaches when continued).
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

Stdlib only (the wrapper runs in the user's interpreter; the daemon never imports torch).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

PROTOCOL_VERSION = 1
MAX_LINE_BYTES = 64 * 1024  # a Beat of 64 ranks' heartbeats fits; a longer line is a protocol error
BEAT_INTERVAL_S = 1.0
RECONNECT_S = 1.0
HOLD_WITHOUT_DAEMON_S = 60.0  # heartbeat.PAUSE_STALE_S: what the training side already tolerates
NAME_MAX_CHARS = 64
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


def _object(line: bytes) -> dict[str, Any]:
    if len(line) > MAX_LINE_BYTES:
        raise ProtocolError(f"line of {len(line)} bytes (at most {MAX_LINE_BYTES})")
    try:
        raw = json.loads(line)
    except ValueError as exc:
        raise ProtocolError(f"not JSON: {exc}") from None
    if not isinstance(raw, dict):
        raise ProtocolError("not a JSON object")
    return raw


def decode_request(line: bytes) -> Message:
    """A wrapper's line; raises ProtocolError for anything else (unknown keys are ignored)."""
    raw = _object(line)
    try:
        cmd = raw.get("cmd")
        if cmd == "attach":
            gpus = raw.get("gpus")
            return Attach(pid=int(raw["pid"]), argv=[str(a) for a in raw["argv"]],
                          name=None if raw.get("name") is None else str(raw["name"]),
                          gpus=None if gpus is None else [str(g) for g in gpus],
                          restart=str(raw.get("restart", "no")),
                          run_id=None if raw.get("run_id") is None else str(raw["run_id"]),
                          paused=bool(raw.get("paused", False)),
                          reason=None if raw.get("reason") is None else str(raw["reason"]),
                          job_id=None if raw.get("job_id") is None else str(raw["job_id"]),
                          v=int(raw.get("v", PROTOCOL_VERSION)))
        if cmd == "beat":
            beats = raw.get("heartbeats", [])
            if not isinstance(beats, list) or not all(isinstance(b, dict) for b in beats):
                raise ProtocolError("beat: heartbeats is not a list of objects")
            suspended = raw.get("suspended")
            return Beat(heartbeats=beats, suspended=None if suspended is None else int(suspended))
        if cmd == "exited":
            signalled = raw.get("signalled")
            return Exited(code=int(raw["code"]), restarting=bool(raw["restarting"]),
                          signalled=None if signalled is None else int(signalled))
        if cmd == "restarted":
            return Restarted(pid=int(raw["pid"]))
    except (KeyError, TypeError, ValueError) as exc:
        raise ProtocolError(f"{cmd}: {exc!r}") from None
    raise ProtocolError(f"unknown cmd {cmd!r}")


def decode_reply(line: bytes) -> Attached | Event:
    """A daemon's line to a wrapper; raises ProtocolError for anything else."""
    raw = _object(line)
    try:
        if "event" in raw:
            if raw["event"] not in EVENT_KINDS:
                raise ProtocolError(f"unknown event {raw['event']!r}")
            return Event(event=raw["event"], reason=None if raw.get("reason") is None else str(raw["reason"]))
        interval = raw.get("interval_s")
        return Attached(ok=bool(raw["ok"]), message=str(raw.get("message", "")),
                        run_id=None if raw.get("run_id") is None else str(raw["run_id"]),
                        name=None if raw.get("name") is None else str(raw["name"]),
                        interval_s=None if interval is None else float(interval))
    except (KeyError, TypeError, ValueError) as exc:
        raise ProtocolError(f"reply: {exc!r}") from None
