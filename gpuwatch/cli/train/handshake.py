"""One connection of the attached run's link (cli/train/link.py) opened: the daemon's control socket
connected, the ``Attach`` sent and the daemon's reply read (gpuwatch/attach.py), each bounded by
``REPLY_TIMEOUT_S``.

Nothing here keeps state: what the link carries from one connection to the next (the run's id, its pause)
is in the ``Attach`` it is given, and what the reply means is the link's to decide. A daemon that is not
there (no socket, nobody listening, any other error) is the one line the link says; one that goes away
before it answers, or answers outside this protocol, is no reply, and the link tries again.
"""

from __future__ import annotations

import socket
import time
from pathlib import Path

from gpuwatch.attach import MAX_LINE_BYTES, Attach, Attached, ProtocolError, connect_retrying, decode_reply, encode
from gpuwatch.safefs import client_refusal

REPLY_TIMEOUT_S = 5.0  # a daemon that accepts and never answers the Attach counts as none
CONNECT_TIMEOUT_S = 2.0  # a full backlog (another user's flood) or a daemon restarting: tried again this long


def connect(socket_path: Path) -> tuple[socket.socket | None, str]:
    """The connected socket, else None and why, as the wrapper's line."""
    refusal = client_refusal(socket_path.parent)  # a socket another user put there would play the daemon
    if refusal is not None:
        return None, f"gpuwatch train: {refusal}: this run is not protected"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(REPLY_TIMEOUT_S)
    try:
        connect_retrying(sock, str(socket_path), time.monotonic() + CONNECT_TIMEOUT_S)
    except (FileNotFoundError, ConnectionRefusedError):
        sock.close()
        return None, f"gpuwatch train: no gpuwatch daemon at {socket_path}: this run is not protected"
    except OSError as exc:
        sock.close()
        return None, (f"gpuwatch train: cannot reach the gpuwatch daemon at {socket_path} "
                      f"({exc.strerror or exc}): this run is not protected")
    return sock, ""


def handshake(sock: socket.socket, request: Attach) -> tuple[Attached | None, bytes]:
    """The daemon's reply to ``request`` and what it sent after it (the first events); None: no reply."""
    buffer = b""
    try:
        sock.sendall(encode(request))
        while b"\n" not in buffer:
            chunk = sock.recv(65536)
            if not chunk or len(buffer) > MAX_LINE_BYTES:
                return None, b""  # gone before it answered: try again
            buffer += chunk
        line, _, buffer = buffer.partition(b"\n")
        reply = decode_reply(line)
    except (OSError, ProtocolError):
        return None, b""
    if not isinstance(reply, Attached):
        return None, b""
    return reply, buffer
