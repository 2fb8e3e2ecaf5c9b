"""A small real attach client (gpuwatch/attach.py over the daemon's real control socket), for the daemon-side tests.

It plays the wrapper's part of the protocol and nothing more: it attaches a real child process (``sleep``)
as its run, sends a ``Beat`` every ``attach.BEAT_INTERVAL_S`` with one heartbeat per rank (the steps move
while it runs; each rank acknowledges a pause: ``paused`` and ``wants``, as the launcher's hooks do), and
keeps every event it receives. ``hold()`` says whether it holds the pause now. Branch attachw writes the
real wrapper (`gpuwatch train`); this client exists so the daemon's end can be tested on its own.

Run as a script (``python -m tests.support.attach_client SOCKET NAME [RANKS]``) it does the same as
another user (the test starts it through ``tests.support.as_user``) and prints each reply and event as a JSON line.
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import asdict
from pathlib import Path

from gpuwatch import attach


class AttachClient:
    """One attached run: a ``sleep`` child as its process, a session, beats on a thread."""

    def __init__(self, sock_path: Path, name: str | None, ranks: int = 1, run_id: str | None = None,
                 paused: bool = False, reason: str | None = None, pid: int | None = None,
                 steps: bool = True, beat_s: float = attach.BEAT_INTERVAL_S / 4) -> None:
        self.child = subprocess.Popen(["sleep", "600"]) if pid is None else None
        self.pid = pid if pid is not None else self.child.pid  # type: ignore[union-attr]
        self.ranks = ranks
        self.events: list[attach.Event] = []
        self.held = paused
        self.step = 0
        self.moving = steps
        self.beat_s = beat_s
        self.closed = threading.Event()
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(30.0)
        self.sock.connect(str(sock_path))
        self._buffer = b""
        self.sock.sendall(attach.encode(attach.Attach(pid=self.pid, argv=["python", "train.py"], name=name,
                                                      run_id=run_id, paused=paused, reason=reason)))
        reply = attach.decode_reply(self._line())
        assert isinstance(reply, attach.Attached)
        self.reply = reply
        self.sock.settimeout(None)  # events come whenever the daemon decides: no read deadline from here on
        self._threads: list[threading.Thread] = []
        if reply.ok:
            self._threads = [threading.Thread(target=self._beat, daemon=True),
                             threading.Thread(target=self._read, daemon=True)]
            for thread in self._threads:
                thread.start()

    def _line(self) -> bytes:
        while b"\n" not in self._buffer:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("the daemon closed the session")
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line

    def beats(self) -> list[dict[str, object]]:
        now = time.time()
        common = {"steps_total": self.step, "last_step_unix": now, "steps_per_s": None if self.held else 10.0,
                  "updated_unix": now, "paused": self.held, "wants": self.held}
        if self.ranks == 1:
            return [{"pid": self.pid, **common}]
        return [{"pid": self.pid, "rank": r, "world_size": self.ranks, "local_world_size": self.ranks, "job": "j1",
                 **common} for r in range(self.ranks)]

    def _beat(self) -> None:
        while not self.closed.is_set():
            if not self.held and self.moving:
                self.step += 1
            try:
                self.sock.sendall(attach.encode(attach.Beat(heartbeats=self.beats())))
            except OSError:
                return
            self.closed.wait(self.beat_s)

    def _read(self) -> None:
        while not self.closed.is_set():
            try:
                event = attach.decode_reply(self._line())
            except (OSError, ConnectionError, attach.ProtocolError):
                self.closed.set()
                return
            if isinstance(event, attach.Event):
                if event.event == "pause":
                    self.held = True
                elif event.event == "resume":
                    self.held = False
                self.events.append(event)

    def kinds(self) -> list[str]:
        return [e.event for e in self.events]

    def exit(self, code: int, restarting: bool = False) -> None:
        self.sock.sendall(attach.encode(attach.Exited(code=code, restarting=restarting)))

    def close(self) -> None:
        """Ends the session (the end of stream) and the child."""
        self.closed.set()
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
        if self.child is not None:
            self.child.kill()
            self.child.wait(10)


def main(argv: list[str]) -> int:
    # SIGTERM (the test's Processes stopping it) ends through ``finally``: its child is killed, never left behind.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(0))
    client = AttachClient(Path(argv[0]), argv[1], ranks=int(argv[2]) if len(argv) > 2 else 1)
    print(json.dumps(asdict(client.reply)), flush=True)
    seen = 0
    try:
        while not client.closed.is_set():
            for event in client.events[seen:]:
                print(json.dumps(asdict(event)), flush=True)
            seen = len(client.events)
            time.sleep(0.1)
    finally:
        client.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
