"""`gpuwatch restore` with a config file that does not load (issue 49 item 8): ExecStopPost after a rejected
reload falls back to the defaults, but still in the ``runtime_dir`` that file sets, where the daemon kept its
records (config.quick.broken_file_runtime_dir, read tolerantly)."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import pytest

from gpuwatch.config.quick import broken_file_runtime_dir
from gpuwatch.sim import navi10
from tests.support.daemon_process import hot_simulator, signalled_once
from tests.support.stack import GPUWATCH


@pytest.mark.parametrize(("text", "found"), [
    ('runtime_dir = "/srv/gw"\ninterval_s = "fast"\n', "/srv/gw"),  # valid TOML, invalid config
    ("runtime_dir = '/srv/gw'  # ours\ninterval_s = = 1\n", "/srv/gw"),  # TOML that does not parse
    ('interval_s = = 1\n[simulate]\nruntime_dir = "/srv/gw"\n', None),  # under a table: not the top-level key
    ('runtime_dir = "relative"\n', None),
    ("interval_s = 1\n", None),
    ("\udcff", None),
])
def test_the_runtime_dir_of_a_broken_file(text: str, found: str | None) -> None:
    assert broken_file_runtime_dir(text.encode(errors="surrogateescape")) == found


def test_restore_with_a_broken_config_finds_the_runtime_dir_it_sets(tmp_path: Path) -> None:
    hot = hot_simulator(tmp_path)
    config, tree, run_dir = hot.config, hot.tree, hot.run_dir
    cap = tree / "class/hwmon/hwmon1/power1_cap"
    status, _ = signalled_once(config, lambda: int(cap.read_text()) < navi10.POWER_CAP_UW,
                               "the governor to lower the cap", 60, signal.SIGKILL)
    assert status == -signal.SIGKILL and (run_dir / "power-restore.json").exists()
    config.write_text(config.read_text().replace("interval_s = 0.05", "interval_s = 'fast'"))  # a rejected reload
    done = subprocess.run([*GPUWATCH, "restore", "-c", str(config), "--sysfs-root", str(tree)], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert f"using the default settings in its runtime_dir {run_dir}" in done.stderr
    assert int(cap.read_text()) == navi10.POWER_CAP_UW and not (run_dir / "power-restore.json").exists()
