"""Attach sessions on the control socket (gpuwatch/attach.py): the daemon's end of `gpuwatch train`.

A connection whose first line is ``{"cmd": "attach", ...}`` becomes a session: the peer is who the
kernel says (SO_PEERCRED, ``peer_of``), the run's pid is checked (supervise/peers.py), the supervisor
registers it (``Sessions.attach``: the name, the bounds) and the reply goes back. Then its lines are
read one by one (each at most ``attach.MAX_LINE_BYTES``) with no whole-request deadline; a session silent
for ``SESSION_SILENCE_S`` (ten beat intervals: a wrapper sends an unchanged Beat every ``attach.BEAT_KEEPALIVE_S``)
is gone (unless its last ``Beat`` said its user suspended the run: then it is kept, silent, until the wrapper
is continued or its connection ends), and so is one that sends a line that is not the protocol (logged in one
line). The supervisor's events go back through the
session's ``_Link``, which never blocks: a wrapper that reads nothing breaks its own session, never the daemon's loop.

What a session may cost is bounded per user (daemon/bounds.py): its lines are framed in linear time
(``attach.LineFramer``), and all the sessions of one uid share one ``UserRate`` of lines and bytes: a session over
it waits before it reads on (its sender blocks), so blank lines or 64-rank Beats as fast as a socket goes cost
the loop nothing. A line that is not the protocol, and a ``Restarted`` naming a pid the Attach could not have
named (``peers.run_refusal``: the caller's own process or a descendant of it, the one check for every pid a
session names), gets an error answer (``Attached`` with ``ok`` false) and ends the session, logged in one
rate-limited line.
"""

from __future__ import annotations

import dataclasses
import logging
import pwd
import socket
import struct
import threading
import time
from typing import Any, Protocol, runtime_checkable

from gpuwatch import attach as proto
from gpuwatch.daemon.bounds import RateLimitedLog, UserRate
from gpuwatch.procfs import Procfs
from gpuwatch.supervise.access import Peer
from gpuwatch.supervise.peers import gone, run_job, run_refusal, with_groups

log = logging.getLogger("gpuwatch.control")
noisy = RateLimitedLog(log)

SESSION_SILENCE_S = 10 * proto.BEAT_INTERVAL_S  # an attach session that sends nothing this long is gone
REPLY_DEADLINE_S = 2.0


@runtime_checkable
class Sessions(Protocol):
    """The supervisor's side of attach sessions and of per-peer commands (supervise/supervisor.py)."""

    def attach(self, request: proto.Attach, peer: Peer, user: str, link: Any) -> proto.Attached: ...
    def receive(self, run_id: str, message: proto.Message) -> None: ...
    def detach(self, run_id: str, link: Any) -> None: ...
    def command_as(self, verb: str, name: str | None, peer: Peer, privileged: bool) -> tuple[bool, str]: ...


def peer_of(conn: socket.socket, procfs: Procfs) -> Peer:
    """The kernel's word on the client (SO_PEERCRED), with its supplementary groups."""
    raw = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, uid, gid = struct.unpack("3i", raw)
    return with_groups(procfs, Peer(pid, uid, gid))


