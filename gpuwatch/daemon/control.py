"""Local control channel for `gpuwatch pause|resume|restart|stop [NAME|PID]` and the attach sessions of
`gpuwatch train`: a unix socket, JSON lines, no HTTP.

Every local user may connect (mode 0666); each request is authorized from the kernel's peer credentials
(SO_PEERCRED: pid, uid, gid, and the groups in the peer's /proc/<pid>/status), never from what the
request claims, by the one rule in supervise/access.py: root, the daemon's user and ``[control]
admin_group`` may do anything; any user may attach a run and pause, resume or stop their own attached
runs, and reads the status with the sensitive fields left out. Requests: {"cmd": "pause", "name": null};
replies: {"ok": bool, "message": str}. A first line ``{"cmd": "attach", ...}`` makes the connection an
attach session (daemon/attach_sessions.py: no whole-request deadline, not counted in ``MAX_CLIENTS``). The
request {"cmd": "status"} is answered by the server itself with the last published document ({"ok": true,
"message": "", "document": {...}}): `gpuwatch status`'s way in when the state file cannot be written
(a full or read-only runtime directory) and HTTP is off.

Clients are served concurrently, each on its own short-lived thread, with a whole-request deadline
(``REQUEST_DEADLINE_S`` from the accept, not per read): one stuck or trickling local client used to hold
the one serving thread, so eight silent connections made `gpuwatch pause` time out, and one client
sending a byte a second blocked every command (issue 31). A request whose client has already gone (it gave up
waiting) is not carried out: a command the user saw time out never happens later.

Local users are hostile to it (docs/security.md "The control socket"): every line goes through one decoder
(``attach.json_object``: bounded, no surrogate or control character, no deep nesting, no non-finite number),
a bad one gets an error answer and a rate-limited log line (daemon/bounds.py), never a traceback. An
unprivileged uid holds at most ``bounds.CONNECTIONS_PER_USER`` connections being read (all such users
``bounds.CONNECTIONS_TOTAL``); one more is answered with an error and closed at once, without a thread. Root,
the daemon's user and the admin group have a socket of their own beside it (``CONTROL_ADMIN_SOCKET_NAME``,
mode 0660, group ``[control] admin_group`` as it was at the start), with its own listen backlog and accepting
thread, which the CLI tries first: a connect/close flood of another user fills the public backlog, never
theirs. A client whose connect finds a full backlog (EAGAIN) or no listener yet (ECONNREFUSED: a daemon
restarting) tries again until its deadline.
"""

from __future__ import annotations

import grp
import json
import logging
import os
import socket
import struct
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, cast, get_args

from gpuwatch import attach as proto
from gpuwatch.config.file import REAL_PROC_ROOT
from gpuwatch.daemon.attach_sessions import Sessions, is_attach, peer_of, serve_session
from gpuwatch.daemon.bounds import CONNECTIONS_TOTAL, RateLimitedLog, Slots, UserRate
from gpuwatch.daemon.control_client import CLIENT_TIMEOUT_S as CLIENT_TIMEOUT_S
from gpuwatch.daemon.control_client import ControlError as ControlError
from gpuwatch.daemon.control_client import admin_socket
from gpuwatch.daemon.control_client import fetch_document as fetch_document
from gpuwatch.daemon.control_client import send_command as send_command
from gpuwatch.procfs import Procfs
from gpuwatch.publish.document import StatusDocument
from gpuwatch.publish.redact import redact
from gpuwatch.supervise.access import NOT_PERMITTED, privileged, redacted, refusal
from gpuwatch.supervise.actions import Command

log = logging.getLogger("gpuwatch.control")

Handler = Callable[[str, "str | None"], "tuple[bool, str]"]
Document = Callable[[], "Mapping[str, Any] | None"]  # the last published status document
MAX_REQUEST_BYTES = 4096
REQUEST_DEADLINE_S = 2.0  # the whole request line, from the accept
MAX_CLIENTS = CONNECTIONS_TOTAL  # unprivileged connections being read at once
BACKLOG = socket.SOMAXCONN  # the kernel caps it at net.core.somaxconn
ADMIN_SOCKET_MODE = 0o660
SUPERVISOR_VERBS = frozenset(get_args(Command))  # authorized per run by the supervisor (it knows the owners)
SOCKET_MODE = 0o666
noisy = RateLimitedLog(log)


