"""`gpuwatch train` started for real by the wrapper's tests, with every process it starts stopped at the end.

The wrapper runs as a user's shell would start it: its own process group (a terminal's Ctrl-C is
``os.killpg(wrapper.pid, SIGINT)``), SIGINT at its default, ``$XDG_RUNTIME_DIR`` in the test's folder
(the run directories go there) and the daemon's runtime directory named with ``--runtime-dir``. Its
output (stderr and stdout together) goes to a file. ``Wrappers`` stops every wrapper on exit, also
when the test failed half way, and then every process that was under it (the commands run in sessions
of their own).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

import psutil

from tests.support.cli import sigint_as_a_terminal_gives_it
from tests.support.paths import REPO

LOOP = str(REPO / "tests" / "support" / "pause_loop.py")
STOP_GRACE_S = 20.0


def loop_command(*args: str) -> list[str]:
    """The torch-free training loop; ``env`` first, so `gpuwatch train` runs it as given (no launcher)."""
    return ["env", sys.executable, LOOP, *args]


class Wrapper:
    def __init__(self, process: subprocess.Popen[bytes], log: Path, xdg: Path) -> None:
        self.process = process
        self.log = log
        self.xdg = xdg
        self.seen: dict[int, psutil.Process] = {}

    @property
    def pid(self) -> int:
        return self.process.pid

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def run_dirs(self) -> list[Path]:
        return sorted((self.xdg / "gpuwatch" / "runs").glob("*"))

    def remember_tree(self) -> None:
        """Note every process under the wrapper now (stopped at the end even if the wrapper is gone)."""
        try:
            for proc in psutil.Process(self.pid).children(recursive=True):
                self.seen.setdefault(proc.pid, proc)
        except psutil.Error:
            pass

    def wait(self, timeout_s: float = 60.0) -> int:
        return self.process.wait(timeout=timeout_s)


class Wrappers:
    """Starts `gpuwatch train` wrappers; stops them and what they started on exit."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.runtime = tmp / "daemon"
        self.runtime.mkdir(exist_ok=True)
        self.xdg = tmp / "xdg"
        self.xdg.mkdir(mode=0o700, exist_ok=True)
        self.started: list[Wrapper] = []

    @property
    def socket(self) -> Path:
        return self.runtime / "control.sock"

    def start(self, command: Sequence[str], *options: str, env: dict[str, str] | None = None,
              attach: bool = True, job: bool = False) -> Wrapper:
        """``job``: in a process group of its own in the test's session, as a job-control shell starts a job
        (a stop signal stops it there; in a session of its own its group is orphaned and the kernel discards
        SIGTSTP/SIGTTIN/SIGTTOU at their default action)."""
        environ = {k: v for k, v in os.environ.items() if not k.startswith("GPUWATCH_") and k != "SLURM_JOB_ID"}
        environ |= {"XDG_RUNTIME_DIR": str(self.xdg), "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1"}
        environ |= env or {}
        runtime = ["--runtime-dir", str(self.runtime)] if attach else []
        log = self.tmp / f"wrapper-{len(self.started)}.log"
        with log.open("wb") as sink:
            process = subprocess.Popen([sys.executable, "-m", "gpuwatch.cli", "train", *runtime, *options, "--",
                                        *command], stdout=sink, stderr=subprocess.STDOUT, env=environ,
                                       cwd=self.tmp, start_new_session=not job, process_group=0 if job else None,
                                       preexec_fn=sigint_as_a_terminal_gives_it)
        wrapper = Wrapper(process, log, self.xdg)
        self.started.append(wrapper)
        return wrapper

    def stop_all(self) -> None:
        for wrapper in self.started:
            wrapper.remember_tree()
            if wrapper.process.poll() is None:
                wrapper.process.send_signal(signal.SIGTERM)
                wrapper.process.send_signal(signal.SIGCONT)  # a wrapper a test left stopped acts on it
        for wrapper in self.started:
            try:
                wrapper.process.wait(timeout=STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                wrapper.process.kill()
                wrapper.process.wait(timeout=5)
            for proc in wrapper.seen.values():
                try:
                    proc.kill()
                except psutil.Error:
                    pass

    def __enter__(self) -> Wrappers:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.stop_all()
