"""Job control with `gpuwatch train`: Ctrl-Z, ``fg`` and ``bg`` act on the command as on the bare command
(docs/attached-runs.md, "Job control").

``JobControl.suspend`` is the wrapper's handler of SIGTSTP (Ctrl-Z), SIGTTIN and SIGTTOU (cli/train/run.py
installs it): the command's process group is stopped, the daemon told, then the wrapper stops itself with the
same signal, so the shell sees the job stopped; a SIGCONT to the wrapper (fg, bg) continues both, and the
daemon lists the run ``suspended`` meanwhile.

``SuspendNotice`` is how that handler tells the link's thread (cli/train/link.py) without a lock the handler
could need: ``suspend`` wakes the thread, which sends a ``Beat`` with ``suspended`` before the wrapper stops
(waited for up to ``SUSPEND_NOTICE_S``), and one without once it is continued; the daemon keeps the silent
session and lists the run ``suspended``.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable, Container
from types import FrameType
from typing import Protocol

JOB_CONTROL = (signal.SIGTSTP, signal.SIGTTIN, signal.SIGTTOU)  # Ctrl-Z, a background job's terminal read/write
# How long a Ctrl-Z waits for the daemon to be told before the wrapper stops anyway (a daemon that does not read).
SUSPEND_NOTICE_S = 2.0


class Link(Protocol):
    """The run's link to the daemon as the handler tells it (cli/train/link.AttachLink)."""

    def suspend(self, signum: int | None) -> bool: ...


class JobControl:
    """The job-control signals' handler for one run: ``signal_group`` passes a signal to the command's process
    group (whether it was there to take it), ``link`` is the run's link to the daemon at that moment, if any."""

    def __init__(self, signal_group: Callable[[int], bool], link: Callable[[], Link | None]) -> None:
        self._signal_group = signal_group
        self._link = link
        self._suspending = False  # inside the job-control handler (a second Ctrl-Z meanwhile changes nothing)

    def suspend(self, signum: int, frame: FrameType | None) -> None:
        """Ctrl-Z (SIGTSTP; SIGTTIN, SIGTTOU likewise): the command's group is stopped, the daemon told, then the
        wrapper stops itself with the same signal, so the shell sees the job stopped. Continued (fg, bg, kill
        -CONT), the daemon is told and the group continued: only a group this handler stopped (the daemon
        never stops an attached run; it asks its wrapper, events). All here, in the handler: a SIGTTOU
        comes while a thread writes a line, and that write is retried until the wrapper stops."""
        if self._suspending:
            return
        self._suspending = True
        try:
            # In a session of its own the command's group is orphaned, where the kernel discards a job-control
            # stop at its default action (kernel/signal.c, get_signal: "The job control signals do nothing in
            # an orphaned pgrp, but SIGSTOP always works"): the same signal first, for a command that handles
            # it, then SIGSTOP, which stops it whatever it does.
            stopped = self._signal_group(signum) and self._signal_group(signal.SIGSTOP)
            link = self._link()
            if link is not None:
                link.suspend(signum)
            mine = signal.signal(signum, signal.SIG_DFL)
            try:
                # Stopped here until a SIGCONT. A wrapper in an orphaned group is not stopped (the kernel's
                # rule again, as for the bare command there): it goes on at once, and so does the command.
                os.kill(os.getpid(), signum)
            finally:
                signal.signal(signum, mine)
            if link is not None:
                link.suspend(None)
            if stopped:
                self._signal_group(signal.SIGCONT)
        finally:
            self._suspending = False


class SuspendNotice:
    """What the handler tells the link's thread: ``suspended`` (the signal its user stopped the run with, None
    once continued), sent in each Beat, and a self-pipe that wakes the thread's select at once. No lock: the
    handler may have interrupted the main thread while it held one."""

    def __init__(self) -> None:
        # Its user stopped the run (Ctrl-Z): the signal, set by the main thread's signal handler, sent in each Beat.
        self.suspended: int | None = None
        self._noticed = threading.Event()  # a Beat with the current ``suspended`` went out
        self._wake_r, self._wake_w = os.pipe()  # the handler wakes the thread's select: no lock a handler could need
        for fd in (self._wake_r, self._wake_w):
            os.set_blocking(fd, False)

    # ---- the handler's side (main thread) ----
    def set(self, signum: int | None) -> None:
        """Suspended with ``signum``, or continued (None): the thread is woken to send a Beat that says so."""
        self._noticed.clear()
        self.suspended = signum
        wake = self._wake_w
        if wake >= 0:
            try:
                os.write(wake, b"\0")
            except OSError:  # full: the thread wakes anyway
                pass

    def wait_sent(self, wait_s: float) -> bool:
        """Whether a Beat with the current ``suspended`` went out within ``wait_s``."""
        return self._noticed.wait(wait_s)

    def close(self) -> None:
        """The pipe closed (once the thread is gone: a thread still running may still select on it)."""
        wake_r, wake_w, self._wake_r, self._wake_w = self._wake_r, self._wake_w, -1, -1
        for fd in (wake_w, wake_r):
            if fd >= 0:
                os.close(fd)

    # ---- the link's thread ----
    def fileno(self) -> int:
        """The pipe's end the thread selects on, beside its socket."""
        return self._wake_r

    def woken(self, readable: Container[object]) -> bool:
        """Whether select found the pipe readable (suspended or continued); the pipe drained."""
        if self._wake_r not in readable:
            return False
        try:
            os.read(self._wake_r, 4096)
        except BlockingIOError:
            pass
        return True

    def sent(self, suspended: int | None) -> None:
        """A Beat with ``suspended`` went out: a handler waiting for it goes on, unless it changed meanwhile."""
        if suspended == self.suspended:
            self._noticed.set()
