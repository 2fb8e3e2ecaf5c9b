"""A hostile local user of the control socket (issue 46 items 6-9), run as that user through tests.support.as_user:
``python -m tests.support.as_user USER hostile MODE SOCKET ARGS...``.

* ``raw SOCKET LINE...``: each LINE (a JSON text: ``\\ud800`` stays a JSON escape) on a connection of its own,
  every line the daemon answers printed until it closes (or 20 s);
* ``session SOCKET LINE...``: the same after a valid ``Attach`` of its own ``sleep`` child (its reply printed
  first); a LINE ``restarted:PID`` is the ``Restarted`` of that pid;
* ``connflood SOCKET SECONDS``: connect and close as fast as it can;
* ``beatflood SOCKET SECONDS``: a valid session, then blank lines and 64-rank Beats as fast as the socket takes.
It prints one JSON line per reply, and ``{"done": ...}`` with its counts at the end.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

from gpuwatch import attach


def _connect(path: Path) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(20.0)
    sock.connect(str(path))
    return sock


def _replies(sock: socket.socket) -> None:
    data = b""
    try:
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    except OSError:
        pass
    for line in data.splitlines():
        print(line.decode("utf-8", "backslashreplace"), flush=True)


def _attach(sock: socket.socket, child: subprocess.Popen[bytes]) -> None:
    sock.sendall(attach.encode(attach.Attach(pid=child.pid, argv=["python", "train.py"], name="hostile")))
    line = b""
    while not line.endswith(b"\n"):
        chunk = sock.recv(4096)
        if not chunk:
            break
        line += chunk
    print(line.decode().strip(), flush=True)


def _line(text: str) -> bytes:
    if text.startswith("restarted:"):
        return attach.encode(attach.Restarted(pid=int(text.split(":", 1)[1])))
    return text.encode() + b"\n"


def _connflood(path: Path, seconds: float) -> dict[str, int]:
    counts = {"connected": 0, "failed": 0}
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.setblocking(False)
        try:
            sock.connect(str(path))
            counts["connected"] += 1
        except OSError:
            counts["failed"] += 1
        sock.close()
    return counts


def _beatflood(sock: socket.socket, seconds: float) -> dict[str, int]:
    beat = attach.encode(attach.Beat(heartbeats=[
        {"pid": 1, "steps_total": 5, "last_step_unix": None, "steps_per_s": None, "updated_unix": 3.0, "rank": r,
         "world_size": 64} for r in range(64)]))
    blanks = b"\n" * 65536
    counts = {"sent_bytes": 0}
    end = time.monotonic() + seconds
    sock.settimeout(1.0)
    while time.monotonic() < end:
        try:
            counts["sent_bytes"] += sock.send(blanks) + sock.send(beat * 3)
        except TimeoutError:
            continue  # the daemon reads no faster than this user's rate: the socket is full
        except OSError:
            break
    return counts


def main(argv: list[str]) -> int:
    mode, path = argv[0], Path(argv[1])
    if mode == "connflood":
        print(json.dumps({"done": _connflood(path, float(argv[2]))}), flush=True)
        return 0
    if mode == "raw":
        for text in argv[2:]:
            with _connect(path) as sock:
                sock.sendall(_line(text))
                _replies(sock)
        print(json.dumps({"done": {}}), flush=True)
        return 0
    child = subprocess.Popen(["sleep", "600"])
    try:
        with _connect(path) as sock:
            if mode in ("session", "beatflood"):
                _attach(sock, child)
            if mode == "beatflood":
                print(json.dumps({"done": _beatflood(sock, float(argv[2]))}), flush=True)
                return 0
            for text in argv[2:]:
                sock.sendall(_line(text))
            _replies(sock)
    finally:
        child.kill()
        child.wait()
    print(json.dumps({"done": {"child": child.pid}}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))