class ControlServer:
    def __init__(self, path: Path, handler: Handler, request_deadline_s: float = REQUEST_DEADLINE_S,
                 document: Document | None = None, sessions: Sessions | None = None,
                 admin_group: Callable[[], str | None] = lambda: None, proc_root: Path = REAL_PROC_ROOT) -> None:
        """``proc_root``: where the peers are read (the machine's own /proc: SO_PEERCRED's pids are its kernel's,
        also when the daemon simulates its GPUs); ``admin_group``: the live ``[control] admin_group``."""
        self.path = path
        self.handler = handler
        self.document = document
        self.sessions = sessions
        self.admin_group = admin_group
        self.procfs = Procfs(proc_root)
        self._sessions: set[socket.socket] = set()
        self.request_deadline_s = request_deadline_s
        self._socks: list[socket.socket] = []
        self._threads: list[threading.Thread] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._reading: dict[socket.socket, float] = {}  # connection -> when it was accepted (monotonic)
        self._slots = Slots()  # unprivileged connections being read, per uid
        self._rates: dict[int, UserRate] = {}  # the lines and bytes of each uid's attach sessions
        self._handling = threading.Lock()  # one command at a time: the handlers were written for one thread

    def start(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        admin = admin_socket(self.path)
        for path, mode in ((self.path, SOCKET_MODE), (admin, ADMIN_SOCKET_MODE)):
            path.unlink(missing_ok=True)  # left over from a daemon that was killed (the lock says none runs)
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.bind(str(path))
            if path == admin:
                gid = self._admin_gid()
                if gid is not None:
                    os.chown(path, -1, gid)
            os.chmod(path, mode)  # the public one: every user may connect, each request authorized from its peer
            sock.listen(BACKLOG)  # blocking: accept() waits without waking, stop() shuts it down
            self._socks.append(sock)
            thread = threading.Thread(target=self._serve, args=(sock, path == admin), name="gpuwatch-control",
                                      daemon=True)
            self._threads.append(thread)
            thread.start()
        log.info("control socket %s (mode %o: requests authorized per peer), %s for the privileged", self.path,
                 SOCKET_MODE, admin.name)

    def stop(self) -> None:
        self._stop.set()
        for sock in self._socks:
            # A blocked accept() returns at once (EINVAL) when its listening socket is shut down (Linux), so the
            # serving threads wait in accept() without a timeout: no wake-up five times a second each.
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        for thread in self._threads:
            thread.join(2.0)
        for sock in self._socks:
            sock.close()
        with self._lock:
            for conn in list(self._reading) + list(self._sessions):
                _cut(conn)
        for path in (self.path, admin_socket(self.path)):
            try:
                path.unlink(missing_ok=True)
            except OSError as exc:  # a read-only runtime directory: the socket file stays, nothing listens on it
                log.warning("cannot remove %s: %s", path, exc.strerror or exc)

    def _serve(self, sock: socket.socket, admin: bool) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = sock.accept()
            except OSError as exc:
                if self._stop.is_set() or sock.fileno() < 0:
                    break
                # Out of descriptors (EMFILE) and the like: the server waits and goes on, never stops.
                noisy.warning("accept", "control socket: accept failed: %s", exc.strerror or exc)
                self._stop.wait(0.5)
                continue
            uid = None if admin else self._unprivileged_uid(conn)
            with self._lock:
                why = None if uid is None else self._slots.refusal(uid)
                if why is None:
                    self._reading[conn] = time.monotonic()
                    if uid is not None:
                        self._slots.take(uid)
            if why is not None:  # answered and closed here: a flood costs no thread
                noisy.warning(f"slots-{uid}", "control socket: %s: refused", why)
                _refuse(conn, why)
                continue
            threading.Thread(target=self._client, args=(conn, uid), name="gpuwatch-control-client",
                             daemon=True).start()

    def _rate(self, conn: socket.socket) -> UserRate:
        """The peer's user's share of the session lines (one per uid: its sessions share it)."""
        uid = _credentials(conn)[1]
        with self._lock:
            if len(self._rates) > 4096:  # uids that attached once: bounded by the users of the machine anyway
                self._rates.clear()
            return self._rates.setdefault(uid, UserRate.default())

    def _unprivileged_uid(self, conn: socket.socket) -> int | None:
        """The peer's uid when it is counted against the per-user bounds; None for a privileged peer."""
        try:
            uid = _credentials(conn)[1]
        except OSError:
            return -1  # gone already: counted as nobody's, closed by its thread
        if uid in (0, os.getuid()):
            return None
        admin_gid = self._admin_gid()
        if admin_gid is not None and privileged(peer_of(conn, self.procfs), os.getuid(), admin_gid):
            return None
        return uid

    def _client(self, conn: socket.socket, uid: int | None) -> None:
        with conn:
            try:
                self._answer(conn, uid)
            except OSError:
                pass  # the client went away
            except Exception as exc:  # one bad client never stops the server: a bug is one rate-limited line
                if noisy.warning("bug", "control request failed: %r", exc):
                    log.debug("control request failed", exc_info=True)  # the traceback, where debug is logged
            finally:
                self._read(conn, uid)

    def _read(self, conn: socket.socket, uid: int | None) -> None:
        """``conn`` no longer being read: its slot is given back (once)."""
        with self._lock:
            if self._reading.pop(conn, None) is not None and uid is not None:
                self._slots.give(uid)

    def _answer(self, conn: socket.socket, uid: int | None) -> None:
        deadline = time.monotonic() + self.request_deadline_s
        framer = proto.LineFramer()
        lines: list[bytes] = []
        try:
            while not lines:
                left = deadline - time.monotonic()
                if left <= 0:
                    noisy.warning(f"deadline-{uid}", "control socket: no whole request within %g s: client cut off",
                                  self.request_deadline_s)
                    return
                conn.settimeout(left)
                try:
                    chunk = conn.recv(4096)
                except TimeoutError:
                    continue
                if not chunk:
                    return  # connected and went (or was cut off): nothing asked
                lines = [line for line in framer.feed(chunk) if line.strip()]
        except proto.ProtocolError as exc:
            _refuse(conn, f"bad request: {exc}")
            return
        self._read(conn, uid)
        line = lines[0]
        rest = b"".join(later + b"\n" for later in lines[1:]) + framer.pending
        if self.sessions is not None and is_attach(line):
            with self._lock:
                self._sessions.add(conn)
            try:
                serve_session(conn, line, rest, self.sessions, self.procfs, self._stop, self._rate(conn))
            finally:
                with self._lock:
                    self._sessions.discard(conn)
            return
        reply = self._reply(conn, line)
        if reply is not None:
            conn.settimeout(self.request_deadline_s)
            conn.sendall(json.dumps(reply).encode() + b"\n")

    def _reply(self, conn: socket.socket, line: bytes) -> dict[str, Any] | None:
        """The reply to a request; None for a command whose client no longer waits (not carried out)."""
        peer = peer_of(conn, self.procfs)
        try:
            request = proto.json_object(line, MAX_REQUEST_BYTES)
            cmd, name = request.get("cmd"), request.get("name")
            if not isinstance(cmd, str) or not (name is None or isinstance(name, str)):
                raise proto.ProtocolError("cmd is not a string or name is not a string or null")
        except proto.ProtocolError as exc:
            noisy.warning(f"bad-{peer.uid}", "control socket: a bad request from uid %d (pid %d): %s", peer.uid,
                          peer.pid, exc)
            return {"ok": False, "message": f"bad request: {exc}"}
        allowed = privileged(peer, os.getuid(), self._admin_gid())
        if cmd == "status" and self.document is not None:
            document = self.document()
            if document is not None and redacted(cmd, allowed):
                document = redact(cast(StatusDocument, document))  # the one list: publish/redact.py
            return {"ok": document is not None, "message": "" if document else "no sample published yet",
                    "document": document}
        with self._handling:
            if _gone(conn):
                log.warning("control socket: %r from a client that no longer waits for it: not carried out", cmd)
                return None
            target = None if name is None else str(name)
            if self.sessions is not None and cmd in SUPERVISOR_VERBS:
                ok, message = self.sessions.command_as(cmd, target, peer, allowed)
            elif not allowed:
                ok, message = False, refusal(cmd, peer, False, []) or NOT_PERMITTED
            else:
                ok, message = self.handler(cmd, target)
        if not ok and message.startswith(NOT_PERMITTED):
            noisy.warning(f"refused-{peer.uid}", "control socket: %s %s from uid %d (pid %d): %s", cmd, target or "",
                          peer.uid, peer.pid, message)
        return {"ok": ok, "message": message}

    def _admin_gid(self) -> int | None:
        name = self.admin_group()
        if name is None:
            return None
        try:
            return grp.getgrnam(name).gr_gid
        except KeyError:
            log.warning("control socket: [control] admin_group %r is no group on this machine", name)
            return None

def _gone(conn: socket.socket) -> bool:
    """Whether the client closed its end (it gave up waiting): a peek that finds the end of the stream."""
    conn.settimeout(0.0)  # with a timeout set, Python would wait out a recv that finds nothing
    try:
        return conn.recv(1, socket.MSG_PEEK) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


def _credentials(conn: socket.socket) -> tuple[int, int, int]:
    """The kernel's pid, uid, gid of the peer (SO_PEERCRED), without reading /proc."""
    pid, uid, gid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))
    return pid, uid, gid


def _refuse(conn: socket.socket, why: str) -> None:
    """An error answer that never waits (the client reads it, or it is lost), then the connection closed."""
    try:
        conn.send(json.dumps({"ok": False, "message": why}).encode() + b"\n", socket.MSG_DONTWAIT)
    except OSError:
        pass
    conn.close()


def _cut(conn: socket.socket) -> None:
    """Wake the thread reading ``conn`` with the end of its stream (it closes the connection itself)."""
    try:
        conn.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
