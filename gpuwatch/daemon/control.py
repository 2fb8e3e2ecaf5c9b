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
sending a byte a second blocked every command (issue 31). At most ``MAX_CLIENTS`` connections are read
at once; one more cuts the oldest still reading. A request whose client has already gone (it gave up
waiting) is not carried out: a command the user saw time out never happens later.
"""

from __future__ import annotations

import grp
import json
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, cast, get_args

from gpuwatch import attach as proto
from gpuwatch.config.file import REAL_PROC_ROOT
from gpuwatch.daemon.attach_sessions import Sessions, is_attach, peer_of, serve_session
from gpuwatch.procfs import Procfs
from gpuwatch.publish.redact import redact
from gpuwatch.publish.schema import StatusDocument
from gpuwatch.supervise.access import NOT_PERMITTED, privileged, redacted, refusal
from gpuwatch.supervise.actions import Command

log = logging.getLogger("gpuwatch.control")

Handler = Callable[[str, "str | None"], "tuple[bool, str]"]
Document = Callable[[], "Mapping[str, Any] | None"]  # the last published status document
MAX_REQUEST_BYTES = 4096
REQUEST_DEADLINE_S = 2.0  # the whole request line, from the accept
MAX_CLIENTS = 16  # connections being read at once
CLIENT_TIMEOUT_S = 5.0  # the CLI's wait for an answer
SUPERVISOR_VERBS = frozenset(get_args(Command))  # authorized per run by the supervisor (it knows the owners)
SOCKET_MODE = 0o666


class ControlError(Exception):
    """The daemon cannot be reached or refused us; the message is meant for the user."""


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
        self._sock: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._reading: dict[socket.socket, float] = {}  # connection -> when it was accepted (monotonic)
        self._handling = threading.Lock()  # one command at a time: the handlers were written for one thread

    def start(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.unlink(missing_ok=True)  # left over from a daemon that was killed (the lock says none runs)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind(str(self.path))
        os.chmod(self.path, SOCKET_MODE)  # every user may connect: each request is authorized from its peer
        sock.listen(64)
        sock.settimeout(0.2)
        self._sock = sock
        self._thread = threading.Thread(target=self._serve, name="gpuwatch-control", daemon=True)
        self._thread.start()
        log.info("control socket %s (mode %o: requests authorized per peer)", self.path, SOCKET_MODE)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(2.0)
        if self._sock is not None:
            self._sock.close()
        with self._lock:
            for conn in list(self._reading) + list(self._sessions):
                _cut(conn)
        try:
            self.path.unlink(missing_ok=True)
        except OSError as exc:  # a read-only runtime directory: the socket file stays, nothing listens on it
            log.warning("cannot remove %s: %s", self.path, exc.strerror or exc)

    def _serve(self) -> None:
        assert self._sock is not None
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError as exc:
                if self._stop.is_set() or self._sock.fileno() < 0:
                    break
                # Out of descriptors (EMFILE) and the like: the server waits and goes on, never stops.
                log.warning("control socket: accept failed: %s", exc.strerror or exc)
                self._stop.wait(0.5)
                continue
            with self._lock:
                if len(self._reading) >= MAX_CLIENTS:
                    oldest = min(self._reading, key=self._reading.__getitem__)
                    log.warning("control socket: %d clients sending nothing: the oldest cut off", len(self._reading))
                    del self._reading[oldest]  # not picked again while its thread winds down
                    _cut(oldest)
                self._reading[conn] = time.monotonic()
            threading.Thread(target=self._client, args=(conn,), name="gpuwatch-control-client", daemon=True).start()

    def _client(self, conn: socket.socket) -> None:
        with conn:
            try:
                self._answer(conn)
            except OSError:
                pass  # the client went away
            except Exception:  # one bad client never stops the server
                log.exception("control request failed")
            finally:
                with self._lock:
                    self._reading.pop(conn, None)

    def _answer(self, conn: socket.socket) -> None:
        deadline = time.monotonic() + self.request_deadline_s
        data = b""
        while b"\n" not in data and len(data) < proto.MAX_LINE_BYTES:
            left = deadline - time.monotonic()
            if left <= 0:
                log.warning("control socket: no whole request within %g s: client cut off", self.request_deadline_s)
                return
            conn.settimeout(left)
            try:
                chunk = conn.recv(1024)
            except TimeoutError:
                continue
            if not chunk:
                break
            data += chunk
        with self._lock:
            self._reading.pop(conn, None)
        if not data.strip():
            return  # connected and went (or was cut off): nothing asked
        line, _, rest = data.partition(b"\n")
        if self.sessions is not None and is_attach(line):
            with self._lock:
                self._sessions.add(conn)
            try:
                serve_session(conn, line, rest, self.sessions, self.procfs, self._stop)
            finally:
                with self._lock:
                    self._sessions.discard(conn)
            return
        if len(line) > MAX_REQUEST_BYTES:
            conn.sendall(json.dumps({"ok": False, "message": f"request longer than {MAX_REQUEST_BYTES} bytes"}).encode()
                         + b"\n")
            return
        reply = self._reply(conn, data)
        if reply is not None:
            conn.settimeout(self.request_deadline_s)
            conn.sendall(json.dumps(reply).encode() + b"\n")

    def _reply(self, conn: socket.socket, data: bytes) -> dict[str, Any] | None:
        """The reply to a request; None for a command whose client no longer waits (not carried out)."""
        try:
            request = json.loads(data.split(b"\n", 1)[0] or b"{}")
            cmd, name = str(request["cmd"]), request.get("name")
        except (ValueError, KeyError, TypeError) as exc:
            return {"ok": False, "message": f"bad request: {exc}"}
        peer = peer_of(conn, self.procfs)
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
            log.warning("control socket: %s %s from uid %d (pid %d): %s", cmd, target or "", peer.uid, peer.pid,
                        message)
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


def _cut(conn: socket.socket) -> None:
    """Wake the thread reading ``conn`` with the end of its stream (it closes the connection itself)."""
    try:
        conn.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


def send_command(path: Path, cmd: str, name: str | None, timeout_s: float = CLIENT_TIMEOUT_S) -> tuple[bool, str]:
    """Ask the daemon; raises ControlError when it is not running or we may not talk to it."""
    reply = _ask(path, cmd, name, timeout_s)
    return bool(reply["ok"]), str(reply["message"])


def fetch_document(path: Path, timeout_s: float = CLIENT_TIMEOUT_S) -> dict[str, Any] | None:
    """The daemon's last published document through its control socket; None when it has none yet.
    Raises ControlError as ``send_command`` does."""
    from gpuwatch.publish.decode import Invalid
    from gpuwatch.publish.decode import document as decoded

    document = _ask(path, "status", None, timeout_s).get("document")
    if document is None:
        return None
    try:
        return cast("dict[str, Any]", decoded(document))
    except Invalid as exc:  # the one decoder every client reads the published document with
        raise ControlError(f"the daemon's document over {path} cannot be used: {exc}") from None


def _ask(path: Path, cmd: str, name: str | None, timeout_s: float) -> dict[str, Any]:
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout_s)
            sock.connect(str(path))
            sock.sendall(json.dumps({"cmd": cmd, "name": name}).encode() + b"\n")
            data = b""
            while b"\n" not in data:
                chunk = sock.recv(4096)
                if not chunk:
                    break
                data += chunk
    except (FileNotFoundError, ConnectionRefusedError):
        raise ControlError(f"the daemon is not running (no control socket at {path})") from None
    except PermissionError:
        raise ControlError(f"not permitted to use {path}: run as root or as a member of its group") from None
    except TimeoutError:
        # Closing the connection tells the daemon: a request it has not carried out yet never is.
        raise ControlError(f"the daemon at {path} did not answer within {timeout_s:g} s: {cmd} not carried out") \
            from None
    except OSError as exc:
        raise ControlError(f"cannot talk to the daemon at {path}: {exc}") from None
    try:
        reply = json.loads(data.decode())
        if isinstance(reply, dict) and "ok" in reply and "message" in reply:
            return reply
    except ValueError:
        pass
    raise ControlError(f"unexpected reply from the daemon: {data[:200]!r}") from None
