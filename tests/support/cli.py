"""The real `gpuwatch` command, as a user types it: the console script pip installed next to this Python."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

GPUWATCH = str(Path(sys.executable).with_name("gpuwatch"))


def gpuwatch(*args: str, timeout: float = 60, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    """Run ``gpuwatch ARGS`` to the end; its exit code, stdout and stderr as text."""
    kwargs.setdefault("preexec_fn", sigint_as_a_terminal_gives_it)
    return subprocess.run([GPUWATCH, *args], capture_output=True, text=True, timeout=timeout, **kwargs)


def gpuwatch_process(*args: str, **kwargs: Any) -> subprocess.Popen[str]:
    """``gpuwatch ARGS`` started with its stdout and stderr on pipes (text), SIGINT as a terminal gives it."""
    kwargs.setdefault("preexec_fn", sigint_as_a_terminal_gives_it)
    return subprocess.Popen([GPUWATCH, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kwargs)


def sigint_as_a_terminal_gives_it() -> None:
    """In the child before exec: SIGINT back to its default.

    A shell starts a background job (``nohup make test &``) with SIGINT ignored, and an ignored signal
    stays ignored across fork and exec; Python then installs no KeyboardInterrupt handler, so a test's
    SIGINT (a user's Ctrl-C) would be lost on the child and the test would wait for an exit that never
    comes. A user's terminal gives the command SIGINT at its default; so does the test.
    """
    signal.signal(signal.SIGINT, signal.SIG_DFL)
