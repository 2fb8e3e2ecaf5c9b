"""The attached run's connection to the daemon (`gpuwatch train`'s side of gpuwatch/attach.py).

One background thread: it connects to the daemon's control socket, sends ``Attach``, then reads the ranks'
heartbeats from the run's own files every ``attach.BEAT_INTERVAL_S`` (the daemon never opens a user's files) and
sends them in a ``Beat`` when they changed, else every ``attach.BEAT_KEEPALIVE_S``, and carries out the daemon's
events: ``pause`` creates the pause file (refreshed every ``heartbeat.PAUSE_REFRESH_S`` while held), ``resume``
removes it, ``stop`` and ``hung`` go to the run (cli/train/run.py). The run never waits for it: the command
starts before the first connect, and nothing the daemon does or fails to do stops the training.

Without a daemon it says so once and tries again every ``attach.RECONNECT_S``, quietly; the first
attach says one line. A daemon that goes away: the pause it asked for is held for the hold window
(``attach.HOLD_WITHOUT_DAEMON_S``), while the link reconnects and re-attaches with the run's id and its
pause; none in time, the pause is released with one line. A refused attach (not permitted, too many
runs): one line, and the run trains unattached (the link stops trying).

Ctrl-Z (cli/train/job_control.py stops the command, then the wrapper): ``suspend`` wakes the thread, which sends a
``Beat`` with ``suspended`` before the wrapper stops (waited for up to ``job_control.SUSPEND_NOTICE_S``), and
one without once it is continued; the daemon keeps the silent session and lists the run ``suspended``.
"""

from __future__ import annotations

import select
import socket
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, replace
from pathlib import Path

from gpuwatch.attach import (
    BEAT_INTERVAL_S,
    BEAT_KEEPALIVE_S,
    HOLD_WITHOUT_DAEMON_S,
    MAX_LINE_BYTES,
    RECONNECT_S,
    Attach,
    Attached,
    Beat,
    Event,
    Exited,
    ProtocolError,
    Restarted,
    decode_reply,
    encode,
)
from gpuwatch.cli.text import safe
from gpuwatch.cli.train.handshake import REPLY_TIMEOUT_S, connect, handshake
from gpuwatch.cli.train.job_control import SUSPEND_NOTICE_S, SuspendNotice
from gpuwatch.config.runtime import is_simulator_dir
from gpuwatch.heartbeat import read_heartbeat, read_rank_heartbeats, refresh_pause, request_pause

# Tests only: a hold window of a few seconds instead of a minute (docs/attached-runs.md says so).
HOLD_ENV = "GPUWATCH_HOLD_WITHOUT_DAEMON_S"
SEND_TIMEOUT_S = 5.0
DEFAULT_PAUSE_REASON = "paused by the gpuwatch daemon"

Say = Callable[[str], None]


def hold_window_s(environ: Mapping[str, str]) -> float:
    try:
        return max(0.0, float(environ[HOLD_ENV]))
    except (KeyError, ValueError):
        return HOLD_WITHOUT_DAEMON_S


