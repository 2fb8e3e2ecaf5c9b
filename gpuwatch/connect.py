"""Connecting to the daemon's control socket, for every client (the CLI's commands, the wrapper's attach).

A leaf of its own, stdlib only (errno, time): `gpuwatch pause` connects through it without the attach
protocol's dataclasses, whose import (with inspect and typing) was a third of the command's own time (issue 52),
nor the socket module (enum under it): a socket's C half (``_socket.socket``, socket.socket's base) connects.
``attach`` re-exports it for the wrapper.
"""

from __future__ import annotations

import errno
import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    import _socket

CONNECT_RETRY_S = 0.02  # between two connects to the control socket that found a full backlog
REFUSED_GRACE_S = 0.5  # a socket file nobody listens on: a daemon starting (bind, then listen), else none


def connect_retrying(sock: _socket.socket, path: str, deadline: float) -> None:
    """Connect to the daemon's control socket (every client: the CLI, the wrapper), trying again while its listen
    backlog is full (EAGAIN: a unix socket with a timeout never waits for room, unix(7)) until ``deadline``
    (monotonic), and for at most ``REFUSED_GRACE_S`` while nothing listens (ECONNREFUSED: a daemon between its
    bind and its listen; longer, it is a socket file left by a daemon that is gone, and "not running" is said at
    once); the last error then."""
    refused_until = time.monotonic() + REFUSED_GRACE_S
    while True:
        try:
            sock.connect(path)
            return
        except (BlockingIOError, ConnectionRefusedError, InterruptedError) as exc:
            now = time.monotonic()
            if exc.errno == errno.ECONNREFUSED:
                give_up_at = min(deadline, refused_until)
            elif exc.errno in (errno.EAGAIN, errno.EINTR):
                give_up_at = deadline
            else:
                raise
            if now + CONNECT_RETRY_S >= give_up_at:
                raise
            time.sleep(CONNECT_RETRY_S)
