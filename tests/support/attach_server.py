"""A small stand-in for the daemon's side of the attach protocol (gpuwatch/attach.py), for the wrapper's tests.

A real unix socket at a real path, served on a thread of the test: every connection's Attach is answered
(``Attached``, or a refusal when ``refuse`` is set), its lines are recorded in order, and the test sends
events to a run. ``kill`` closes the listener and every connection at once, which is what the wrapper sees
when the daemon is SIGKILLed (end of stream; the socket file left behind refuses connections);
``start`` again serves a new "daemon" at the same path. The real daemon's side is tested by branch attachd.
"""

from __future__ import annotations

import itertools
import socket
import threading
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from gpuwatch.attach import Attach, Attached, Beat, Event, EventKind, Message, ProtocolError, decode_request, encode

_ids = itertools.count(1)


@dataclass
class Conn:
    sock: socket.socket
    messages: list[Message] = field(default_factory=list)
    attach: Attach | None = None
    closed: bool = False

    @property
    def beats(self) -> list[Beat]:
        return [m for m in list(self.messages) if isinstance(m, Beat)]


class AttachServer:
    """Serves attach connections at ``path`` until ``kill``; a context manager that kills on exit."""

    def __init__(self, path: Path, refuse: str | None = None, silent: bool = False) -> None:
        self.path = path
        self.refuse = refuse
        self.silent = silent  # accepts and reads, never answers (a daemon stuck in its tick)
        self.conns: list[Conn] = []
        self.errors: list[str] = []
        self.given_ids: list[str] = []  # the run ids handed out, in order
        self._listener: socket.socket | None = None
        self._lock = threading.Lock()

    def start(self) -> AttachServer:
        self.path.unlink(missing_ok=True)  # a killed daemon's socket file: a new one binds over it
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(str(self.path))
        listener.listen(64)
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()
        return self

    def kill(self) -> None:
        """As a SIGKILL leaves it: every connection ends, the socket file stays and refuses."""
        with self._lock:
            listener, self._listener = self._listener, None
            conns = list(self.conns)
        if listener is not None:
            try:
                listener.shutdown(socket.SHUT_RDWR)  # wakes the accept (a close alone would leave it listening)
            except OSError:
                pass
            listener.close()
        for conn in conns:
            conn.closed = True
            try:
                conn.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            conn.sock.close()

    def attached(self) -> list[Conn]:
        """The connections that sent an Attach, in order."""
        with self._lock:
            return [c for c in self.conns if c.attach is not None]

    def send(self, conn: Conn, kind: EventKind, reason: str | None = None) -> None:
        conn.sock.sendall(encode(Event(event=kind, reason=reason)))

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                sock, _ = listener.accept()
            except OSError:
                return
            conn = Conn(sock)
            with self._lock:
                self.conns.append(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: Conn) -> None:
        buffer = b""
        while True:
            try:
                chunk = conn.sock.recv(65536)
            except OSError:
                chunk = b""
            if not chunk:
                conn.closed = True
                return
            buffer += chunk
            while b"\n" in buffer:
                line, _, buffer = buffer.partition(b"\n")
                try:
                    message = decode_request(line)
                except ProtocolError as exc:
                    self.errors.append(str(exc))
                    continue
                conn.messages.append(message)
                if isinstance(message, Attach):
                    try:
                        self._answer(conn, message)
                    except OSError:  # the wrapper went away before the answer (a command that ended at once)
                        conn.closed = True
                        return

    def _answer(self, conn: Conn, message: Attach) -> None:
        if self.silent:
            return
        if self.refuse is not None:
            conn.sock.sendall(encode(Attached(ok=False, message=self.refuse)))
            conn.sock.close()
            return
        run_id = message.run_id or f"run-{next(_ids)}"
        if message.run_id is None:
            self.given_ids.append(run_id)
        name = message.name or (message.argv[0].rsplit("/", 1)[-1] if message.argv else "run")
        conn.sock.sendall(encode(Attached(ok=True, run_id=run_id, name=name, interval_s=1.0)))
        conn.attach = message

    def __enter__(self) -> AttachServer:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.kill()
