"""Servers and daemons a test starts as child processes: every one is stopped, and loopback helpers.

``Processes`` is a context manager: whatever was started through it is stopped on exit, also when
the test failed half way (SIGTERM to all first, then wait, SIGKILL after a grace period; stopping
never raises, so one stuck child cannot leave the others running). Each child writes to its own log
file, whose tail goes into every failure message that waited on it.
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import psutil

from tests.support.waiting import wait_for

WAIT_S = 60.0  # one bounded wait for a server on 2 busy cores (they take 0.3-6 s)
STOP_GRACE_S = 15.0


def free_port() -> int:
    """A port on 127.0.0.1 that was free a moment ago (for servers that cannot bind port 0 themselves)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Started:
    name: str
    process: subprocess.Popen[bytes]
    log: Path

    def tail(self, chars: int = 3000) -> str:
        return self.log.read_text(errors="replace")[-chars:] if self.log.exists() else ""


class Processes:
    """Starts children with their output in ``<logs>/<name>.log``; stops them all on exit."""

    def __init__(self, logs: Path) -> None:
        self.logs = logs
        self.started: list[Started] = []

    def start(self, name: str, argv: Sequence[str], cwd: Path | None = None) -> Started:
        self.logs.mkdir(parents=True, exist_ok=True)
        log = self.logs / f"{name}.log"
        with log.open("wb") as sink:
            # Own session: a Ctrl-C in the test's terminal goes to pytest, which then stops these.
            process = subprocess.Popen(list(argv), stdout=sink, stderr=subprocess.STDOUT, cwd=cwd,
                                       start_new_session=True)
        child = Started(name, process, log)
        self.started.append(child)
        return child

    def stop_all(self) -> None:
        for child in self.started:
            if child.process.poll() is None:
                child.process.send_signal(signal.SIGTERM)
        for child in reversed(self.started):
            try:
                child.process.wait(timeout=STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                child.process.kill()
                child.process.wait(timeout=5)

    def __enter__(self) -> Processes:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.stop_all()


def wait_up(what: str, check: Callable[[], Any], child: Started | None = None, timeout_s: float = WAIT_S) -> Any:
    """wait_for with a server's budget: a server not answering yet (OSError, a half-written log) is
    "not yet"; a child that exited fails at once, with its log."""

    def checked() -> Any:
        if child is not None and child.process.poll() is not None:
            raise AssertionError(f"{child.name} exited with {child.process.returncode} while waiting for {what}:\n"
                                 f"{child.tail()}")
        return check()

    return wait_for(checked, what, timeout_s, interval_s=0.2, ignore=(OSError, ValueError),
                    detail=(child.tail if child else None))


def get_json(url: str, timeout_s: float = 5.0) -> Any:
    with urllib.request.urlopen(url, timeout=timeout_s) as response:
        return json.loads(response.read())


def post_json(url: str, body: Any, timeout_s: float = 5.0) -> int:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def kill_named(marker: str) -> None:
    """Every process whose command line names ``marker`` (a job's folder: torchrun starts ranks in sessions of
    their own, and a rank whose agent died is init's), killed and waited for, also when a test failed half way:
    a rank left running waits on a store that is gone, for ever, and costs every later test its CPU."""
    mine = [p for p in psutil.process_iter(["cmdline"]) if marker in " ".join(p.info["cmdline"] or ())]
    for process in mine:
        try:
            process.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(mine, timeout=30)
