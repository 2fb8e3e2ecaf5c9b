"""Attach sessions on the control socket (gpuwatch/attach.py): the daemon's end of `gpuwatch train`.

A connection whose first line is ``{"cmd": "attach", ...}`` becomes a session: the peer is who the
kernel says (SO_PEERCRED, ``peer_of``), the run's pid is checked (daemon/peers.py), the supervisor
registers it (``Sessions.attach``: the name, the bounds) and the reply goes back. Then its lines are
read one by one (each at most ``attach.MAX_LINE_BYTES``) with no whole-request deadline; a session silent
for ``SESSION_SILENCE_S`` (ten beats) is gone (unless its last ``Beat`` said its user suspended the run:
then it is kept, silent, until the wrapper is continued or its connection ends), and so is one that sends
a line that is not the protocol (logged in one line). The supervisor's events go back through the
session's ``_Link``, which never blocks: a wrapper that reads nothing breaks its own session, never the daemon's loop.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import pwd
import socket
import struct
import threading
from typing import Any, Protocol, runtime_checkable

from gpuwatch import attach as proto
from gpuwatch.daemon.peers import run_job, run_refusal, with_groups
from gpuwatch.procfs import Procfs
from gpuwatch.supervise.access import Peer

log = logging.getLogger("gpuwatch.control")

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
                  stop: threading.Event) -> None:
    """An attach session: validate, register, then read its lines until it ends (or goes silent)."""
    link = _Link(conn)
    try:
        request = proto.decode_request(line)
    except proto.ProtocolError as exc:
        link.reply(proto.Attached(ok=False, message=f"bad attach: {exc}"))
        return
    if not isinstance(request, proto.Attach):
        return
    peer = peer_of(conn, procfs)
    why = run_refusal(procfs, peer, request.pid)
    if not why:
        request = dataclasses.replace(request, job_id=run_job(procfs, request.pid, request.job_id))
    reply = proto.Attached(ok=False, message=why) if why else \
        sessions.attach(request, peer, _user_name(peer.uid), link)
    if not reply.ok:
        log.warning("control socket: attach of pid %d from uid %d refused: %s", request.pid, peer.uid,
                    reply.message)
    if not link.reply(reply) or not reply.ok or reply.run_id is None:
        return
    try:
        _read_session(conn, reply.run_id, rest, sessions, stop)
    finally:
        sessions.detach(reply.run_id, link)


def _read_session(conn: socket.socket, run_id: str, data: bytes, sessions: Sessions, stop: threading.Event) -> None:
    conn.settimeout(None)  # blocking: the events are sent with MSG_DONTWAIT, the silence bounded below
    seconds = int(SESSION_SILENCE_S)
    conn.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO,
                    struct.pack("ll", seconds, int((SESSION_SILENCE_S - seconds) * 1e6)))
    suspended = False
    while not stop.is_set():
        while b"\n" in data:
            line, _, data = data.partition(b"\n")
            if not line.strip():
                continue
            try:
                message = proto.decode_request(line)
            except proto.ProtocolError as exc:
                log.warning("attach session %s: %s: session closed", run_id, exc)
                return
            if isinstance(message, proto.Attach):
                log.warning("attach session %s: a second attach: session closed", run_id)
                return
            sessions.receive(run_id, message)
            if isinstance(message, proto.Beat):  # stopped by its user (Ctrl-Z): silent until continued, not gone
                suspended = message.suspended is not None
        if len(data) > proto.MAX_LINE_BYTES:
            log.warning("attach session %s: a line over %d bytes: session closed", run_id, proto.MAX_LINE_BYTES)
            return
        try:
            chunk = conn.recv(65536)
        except (BlockingIOError, TimeoutError):
            if suspended:
                continue
            log.warning("attach session %s: silent for %g s: its run counts as detached", run_id,
                        SESSION_SILENCE_S)
            return
        if not chunk:
            return
        data += chunk


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
    try:
        request = json.loads(line)
    except ValueError:
        return False
    return isinstance(request, dict) and request.get("cmd") == "attach"


def _user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)
