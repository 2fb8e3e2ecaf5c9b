"""What a signal handler may touch: a flag and a self-pipe (the daemon loop's wait between ticks polls it).

A Python signal handler runs on the main thread between two bytecodes, possibly while that thread holds
a lock: the condition of a ``threading.Event`` it is waiting on, logging's handler lock. A handler that
takes such a lock again deadlocks the daemon (issue 40: ``Event.set()`` from the SIGTERM handler while
the loop sat in ``Event.wait()``; a faulthandler dump of the hung daemon showed it). So the handlers
only store a boolean (``Flag``) and write one byte to a non-blocking pipe (``Wakeup``), the self-pipe
trick: the loop's ``poll`` returns as soon as the byte is there, whenever the signal came. ``Signals``
installs the handlers and keeps what arrived for the loop to log.
"""

from __future__ import annotations

import logging
import os
import select
import signal
import time
import weakref
from collections.abc import Callable
from types import FrameType
from typing import Any

Handler = Callable[[int, FrameType | None], Any]


class Flag:
    """A boolean a signal handler may set: an attribute store, atomic under the GIL, with no lock to take
    (threading.Event.set takes its condition's lock, which the interrupted main thread may hold)."""

    def __init__(self) -> None:
        self._set = False

    def set(self) -> None:
        self._set = True

    def clear(self) -> None:
        self._set = False

    def is_set(self) -> bool:
        return self._set


class Wakeup:
    """The self-pipe that ends the loop's wait: ``poke`` (a signal handler or another thread) writes a byte,
    ``wait`` polls the read end with a timeout and drains it. Both ends are non-blocking: a full pipe
    already holds a wake-up, and a handler must never block."""

    def __init__(self) -> None:
        self._read, self._write = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._poll = select.poll()
        self._poll.register(self._read, select.POLLIN)
        # A daemon that never ran (tests, `gpuwatch` as a library) closes its pipe when it is collected.
        self._closer = weakref.finalize(self, _close_fds, self._read, self._write)

    def poke(self) -> None:
        fd = self._write
        if fd < 0:
            return
        try:
            os.write(fd, b"\0")
        except OSError:  # EAGAIN: a wake-up is pending already; never raise out of a signal handler
            pass

    def wait(self, timeout_s: float) -> bool:
        """Until poked or ``timeout_s`` passed; whether it was poked. A signal during the poll runs its
        handler, which pokes: the retried poll (PEP 475) returns at once."""
        if self._read < 0:
            time.sleep(timeout_s)
            return False
        if not self._poll.poll(max(0, int(timeout_s * 1000 + 0.999))):
            return False
        try:
            while os.read(self._read, 4096):
                pass
        except BlockingIOError:
            pass
        return True

    def close(self) -> None:
        """Marked closed before the fds go: a handler that runs later finds -1 and writes nothing (it runs on
        the main thread, between this method's statements, never inside one)."""
        self._write = self._read = -1
        self._closer()


def _close_fds(*fds: int) -> None:
    for fd in fds:
        os.close(fd)


class Signals:
    """The daemon's handlers: SIGTERM and SIGINT stop, SIGHUP reloads. ``received`` is all a stop handler
    records (``list.append``: atomic, no lock); the loop logs them with ``log_new``."""

    def __init__(self) -> None:
        self._received: list[int] = []
        self._logged = 0
        self._previous: dict[int, Handler | int | None] = {}

    def install(self, stop: Handler, reload: Handler) -> None:
        """On the main thread (only it may set handlers)."""
        for signum, handler in ((signal.SIGTERM, stop), (signal.SIGINT, stop), (signal.SIGHUP, reload)):
            self._previous[signum] = signal.signal(signum, handler)

    def uninstall(self) -> None:
        """After the shutdown a stop or reload signal has nothing left to do. Python resets its handlers to
        the default action when the interpreter finalizes, and SIGHUP's or SIGTERM's default kills: a late
        one turned a clean exit into death by signal. Ignored where the default was in force, the earlier
        handler back otherwise (an embedding program's; Python's KeyboardInterrupt for SIGINT)."""
        for signum, previous in self._previous.items():
            signal.signal(signum, signal.SIG_IGN if previous in (signal.SIG_DFL, None) else previous)
        self._previous.clear()

    def received(self, signum: int) -> None:
        self._received.append(signum)

    def log_new(self, log: logging.Logger) -> None:
        """One line per stop, from the loop: a Ctrl-C that also reaches a wrapper which then sends SIGTERM is
        one request (the first is news, the others debug)."""
        while self._logged < len(self._received):
            signum, first = self._received[self._logged], self._logged == 0
            self._logged += 1
            log.log(logging.INFO if first else logging.DEBUG, "received %s, %s", signal.Signals(signum).name,
                    "stopping" if first else "already stopping")
