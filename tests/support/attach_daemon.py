"""A real `gpuwatch run` on simulated cards for the attached-run tests (tests/daemon/test_attach_daemon.py, its
hostile-user tests, tests/e2e/test_attached_runs.py): its config written with the pause's debounce off, its card
made hot or cool by the thermal limits (a SIGHUP reload: [thermal] is live), its published runs awaited.

With ``HOT`` (``edge_limit_c = 20``) every simulated card is over its limit (ambient 30 °C), with ``COOL`` (140 °C
limits) none is. ``wait_s`` bounds each wait (a bound, never a speed: a slower pass only waits longer); a test that
loads the machine itself gives more."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.support.daemon_process import read_state
from tests.support.processes import Processes, Started
from tests.support.stack import GPUWATCH
from tests.support.waiting import wait_for

HOT = "[thermal]\nedge_limit_c = 20\n"
COOL = "[thermal]\nedge_limit_c = 140\njunction_limit_c = 140\nmem_limit_c = 140\n"
WAIT_S = 60.0  # generous: several engineers share two cores
NO_HTTP = "[http]\nenabled = false\n"
LOCAL_HTTP = '[http]\nlisten = "127.0.0.1"\nport = 0\n'  # a free port, said in the daemon's log


def world_readable(directory: Path) -> Path:
    """Another user's client reads the config and connects to the socket in it."""
    os.chmod(directory, 0o755)
    return directory


class AttachDaemon:
    """`gpuwatch run -c CONFIG` simulating, publishing in ``runtime``; started on construction (``processes``
    stops it), awaited until its control socket and first state are there."""

    def __init__(self, processes: Processes, config: Path, runtime: Path, thermal: str, attached: str = "",
                 name: str = "gpuwatch", http: str = NO_HTTP, wait_s: float = WAIT_S) -> None:
        self.config, self.runtime, self.attached, self.http, self.wait_s = config, runtime, attached, http, wait_s
        self.socket = runtime / "control.sock"
        self.write(thermal)
        self.child: Started = processes.start(name, [*GPUWATCH, "run", "-c", str(self.config)])
        wait_for(self.socket.exists, "the control socket", wait_s, detail=self.child.tail)
        wait_for(lambda: self.state() is not None, "the first state", wait_s, detail=self.child.tail)

    def write(self, thermal: str) -> None:
        self.config.write_text(f'runtime_dir = "{self.runtime}"\ninterval_s = 0.2\n{self.http}'
                               "[simulate]\nenabled = true\n[attached]\ndebounce_s = 0\nmin_pause_s = 0\n"
                               f"{self.attached}{thermal}")
        self.config.chmod(0o644)

    def reload(self, thermal: str) -> None:
        self.write(thermal)
        self.child.process.send_signal(signal.SIGHUP)

    def state(self) -> dict[str, Any] | None:
        return read_state(self.runtime)

    def ticks(self) -> int:
        return int((self.state() or {}).get("daemon", {}).get("ticks_total", 0))

    def runs(self) -> list[dict[str, Any]]:
        return list((self.state() or {}).get("trainers", []))

    def run(self, name: str) -> dict[str, Any] | None:
        return next((t for t in self.runs() if t["name"] == name), None)

    def wait_run(self, name: str, check: Callable[[dict[str, Any]], object], what: str,
                 detail: Callable[[], str] | None = None) -> dict[str, Any]:
        def matching() -> dict[str, Any] | None:
            run = self.run(name)
            return run if run is not None and check(run) else None

        return wait_for(matching, what, self.wait_s,
                        detail=lambda: f"{self.run(name)}\n{detail() if detail else ''}\n{self.child.tail()}")
