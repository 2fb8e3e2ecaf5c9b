"""Real processes: `gpuwatch run` on a simulated card in a hot case lowers the power cap; SIGTERM and SIGINT
give it back; after SIGKILL (or SIGABRT, systemd's watchdog kill) `gpuwatch restore` does, from the
restore file, exactly as ExecStopPost runs it, and so does `gpuwatch fans-auto` (its first name, which units
installed before the governor still run)."""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

import pytest

from tests.support.daemon_process import signalled_once
from tests.support.stack import GPUWATCH

ORIGINAL_UW = 150_000_000


def _cap_uw(cap: Path) -> int:
    return int(cap.read_text().strip() or 0)


def _capped_then(tmp_path: Path, sig: int) -> tuple[int, bytes, Path, Path]:
    """Run the daemon until it has lowered the cap, then send ``sig``: (exit status, stderr, config, cap)."""
    tree, run_dir = tmp_path / "tree", tmp_path / "run"
    config = tmp_path / "gpuwatch.toml"
    # No trainer: the simulated card runs at full load anyway (load_without_trainer), and in a hot case
    # the fan tops out at 100 % before the junction reaches its limit, which is when the governor acts.
    config.write_text(f'runtime_dir = "{run_dir}"\ninterval_s = 0.05\n[http]\nenabled = false\n'
                      f'[simulate]\nenabled = true\ntree_dir = "{tree}"\ntime_scale = 50.0\ncooling_scale = 0.4\n')
    cap = tree / "class/hwmon/hwmon1/power1_cap"
    status, err = signalled_once(config, lambda: _cap_uw(cap) < ORIGINAL_UW, "the governor to lower the cap", 30, sig)
    return status, err, config, cap


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_stop_signal_gives_the_cap_back(tmp_path: Path, sig: int) -> None:
    status, err, _, cap = _capped_then(tmp_path, sig)
    assert status == 0, err.decode()[-2000:]
    assert _cap_uw(cap) == ORIGINAL_UW
    assert not (tmp_path / "run/power-restore.json").exists()


@pytest.mark.parametrize(("sig", "verb"), [(signal.SIGKILL, "restore"), (signal.SIGABRT, "fans-auto")],
                         ids=["SIGKILL-restore", "SIGABRT-watchdog-fans-auto"])
def test_after_a_kill_the_restore_command_gives_the_cap_back(tmp_path: Path, sig: int, verb: str) -> None:
    status, _, config, cap = _capped_then(tmp_path, sig)
    run_dir = tmp_path / "run"
    assert status == -sig
    assert _cap_uw(cap) < ORIGINAL_UW  # nobody gave it back
    record = json.loads((run_dir / "power-restore.json").read_text())
    assert [r["cap_uw"] for r in record.values()] == [ORIGINAL_UW]
    done = subprocess.run([*GPUWATCH, verb, "-c", str(config), "--sysfs-root", str(tmp_path / "tree")],
                          capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr.decode()
    assert "power cap" in done.stdout.decode()  # it says what it gave back
    assert _cap_uw(cap) == ORIGINAL_UW
    assert not (run_dir / "power-restore.json").exists() and not (run_dir / "fan-restore.json").exists()