class AttachLink:
    """The run's link to the daemon; ``start`` once the command runs, ``close`` at the wrapper's exit."""

    def __init__(self, locate: Callable[[], Path], request: Attach, heartbeat_file: Path, pause_file: Path,
                 say: Say, on_event: Callable[[Event], None], hold_s: float = HOLD_WITHOUT_DAEMON_S) -> None:
        # Where the daemon's socket is, asked before every connect: a run started while no daemon ran looks
        # where a daemon is once one starts (the user's own, or the system service's).
        self._locate = locate
        self.socket_path = locate()
        self.heartbeat_file = heartbeat_file
        self.pause_file = pause_file
        self.hold_s = hold_s
        self._say = say
        self._on_event = on_event
        self._request = request
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._sock: socket.socket | None = None  # attached: what Beat, Exited and Restarted go out on
        self._open: socket.socket | None = None  # connected (attached or not): what close() shuts down
        self._thread = threading.Thread(target=self._run, name="attach-link", daemon=True)
        self.run_id: str | None = None
        self.name: str | None = None
        self.paused = False
        self.reason: str | None = None
        self.attached = False
        self._lost_at: float | None = None  # monotonic: since when no daemon holds this run's pause
        self._notice = SuspendNotice()  # Ctrl-Z: set by the main thread's signal handler, sent in each Beat

    # ---- the run's side (main thread) ----
    def start(self) -> AttachLink:
        self._thread.start()
        return self

    def restarted(self, pid: int) -> None:
        """The command started again (``--restart``): later attaches name the new process."""
        with self._lock:
            self._request = replace(self._request, pid=pid)
        self._send(Restarted(pid=pid))

    def exited(self, code: int, restarting: bool, signalled: int | None = None) -> None:
        self._send(Exited(code=code, restarting=restarting, signalled=signalled))

    def suspend(self, signum: int | None, wait_s: float = SUSPEND_NOTICE_S) -> bool:
        """Its user stops the run (``signum``: the wrapper stops next) or continued it (None), from the main
        thread's signal handler. The thread tells the daemon in a Beat at once; a stop waits up to ``wait_s``
        for it to go out (False: not attached, or not in time). Never takes the link's lock: the handler may
        have interrupted the main thread holding it. Continued, a held pause file is refreshed first: the
        run's launcher must not find it stale (``heartbeat.PAUSE_STALE_S``) when the command runs again."""
        if signum is None and self.paused:
            refresh_pause(self.pause_file, time.time())
        self._notice.set(signum)
        if signum is None or not self.attached:
            return False
        return self._notice.wait_sent(wait_s)

    @property
    def suspended(self) -> int | None:
        """The signal its user stopped the run with (Ctrl-Z), None while it runs."""
        return self._notice.suspended

    def close(self) -> None:
        """Stop the thread; a pause this link made is taken back (the file goes with the run)."""
        self._stop.set()
        with self._lock:
            sock = self._open
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)  # wakes the thread (its select, or a wait for the reply)
            except OSError:
                pass
        if self._thread.is_alive():
            self._thread.join(REPLY_TIMEOUT_S + 1.0)
        if self.paused:
            self.pause_file.unlink(missing_ok=True)
        if not self._thread.is_alive():  # a thread that did not end in time may still select on the pipe
            self._notice.close()

    # ---- the thread ----
    def _run(self) -> None:
        said_missing = False
        self._lost_at = time.monotonic()
        while not self._stop.is_set():
            self.socket_path = self._locate()
            sock, problem = connect(self.socket_path)
            if sock is None:
                if not said_missing:
                    self._say(problem)
                    said_missing = True
                self._hold_without_daemon()
                self._stop.wait(RECONNECT_S)
                continue
            with self._lock:
                self._open = sock
            try:
                if self._stop.is_set() or not self._serve(sock):
                    return  # closing, or refused: the run trains unattached
            finally:
                with self._lock:
                    self._sock = self._open = None
                sock.close()
            if self._stop.is_set():
                return
            if self.attached:  # this connection was attached: the daemon went away
                self.attached, self._lost_at = False, time.monotonic()
                held = f"; the pause ({self.reason}) is held for up to {self.hold_s:g} s" if self.paused else ""
                self._say(f"gpuwatch train: lost the gpuwatch daemon: reconnecting every {RECONNECT_S:g} s{held}")
            elif not said_missing:  # it accepted and never answered (or not in this protocol)
                self._say(f"gpuwatch train: the gpuwatch daemon at {self.socket_path} did not answer the attach: "
                          "this run is not protected")
            said_missing = True
            self._hold_without_daemon()
            self._stop.wait(RECONNECT_S)

    def _serve(self, sock: socket.socket) -> bool:
        """One connection: Attach, then beats and events until it ends; False when the daemon refused."""
        with self._lock:
            request = replace(self._request, run_id=self.run_id, paused=self.paused,
                              reason=self.reason if self.paused else None)
        reply, buffer = handshake(sock, request)
        if reply is None:  # gone before it answered, or not in this protocol: try again
            return True
        if not reply.ok:
            self._refused(reply.message)
            return False
        self._attached(reply)
        with self._lock:
            self._sock = sock
        if self._stop.is_set():
            return True
        return self._stream(sock, buffer)

    def _attached(self, reply: Attached) -> None:
        again = self.run_id is not None
        self.run_id, self.name = reply.run_id, reply.name or self._request.name
        self.attached, self._lost_at = True, None
        kept = f" (the pause kept: {self.reason})" if again and self.paused else ""
        word = "re-attached" if again else "attached"
        # The daemon's word on the request (a --gpu not there).
        note = f"; {safe(reply.message)}" if reply.message else ""
        daemon = (f"the simulated gpuwatch daemon ({self.socket_path.parent}: no real daemon runs here)"
                  if is_simulator_dir(self.socket_path.parent) else "the gpuwatch daemon")
        self._say(f"gpuwatch train: {word} to {daemon} as {self.name or '?'}{kept}{note}")

    def _refused(self, message: str) -> None:
        self.attached = False
        self._say(f"gpuwatch train: the gpuwatch daemon refused this run ({safe(message) or 'no reason given'}): "
                  "it trains unprotected")
        if self.paused:
            self._release("the daemon refused this run")

    def _stream(self, sock: socket.socket, buffer: bytes) -> bool:
        """Beats out, events in, until the connection ends or the link closes."""
        next_beat = time.monotonic()
        last: Beat | None = None  # the last Beat sent on this connection and when the next must go, changed or not
        keepalive_due = 0.0
        while not self._stop.is_set():
            while b"\n" in buffer:
                line, _, buffer = buffer.partition(b"\n")
                self._event_line(line)
            if len(buffer) > MAX_LINE_BYTES:
                return True  # not this protocol: reconnect
            now = time.monotonic()
            if now >= next_beat:
                suspended = self._notice.suspended
                beat = Beat(heartbeats=self._heartbeats(), suspended=suspended)
                # Read every beat, sent when it says something new: each line wakes a daemon thread, and a run
                # whose heartbeats stand still (no hooks, or a hung step) said it already.
                if beat != last or now >= keepalive_due:
                    if not self._send(beat):
                        return True
                    last, keepalive_due = beat, now + BEAT_KEEPALIVE_S
                self._notice.sent(suspended)
                next_beat = now + BEAT_INTERVAL_S
            if self.paused:
                refresh_pause(self.pause_file, time.time())
            try:
                watched: list[socket.socket | int] = [sock, self._notice.fileno()]
                readable, _, _ = select.select(watched, [], [], max(0.0, next_beat - time.monotonic()))
                if self._notice.woken(readable):  # suspended or continued: a Beat says so now
                    next_beat = time.monotonic()
                if sock in readable:
                    chunk = sock.recv(65536)
                    if not chunk:
                        return True
                    buffer += chunk
            except OSError:
                return True
        return True

    def _event_line(self, line: bytes) -> None:
        try:
            event = decode_reply(line)
        except ProtocolError as exc:
            self._say(f"gpuwatch train: a line from the daemon ignored: {exc}")
            return
        if not isinstance(event, Event):
            return
        if event.event == "pause":
            reason = event.reason or DEFAULT_PAUSE_REASON
            try:
                request_pause(self.pause_file, reason)
            except OSError as exc:
                self._say(f"gpuwatch train: cannot make the pause file {self.pause_file}: {exc.strerror}")
                return
            self.paused, self.reason = True, reason
        elif event.event == "resume":
            self.pause_file.unlink(missing_ok=True)
            self.paused, self.reason = False, None
        else:
            self._on_event(event)

    def _hold_without_daemon(self) -> None:
        if self.paused and self._lost_at is not None and time.monotonic() - self._lost_at >= self.hold_s:
            self._release(f"no gpuwatch daemon for {self.hold_s:g} s")

    def _release(self, why: str) -> None:
        self.pause_file.unlink(missing_ok=True)
        self._say(f"gpuwatch train: {why}: the pause it asked for ({self.reason}) is released")
        self.paused, self.reason = False, None

    def _heartbeats(self) -> list[dict[str, object]]:
        """The run's heartbeats as the ranks (or the single process) last wrote them."""
        beats = read_rank_heartbeats(self.heartbeat_file)
        single = read_heartbeat(self.heartbeat_file)
        if single is not None:
            beats.append(single)
        return [asdict(beat) for beat in beats]

    def _send(self, message: Beat | Exited | Restarted) -> bool:
        with self._lock:
            sock = self._sock
            if sock is None:
                return False
            try:
                sock.settimeout(SEND_TIMEOUT_S)
                sock.sendall(encode(message))
            except OSError:
                return False
        return True
