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
from tests.support.daemon_process import signalled_once
from tests.support.stack import GPUWATCH


def _od_max_mhz(table: Path) -> int:
    found = re.search(r"^OD_SCLK:\n0: \d+Mhz\n1: (\d+)Mhz$", table.read_text(), re.MULTILINE)
    return int(found.group(1)) if found else 0


def _limited_then(tmp_path: Path, sig: int) -> tuple[int, bytes, Path, Path]:
    tree, run_dir = tmp_path / "tree", tmp_path / "run"
    config = tmp_path / "gpuwatch.toml"
    config.write_text(f'runtime_dir = "{run_dir}"\ninterval_s = 0.05\n[http]\nenabled = false\n'
                      f'[simulate]\nenabled = true\ntree_dir = "{tree}"\ntime_scale = 50.0\ncooling_scale = 0.4\n'
                      'card = "navi31"\n[simulate.faults]\nfan_stuck_percent = 30\n')
    table = tree / "class/drm/card0/device/pp_od_clk_voltage"
    status, err = signalled_once(config, lambda: 0 < _od_max_mhz(table) < navi31.SCLK_MAX_MHZ,
                                 "the clock rung to lower the ceiling", 60, sig)
    return status, err, config, table


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
