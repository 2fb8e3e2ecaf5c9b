"""Issue 31, points 2 and 5, with real processes: one daemon per runtime directory, and `gpuwatch restore`
never leaves a lowered power cap without its record.

* A second `gpuwatch run` with the same runtime directory exits 2 at once, naming the first one's pid;
  the first keeps its control socket and state file.
* `gpuwatch run --simulate` without ``-c`` stays out of the service's runtime directory.
* `gpuwatch restore` refuses while a daemon holds the directory (exit 2, its pid, how to stop it).
* `gpuwatch restore --force` beside the daemon: the daemon records the original again before it lowers
  the cap again, so after a SIGKILL the next `gpuwatch restore` still finds the way back.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.processes import Processes
from tests.support.stack import GPUWATCH
from tests.support.waiting import wait_for

ORIGINAL_UW = 150_000_000


def _cap_uw(cap: Path) -> int:
    return int(cap.read_text().strip() or 0)


def _simulated_config(tmp: Path, hot: bool = False) -> Path:
    config = tmp / "gpuwatch.toml"
    scale = "time_scale = 50.0\ncooling_scale = 0.4\n" if hot else ""
    config.write_text(f'runtime_dir = "{tmp / "run"}"\ninterval_s = 0.05\n[http]\nenabled = false\n'
                      f'[simulate]\nenabled = true\ntree_dir = "{tmp / "tree"}"\n{scale}')
    return config


@pytest.fixture
def processes(tmp_path: Path) -> Iterator[Processes]:
    with Processes(tmp_path / "logs") as started:
        yield started


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*GPUWATCH, *args], capture_output=True, text=True, timeout=60, env=env)


def test_a_second_daemon_with_the_same_runtime_dir_exits_2_naming_the_first(tmp_path: Path,
                                                                            processes: Processes) -> None:
    config = _simulated_config(tmp_path)
    first = processes.start("first", [*GPUWATCH, "run", "-c", str(config)])
    state = tmp_path / "run/state.json"
    wait_for(state.exists, "the first daemon's state file", 60, detail=first.tail)
    second = _cli("run", "-c", str(config))
    assert second.returncode == 2, second.stderr
    assert f"pid {first.process.pid}" in second.stderr
    assert "Traceback" not in second.stderr
    # The first one still ticks, publishes and keeps its files (the second never got as far as to take them).
    ticks = json.loads(state.read_text())["daemon"]["ticks_total"]
    wait_for(lambda: json.loads(state.read_text())["daemon"]["ticks_total"] > ticks, "the first daemon to tick on",
             30, ignore=(OSError, ValueError), detail=first.tail)
    assert first.process.poll() is None
    # And once the first is gone (SIGKILL: no clean exit), the directory is free again: the kernel drops the lock.
    first.process.kill()
    first.process.wait(30)
    third = processes.start("third", [*GPUWATCH, "run", "-c", str(config)])
    wait_for(lambda: f'"pid":{third.process.pid}' in state.read_text(), "a new daemon after the SIGKILL", 60,
             ignore=(OSError,), detail=third.tail)


def test_run_simulate_without_a_config_stays_out_of_the_services_runtime_dir(tmp_path: Path,
                                                                             processes: Processes) -> None:
    service = tmp_path / "gpuwatch"  # stands in for the service's /run/gpuwatch (systemd's RUNTIME_DIRECTORY)
    env = {**os.environ, "RUNTIME_DIRECTORY": str(service)}
    child = processes.start("simulated", ["env", f"RUNTIME_DIRECTORY={service}", *GPUWATCH, "run", "--simulate"])
    beside = tmp_path / "gpuwatch-simulate"
    wait_for(lambda: (beside / "state.json").exists(), "the simulated daemon's state file beside the service's",
             60, detail=child.tail)
    assert not service.exists()
    status = _cli("status", "--json", env={**env, "RUNTIME_DIRECTORY": str(beside)})
    assert json.loads(status.stdout)["daemon"]["pid"] == child.process.pid
    # A plain client finds it by itself while no real daemon runs, and says it is the simulator (issue 50).
    status = _cli("status", "--json", env=env)
    assert json.loads(status.stdout)["daemon"]["pid"] == child.process.pid
    assert f"using the simulator's (gpuwatch run --simulate) in {beside}" in status.stderr


@pytest.mark.parametrize("configured", [None, "service"])
def test_run_simulate_with_a_config_never_takes_the_real_runtime_dir(tmp_path: Path, processes: Processes,
                                                                     configured: str | None) -> None:
    """`run --simulate -c FILE` without runtime_dir, or with the real one: beside it (and said why), never in it."""
    service = tmp_path / "gpuwatch"
    config = tmp_path / "sim.toml"
    config.write_text((f'runtime_dir = "{service}"\n' if configured else "") + "[http]\nenabled = false\n")
    child = processes.start("simulated", ["env", f"RUNTIME_DIRECTORY={service}", *GPUWATCH, "run", "--simulate",
                                          "-c", str(config)])
    beside = tmp_path / "gpuwatch-simulate"
    wait_for(lambda: (beside / "state.json").exists(), "the simulator's state file beside the real directory", 60,
             detail=child.tail)
    assert not (service / "state.json").exists() and not (service / "control.sock").exists()
    said = f"runtime_dir {service} is where real daemons publish and real runs attach: the simulator publishes in " \
           f"{beside} instead"
    wait_for(lambda: "find it while no real daemon runs" in child.tail(), "the simulator's one line on where", 30,
             detail=child.tail)
    assert (said in child.tail()) == bool(configured), child.tail()


def _lowered(tmp_path: Path, processes: Processes) -> tuple[Path, Path, subprocess.Popen[bytes]]:
    """A daemon that has lowered the simulated card's cap: (config, cap file, process)."""
    config = _simulated_config(tmp_path, hot=True)
    cap = tmp_path / "tree/class/hwmon/hwmon1/power1_cap"
    child = processes.start("daemon", [*GPUWATCH, "run", "-c", str(config)])
    wait_for(lambda: _cap_uw(cap) < ORIGINAL_UW, "the governor to lower the cap", 60, ignore=(OSError, ValueError),
             detail=child.tail)
    return config, cap, child.process


