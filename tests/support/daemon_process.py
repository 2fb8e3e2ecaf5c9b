"""`gpuwatch run` as a real child process on a fake tree: its log, its state file, signals, a stop that
always reaps. For the fault tests that need the daemon's own signal handling and exit path."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

from tests.support.waiting import wait_for

GPUWATCH = [sys.executable, "-m", "gpuwatch.cli"]


class DaemonProcess:
    """Started on construction from ``toml`` (``runtime_dir`` is added); ``close()`` always reaps it."""

    def __init__(self, tmp: Path, sys_root: Path, toml: str) -> None:
        self.runtime = tmp / "run"
        self.config = tmp / "gpuwatch.toml"
        self.write_config(toml)
        self.log_path = tmp / "daemon.log"
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        for name in ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID", "INVOCATION_ID"):
            env.pop(name, None)
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen([*GPUWATCH, "run", "--sysfs-root", str(sys_root), "-c", str(self.config)],
                                         env=env, stdout=subprocess.DEVNULL, stderr=log)

    def write_config(self, toml: str) -> None:
        self.config.write_text(f'runtime_dir = "{self.runtime}"\n{toml}')

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def state(self) -> dict[str, Any] | None:
        try:
            document: dict[str, Any] = json.loads((self.runtime / "state.json").read_text())
        except (FileNotFoundError, ValueError):
            return None
        return document

    def wait_state(self, check: Callable[[dict[str, Any]], object], what: str, timeout_s: float = 15.0) -> dict[str, Any]:
        """The first published document ``check`` accepts."""

        def accepted() -> dict[str, Any] | None:
            document = self.state()
            return document if document is not None and check(document) else None

        return wait_for(accepted, what, timeout_s, detail=self._detail)

    def wait_log(self, text: str, timeout_s: float = 15.0) -> None:
        wait_for(lambda: text in self.log(), f"{text!r} in the daemon's log", timeout_s, detail=self._detail)

    def http_port(self) -> int:
        found = wait_for(lambda: re.search(r"HTTP listening on [\d.]+:(\d+)", self.log()), "the HTTP port",
                         detail=self._detail)
        return int(found.group(1))

    def signal(self, sig: int) -> None:
        self.proc.send_signal(sig)

    def stop(self, timeout_s: float = 30.0) -> int:
        """SIGTERM and wait for the exit; the exit code (the test fails if it does not exit in time)."""
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"the daemon did not exit within {timeout_s:g}s of SIGTERM\n{self._detail()}") from None

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def _detail(self) -> str:
        return "daemon log (tail):\n" + self.log()[-3000:]
