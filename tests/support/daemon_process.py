"""`gpuwatch run` as a real child process on a fake tree, started through ``Processes`` (which stops it):
its log, its state file, signals and a timed stop. For the fault tests that need the daemon's own
signal handling and exit path."""

from __future__ import annotations

import json
import re
import resource
import signal
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.processes import Processes
from tests.support.stack import GPUWATCH
from tests.support.waiting import wait_for


def read_state(runtime: Path) -> dict[str, Any] | None:
    """The state file a daemon publishes in ``runtime``; None before its first tick (or a half-read file)."""
    try:
        document: dict[str, Any] = json.loads((runtime / "state.json").read_text())
    except (FileNotFoundError, ValueError):
        return None
    return document


@dataclass(frozen=True)
class HotSimulator:
    """A config for `gpuwatch run -c CONFIG` on a simulated card in a hot case, in ``tmp``: its fan stuck at 30 %,
    its cooling at 0.4 and its time 50 times as fast, so the cap reaches its floor and the clock rung acts
    within seconds (the restore tests: SIGTERM gives back, SIGKILL leaves the records for `gpuwatch restore`).
    The simulated tree and the runtime directory beside it."""

    config: Path
    tree: Path
    run_dir: Path


def hot_simulator(tmp: Path, card: str | None = None, extra: str = "") -> HotSimulator:
    """``card``: the simulated model (``[simulate] card``, default navi10); ``extra``: TOML appended."""
    hot = HotSimulator(tmp / "gpuwatch.toml", tmp / "tree", tmp / "run")
    hot.config.write_text(f'runtime_dir = "{hot.run_dir}"\ninterval_s = 0.05\n[http]\nenabled = false\n'
                          f'[simulate]\nenabled = true\ntree_dir = "{hot.tree}"\ntime_scale = 50.0\n'
                          'cooling_scale = 0.4\n' + (f'card = "{card}"\n' if card else "")
                          + f"[simulate.faults]\nfan_stuck_percent = 30\n{extra}")
    return hot


def signalled_once(config: Path, ready: Callable[[], object], what: str, timeout_s: float,
                   sig: int) -> tuple[int, bytes]:
    """`gpuwatch run -c CONFIG` until ``ready()`` holds (read errors count as not yet), then ``sig``: (exit
    status, stderr). No core file: SIGABRT (systemd's watchdog kill) is one of the signals sent."""
    proc = subprocess.Popen([*GPUWATCH, "run", "-c", str(config)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_CORE, (0, 0)))
    try:
        wait_for(ready, what, timeout_s, ignore=(OSError, ValueError))
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=15)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, err


class DaemonProcess:
    """Started on construction from ``toml`` (``runtime_dir`` is added)."""

    def __init__(self, processes: Processes, tmp: Path, sys_root: Path, toml: str) -> None:
        self.runtime = tmp / "run"
        self.config = tmp / "gpuwatch.toml"
        self.write_config(toml)
        self.child = processes.start("gpuwatch",
                                     [*GPUWATCH, "run", "--sysfs-root", str(sys_root), "-c", str(self.config)])
        self.proc = self.child.process

    def write_config(self, toml: str) -> None:
        self.config.write_text(f'runtime_dir = "{self.runtime}"\n{toml}')

    def log(self) -> str:
        return self.child.log.read_text(errors="replace")

    def state(self) -> dict[str, Any] | None:
        return read_state(self.runtime)

    def wait_state(
        self, check: Callable[[dict[str, Any]], object], what: str, timeout_s: float = 15.0
    ) -> dict[str, Any]:
        """The first published document ``check`` accepts."""

        def accepted() -> dict[str, Any] | None:
            document = self.state()
            return document if document is not None and check(document) else None

        return wait_for(accepted, what, timeout_s, detail=self.child.tail)

    def wait_log(self, text: str, timeout_s: float = 15.0) -> None:
        wait_for(lambda: text in self.log(), f"{text!r} in the daemon's log", timeout_s, detail=self.child.tail)

    def http_port(self) -> int:
        found = wait_for(lambda: re.search(r"HTTP listening on [\d.]+:(\d+)", self.log()), "the HTTP port",
                         detail=self.child.tail)
        return int(found.group(1))

    def signal(self, sig: int) -> None:
        self.proc.send_signal(sig)

    def stop(self, timeout_s: float = 30.0) -> int:
        """SIGTERM and the exit code; the test fails if the daemon does not exit within ``timeout_s``."""
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"the daemon did not exit within {timeout_s:g}s of SIGTERM\n{self.child.tail()}") from None
