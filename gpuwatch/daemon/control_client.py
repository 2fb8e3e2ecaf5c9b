"""The control socket's client half (daemon/control.py is the server): `gpuwatch pause|resume|restart|stop` and
`status`'s way in when the state file cannot be read send one request and read one reply.

A module of its own so that those commands import the socket's client alone, not the server's authorization,
sessions and bounds (issue 52: `pause` within 2x of Python's own start; tests/cli/test_startup_imports.py);
daemon/control.py re-exports what its callers took from there. Nor the socket, json and pathlib modules: their
imports (enum and re under the first two, urllib.parse and ipaddress under the last) were most of `pause`'s own
time; the C halves those modules are built on (``_socket``, ``_json``: ``publish.state.parse``) do the work.
"""

from __future__ import annotations

import _socket
import os
import time

from gpuwatch.config.runtime import CONTROL_ADMIN_SOCKET_NAME
from gpuwatch.connect import connect_retrying
from gpuwatch.publish.state import parse
from gpuwatch.safefs import client_refusal

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any, TypeVar

    P = TypeVar("P", str, Path)

CLIENT_TIMEOUT_S = 5.0  # the CLI's wait for an answer


class ControlError(Exception):
    """The daemon cannot be reached or refused us; the message is meant for the user."""


def admin_socket(path: P) -> P:
    """The privileged socket beside the public ``path`` (a str or a Path, as given)."""
    return type(path)(os.path.join(os.path.dirname(path), CONTROL_ADMIN_SOCKET_NAME))


def send_command(path: str | Path, cmd: str, name: str | None, timeout_s: float = CLIENT_TIMEOUT_S) -> tuple[bool, str]:
    """Ask the daemon; raises ControlError when it is not running or we may not talk to it."""
    reply = _ask(path, cmd, name, timeout_s)
    return bool(reply["ok"]), str(reply["message"])


def fetch_document(path: str | Path, timeout_s: float = CLIENT_TIMEOUT_S) -> dict[str, Any] | None:
    """The daemon's last published document through its control socket; None when it has none yet.
    Raises ControlError as ``send_command`` does."""
    from typing import cast

    from gpuwatch.publish.decode import Invalid
    from gpuwatch.publish.decode import document as decoded

    document = _ask(path, "status", None, timeout_s).get("document")
    if document is None:
        return None
    try:
        return cast("dict[str, Any]", decoded(document))
    except Invalid as exc:  # the one decoder every client reads the published document with
        raise ControlError(f"the daemon's document over {path} cannot be used: {exc}") from None


def _open(path: str, deadline: float) -> _socket.socket:
    """A connection to the daemon: its privileged socket when this caller may use it (root, the daemon's user,
    the admin group: its backlog is theirs alone), else the public one."""
    admin = admin_socket(path)
    if os.access(admin, os.W_OK):
        sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
        try:
            sock.settimeout(max(0.001, deadline - time.monotonic()))
            connect_retrying(sock, admin, deadline)
            return sock
        except (FileNotFoundError, PermissionError, ConnectionRefusedError):
            sock.close()  # an older daemon without it, or not ours: the public socket
        except BaseException:
            sock.close()
            raise
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        sock.settimeout(max(0.001, deadline - time.monotonic()))
        connect_retrying(sock, path, deadline)
    except BaseException:
        sock.close()
        raise
    return sock


def request_line(cmd: str, name: str | None) -> bytes:
    """The request, as ``json.dumps({"cmd": cmd, "name": name})`` spells it, and its newline: by the string
    encoder json.dumps itself runs (CPython's ``_json``), without json's import."""
    try:
        from _json import encode_basestring_ascii as quoted
    except ImportError:  # pragma: no cover - an interpreter without CPython's accelerator
        import json

        return json.dumps({"cmd": cmd, "name": name}).encode() + b"\n"
    return f'{{"cmd": {quoted(cmd)}, "name": {"null" if name is None else quoted(name)}}}\n'.encode()


def _ask(path: str | Path, cmd: str, name: str | None, timeout_s: float) -> dict[str, Any]:
    path = os.fspath(path)
    refusal = client_refusal(os.path.dirname(path))  # another user's socket would be asked, and believed, in its place
    if refusal is not None:
        raise ControlError(refusal)
    deadline = time.monotonic() + timeout_s
    try:
        sock = _open(path, deadline)
        try:
            sock.settimeout(max(0.001, deadline - time.monotonic()))
            sock.sendall(request_line(cmd, name))
            data = b""
            while b"\n" not in data:
                chunk = sock.recv(4096)
                if not chunk:
                    break
                data += chunk
        finally:
            sock.close()
    except (FileNotFoundError, ConnectionRefusedError):
        raise ControlError(f"the daemon is not running (no control socket at {path})") from None
    except BlockingIOError:
        raise ControlError(f"the daemon at {path} is busy: no connection within {timeout_s:g} s: {cmd} not "
                           "carried out") from None
    except PermissionError:
        raise ControlError(f"not permitted to use {path}: run as root or as a member of its group") from None
    except TimeoutError:
        # Closing the connection tells the daemon: a request it has not carried out yet never is.
        raise ControlError(f"the daemon at {path} did not answer within {timeout_s:g} s: {cmd} not carried out") \
            from None
    except OSError as exc:
        raise ControlError(f"cannot talk to the daemon at {path}: {exc}") from None
    try:
        reply = parse(data)
        if isinstance(reply, dict) and "ok" in reply and "message" in reply:
            return reply
    except ValueError:
        pass
    raise ControlError(f"unexpected reply from the daemon: {data[:200]!r}") from None
