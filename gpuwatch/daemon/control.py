"""Local control channel for `gpuwatch pause|resume|restart [NAME]`: a unix socket, JSON lines, no HTTP.

Access is the socket file's permission (mode 0660: the daemon's user and group), checked by the kernel
on connect. Requests: {"cmd": "pause", "name": null}; replies: {"ok": bool, "message": str}.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger("gpuwatch.control")

Handler = Callable[[str, "str | None"], "tuple[bool, str]"]
MAX_REQUEST_BYTES = 4096


class ControlError(Exception):
    """The daemon cannot be reached or refused us; the message is meant for the user."""


class ControlServer:
    def __init__(self, path: Path, handler: Handler) -> None:
        self.path = path
        self.handler = handler
        self._sock: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    def start(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.unlink(missing_ok=True)  # left over from a daemon that was killed
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o117)  # no window in which the socket is world-connectable
        try:
            sock.bind(str(self.path))
        finally:
            os.umask(old)
        os.chmod(self.path, 0o660)
        sock.listen(8)
        sock.settimeout(0.2)
        self._sock = sock
        self._thread = threading.Thread(target=self._serve, name="gpuwatch-control", daemon=True)
        self._thread.start()
        log.info("control socket %s (mode 0660)", self.path)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(2.0)
        if self._sock is not None:
            self._sock.close()
        self.path.unlink(missing_ok=True)

    def _serve(self) -> None:
        assert self._sock is not None
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                break
            with conn:
                try:
                    self._answer(conn)
                except Exception:  # one bad client never stops the server
                    log.exception("control request failed")

    def _answer(self, conn: socket.socket) -> None:
        conn.settimeout(2.0)
        data = b""
        while b"\n" not in data and len(data) < MAX_REQUEST_BYTES:
            chunk = conn.recv(1024)
            if not chunk:
                break
            data += chunk
        try:
            request = json.loads(data.split(b"\n", 1)[0] or b"{}")
            cmd, name = str(request["cmd"]), request.get("name")
            ok, message = self.handler(cmd, None if name is None else str(name))
        except (ValueError, KeyError, TypeError) as exc:
            ok, message = False, f"bad request: {exc}"
        conn.sendall(json.dumps({"ok": ok, "message": message}).encode() + b"\n")


def send_command(path: Path, cmd: str, name: str | None, timeout_s: float = 5.0) -> tuple[bool, str]:
    """Ask the daemon; raises ControlError when it is not running or we may not talk to it."""
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
        raise ControlError(f"the daemon is not running (no control socket at {path}), "
                           "or no [[trainer]] is configured") from None
    except PermissionError:
        raise ControlError(f"not permitted to use {path}: run as root or as a member of its group") from None
    except OSError as exc:
        raise ControlError(f"cannot talk to the daemon at {path}: {exc}") from None
    try:
        reply = json.loads(data.decode())
        return bool(reply["ok"]), str(reply["message"])
    except (ValueError, KeyError, TypeError):
        raise ControlError(f"unexpected reply from the daemon: {data[:200]!r}") from None
