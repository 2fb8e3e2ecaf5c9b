"""Endpoints on 127.0.0.1 that answer the way other hosts do: a fixed HTTP server, a listener that never
answers, a server speaking another protocol (for `status --remote`'s tests). Each is a context manager
yielding its ``127.0.0.1:PORT`` and closing it on exit."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

Routes = dict[str, tuple[int, bytes]]  # path -> (HTTP status, body); other paths: 404


@contextmanager
def http_server(routes: Routes) -> Iterator[str]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            status, body = routes.get(self.path, (404, b"not found\n"))
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def refused_address() -> Iterator[str]:
    """``127.0.0.1:PORT`` where every connection is refused, for as long as the block runs.

    The port is bound and not listening: the kernel answers a SYN with RST (ECONNREFUSED), and no
    other socket can bind it meanwhile. A port that was merely free a moment ago (bound, closed, its
    number kept) could be handed to the next server the test or a neighbour starts, and then answer.
    """
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield f"127.0.0.1:{sock.getsockname()[1]}"


@contextmanager
def silent_listener() -> Iterator[str]:
    """Accepts connections (the kernel's backlog) and never answers: a client's timeout."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        yield f"127.0.0.1:{sock.getsockname()[1]}"


@contextmanager
def banner_server(banner: bytes = b"SSH-2.0-OpenSSH_9.2\r\n") -> Iterator[str]:
    """Sends ``banner`` to every connection and closes it: a port where something else than HTTP runs."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)

    def answer() -> None:
        while True:
            try:
                conn, _ = sock.accept()
            except OSError:  # closed: the test is over
                return
            with conn:
                conn.sendall(banner)
                # Read what the client sent before closing: a close with unread bytes is a RST, which
                # may reach the client before the banner does (it would see a reset, not the banner).
                conn.shutdown(socket.SHUT_WR)
                conn.settimeout(5)
                try:
                    while conn.recv(4096):
                        pass
                except OSError:
                    pass

    threading.Thread(target=answer, daemon=True).start()
    try:
        yield f"127.0.0.1:{sock.getsockname()[1]}"
    finally:
        sock.close()