def test_restore_refuses_while_the_daemon_runs(tmp_path: Path, processes: Processes) -> None:
    config, cap, daemon = _lowered(tmp_path, processes)
    done = _cli("restore", "-c", str(config))
    assert done.returncode == 2, done.stderr
    assert f"pid {daemon.pid}" in done.stderr and "systemctl stop gpuwatch" in done.stderr
    assert _cap_uw(cap) < ORIGINAL_UW  # nothing given back beside it
    assert [r["cap_uw"] for r in json.loads((tmp_path / "run/power-restore.json").read_text()).values()] \
        == [ORIGINAL_UW]
    # ExecStopPost's case: the daemon has exited (here killed), the lock is free, restore runs.
    daemon.send_signal(signal.SIGKILL)
    daemon.wait(30)
    done = _cli("restore", "-c", str(config))
    assert done.returncode == 0, done.stderr
    assert _cap_uw(cap) == ORIGINAL_UW


def test_a_forced_restore_beside_the_daemon_keeps_the_way_back_after_a_sigkill(tmp_path: Path,
                                                                               processes: Processes) -> None:
    config, cap, daemon = _lowered(tmp_path, processes)
    record = tmp_path / "run/power-restore.json"
    done = _cli("restore", "--force", "-c", str(config))
    # The cap went back; the fan may read back the daemon's own re-asserted mode already (exit 1 then).
    assert "power cap" in done.stdout and done.returncode in (0, 1), done.stderr
    # The still-hot daemon lowers the cap again: not without writing the original down first.
    wait_for(lambda: _cap_uw(cap) < ORIGINAL_UW and record.exists(), "the cap lowered again, and recorded", 60,
             ignore=(OSError, ValueError))
    assert [r["cap_uw"] for r in json.loads(record.read_text()).values()] == [ORIGINAL_UW]
    daemon.send_signal(signal.SIGKILL)
    daemon.wait(30)
    done = _cli("restore", "-c", str(config))
    assert done.returncode == 0, done.stderr
    assert _cap_uw(cap) == ORIGINAL_UW
    assert not record.exists()