def serve_session(conn: socket.socket, line: bytes, rest: bytes, sessions: Sessions, procfs: Procfs,
                  stop: threading.Event, rate: UserRate | None = None) -> None:
    """An attach session: validate, register, then read its lines until it ends (or goes silent). ``rate``: its
    user's, shared by all of that user's sessions."""
    link = _Link(conn)
    peer = peer_of(conn, procfs)
    try:
        request = proto.decode_request(line)
    except proto.ProtocolError as exc:
        noisy.warning(f"bad-{peer.uid}", "control socket: a bad attach from uid %d (pid %d): %s", peer.uid, peer.pid,
                      exc)
        link.reply(proto.Attached(ok=False, message=f"bad attach: {exc}"))
        return
    if not isinstance(request, proto.Attach):
        return
    why = run_refusal(procfs, peer, request.pid)
    if not why:
        request = dataclasses.replace(request, job_id=run_job(procfs, request.pid, request.job_id))
    reply = proto.Attached(ok=False, message=why) if why else \
        sessions.attach(request, peer, _user_name(peer.uid), link)
    if not reply.ok:
        noisy.warning(f"refused-{peer.uid}", "control socket: attach of pid %d from uid %d refused: %s", request.pid,
                      peer.uid, reply.message)
    if not link.reply(reply) or not reply.ok or reply.run_id is None:
        return
    try:
        why = _read_session(conn, reply.run_id, rest, sessions, stop, peer, procfs, rate or UserRate.default())
        if why:
            noisy.warning(f"session-{peer.uid}", "attach session %s of uid %d: %s: session closed", reply.run_id,
                          peer.uid, why)
            link.reply(proto.Attached(ok=False, message=f"{why}: session closed"))
    finally:
        sessions.detach(reply.run_id, link)


def _read_session(conn: socket.socket, run_id: str, data: bytes, sessions: Sessions, stop: threading.Event,
                  peer: Peer, procfs: Procfs, rate: UserRate) -> str | None:
    """Its lines until it ends; why it was closed when the session is at fault (one line), else None."""
    conn.settimeout(None)  # blocking: the events are sent with MSG_DONTWAIT, the silence bounded below
    seconds = int(SESSION_SILENCE_S)
    conn.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO,
                    struct.pack("ll", seconds, int((SESSION_SILENCE_S - seconds) * 1e6)))
    suspended = False
    framer = proto.LineFramer()
    chunk = data
    while not stop.is_set():
        try:
            lines = framer.feed(chunk)
        except proto.ProtocolError as exc:
            return str(exc)
        # Its user's share: wait (not reading: the sender blocks) before what it sent is decoded. A blank line costs
        # its byte only (the framer is linear), a line to decode counts as one.
        lines = [line for line in lines if line.strip()]
        wait_s = rate.take(len(lines), len(chunk), time.monotonic())
        if wait_s > 0 and stop.wait(wait_s):
            return None
        for line in lines:
            try:
                message = proto.decode_request(line)
            except proto.ProtocolError as exc:
                return str(exc)
            if isinstance(message, proto.Attach):
                return "a second attach"
            if isinstance(message, proto.Restarted) and (why := run_refusal(procfs, peer, message.pid)):
                if gone(procfs, message.pid):  # a command that crashed at once: its Exited follows, nothing to adopt
                    continue
                return f"restarted: {why}"
            sessions.receive(run_id, message)
            if isinstance(message, proto.Beat):  # stopped by its user (Ctrl-Z): silent until continued, not gone
                suspended = message.suspended is not None
        try:
            chunk = conn.recv(65536)
        except (BlockingIOError, TimeoutError):
            if suspended:
                chunk = b""
                continue
            log.info("attach session %s: silent for %g s: its run counts as detached", run_id, SESSION_SILENCE_S)
            return None
        if not chunk:
            return None
    return None


class _Link:
    """An attach session's write side: events never block the loop (a wrapper that reads nothing breaks it)."""

    def __init__(self, conn: socket.socket) -> None:
        self.conn = conn
        self.lock = threading.Lock()

    def reply(self, message: proto.Attached) -> bool:
        try:
            self.conn.settimeout(REPLY_DEADLINE_S)
            self.conn.sendall(proto.encode(message))
            return True
        except OSError:
            return False

    def send(self, event: proto.Event) -> bool:
        data = proto.encode(event)
        with self.lock:
            try:
                return self.conn.send(data, socket.MSG_DONTWAIT) == len(data)
            except OSError:
                return False


def is_attach(line: bytes) -> bool:
    """Whether a first line asks to attach (a bad one is answered as a plain request: an error answer)."""
    try:
        return proto.json_object(line).get("cmd") == "attach"
    except proto.ProtocolError:
        return False


def _user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)
