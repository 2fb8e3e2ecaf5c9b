"""Real processes: `gpuwatch run` on the simulated Navi 31-like card in a hot case (the fan stuck, the cap at its
floor at once) lowers the shader clock's ceiling; SIGTERM gives it back; after SIGKILL `gpuwatch restore` does,
from clock-restore.json, exactly as ExecStopPost runs it."""

from __future__ import annotations

import json
import re
import signal
import subprocess
from pathlib import Path

import pytest

from gpuwatch.sim import navi31
from tests.support.daemon_process import hot_simulator, signalled_once
from tests.support.stack import GPUWATCH


def _od_max_mhz(table: Path) -> int:
    found = re.search(r"^OD_SCLK:\n0: \d+Mhz\n1: (\d+)Mhz$", table.read_text(), re.MULTILINE)
    return int(found.group(1)) if found else 0


def _limited_then(tmp_path: Path, sig: int) -> tuple[int, bytes, Path, Path]:
    hot = hot_simulator(tmp_path, "navi31")
    table = hot.tree / "class/drm/card0/device/pp_od_clk_voltage"
    status, err = signalled_once(hot.config, lambda: 0 < _od_max_mhz(table) < navi31.SCLK_MAX_MHZ,
                                 "the clock rung to lower the ceiling", 60, sig)
    return status, err, hot.config, table


def test_sigterm_gives_the_ceiling_back(tmp_path: Path) -> None:
    status, err, _, table = _limited_then(tmp_path, signal.SIGTERM)
    assert status == 0, err.decode()[-2000:]
    assert _od_max_mhz(table) == navi31.SCLK_MAX_MHZ
    assert not (tmp_path / "run/clock-restore.json").exists()


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGABRT], ids=["SIGKILL", "SIGABRT-watchdog"])
def test_after_a_kill_gpuwatch_restore_gives_the_ceiling_back(tmp_path: Path, sig: int) -> None:
    status, _, config, table = _limited_then(tmp_path, sig)
    run_dir = tmp_path / "run"
    assert status == -sig
    assert _od_max_mhz(table) < navi31.SCLK_MAX_MHZ  # nobody gave it back
    record = json.loads((run_dir / "clock-restore.json").read_text())
    assert list(record.values()) == [{"backend": "od_table", "sclk_max_mhz": navi31.SCLK_MAX_MHZ}]
    done = subprocess.run([*GPUWATCH, "restore", "-c", str(config)], capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr.decode()
    assert "shader clock ceiling back to its original 2500 MHz" in done.stdout.decode()
    assert _od_max_mhz(table) == navi31.SCLK_MAX_MHZ and not (run_dir / "clock-restore.json").exists()


def test_sigterm_exits_with_the_clock_table_hanging_and_leaves_the_record(tmp_path: Path) -> None:
    """Issue 31's "Also" for the third actuator: with ``pp_od_clk_voltage`` hanging (a FIFO: open() blocks like a
    stuck SMU message), SIGTERM still hands the fan and the cap back and exits 0, and the ceiling's record stays
    for `gpuwatch restore`."""
    import os
    import time

    hot = hot_simulator(tmp_path, "navi31")
    config, tree, run_dir = hot.config, hot.tree, hot.run_dir
    table = tree / "class/drm/card0/device/pp_od_clk_voltage"
    proc = subprocess.Popen([*GPUWATCH, "run", "-c", str(config)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while not (table.exists() and 0 < _od_max_mhz(table) < navi31.SCLK_MAX_MHZ):
            assert time.monotonic() < deadline and proc.poll() is None, "the clock rung never lowered the ceiling"
            time.sleep(0.1)
        real = table.resolve()
        real.unlink()
        os.mkfifo(real)
        time.sleep(2)  # ticks with the table hanging
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
            raise AssertionError("the daemon did not exit within 30 s of SIGTERM")
    log = err.decode(errors="replace")
    assert proc.returncode == 0, log[-3000:]
    assert "gpuwatch stopped" in log and "Traceback" not in log, log[-3000:]
    assert "od_table" in (run_dir / "clock-restore.json").read_text()  # kept for `gpuwatch restore`
