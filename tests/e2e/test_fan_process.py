"""Real processes: the daemon takes the fan, and gives it back on SIGTERM; after SIGKILL `fans-auto` does."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from gpuwatch.sim.tree import FakeSysfsTree
from tests.support.cli import GPUWATCH, gpuwatch
from tests.support.trees import capture
from tests.support.waiting import wait_for

CLI = [sys.executable, "-c", "import sys; from gpuwatch.cli import main; sys.exit(main())"]


def _setup(tmp_path: Path, name: str) -> tuple[Path, Path, Path, Path]:
    tree = FakeSysfsTree(tmp_path / "sys")
    card = tree.add_capture(capture(name))
    assert card.hwmon_dir
    run_dir = tmp_path / "run"
    config = tmp_path / "gpuwatch.toml"
    config.write_text(f'runtime_dir = "{run_dir}"\ninterval_s = 0.05\n\n[http]\nenabled = false\n')
    return tree.root, config, tree.root / card.hwmon_dir / "pwm1_enable", run_dir


def _start(root: Path, config: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen([*CLI, "run", "-c", str(config), "--sysfs-root", str(root)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def _stop(proc: subprocess.Popen[bytes], sig: int) -> bytes:
    try:
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=10)
        return err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_sigterm_restores_pwm1_enable(tmp_path: Path) -> None:
    root, config, enable, run_dir = _setup(tmp_path, "navi21-rx6900xt-sapphire-nitro")
    assert enable.read_text().strip() == "2"
    proc = _start(root, config)
    try:
        wait_for(lambda: enable.read_text().strip() == "1" and (run_dir / "state.json").exists(),
                 "manual mode and a state file")
    finally:
        err = _stop(proc, signal.SIGTERM)
    assert proc.returncode == 0, err.decode()
    assert enable.read_text().strip() == "2"
    assert not (run_dir / "fan-restore.json").exists()


def test_sigkill_then_fans_auto_restores_pwm1_enable(tmp_path: Path) -> None:
    root, config, enable, run_dir = _setup(tmp_path, "navi21-rx6900xt-sapphire-nitro")
    proc = _start(root, config)
    try:
        wait_for(lambda: enable.read_text().strip() == "1", "manual fan mode")
    finally:
        _stop(proc, signal.SIGKILL)
    assert enable.read_text().strip() == "1"  # nobody gave it back
    record = json.loads((run_dir / "fan-restore.json").read_text())
    assert list(record.values())[0]["pwm1_enable"] == 2
    done = subprocess.run([*CLI, "fans-auto", "-c", str(config), "--sysfs-root", str(root)],
                          capture_output=True, timeout=30)
    assert done.returncode == 0, done.stderr.decode()
    assert enable.read_text().strip() == "2"
    assert not (run_dir / "fan-restore.json").exists()


def test_fans_auto_without_restore_file_sets_auto_and_never_zero(tmp_path: Path) -> None:
    root, config, enable, run_dir = _setup(tmp_path, "navi21-rx6900xt-sapphire-nitro")
    tree = FakeSysfsTree(root)
    slot = tree.add_capture(capture("navi31-rx7900xtx-sapphire-nitro"), card="card1", pci_slot="0000:30:00.0")
    curve = root / slot.device_dir / "gpu_od/fan_ctrl/fan_curve"
    enable.write_text("1\n")
    done = subprocess.run([*CLI, "fans-auto", "-c", str(config), "--sysfs-root", str(root)],
                          capture_output=True, timeout=30, env={**os.environ})
    assert done.returncode == 0, done.stderr.decode()
    assert enable.read_text().strip() == "2"
    assert curve.read_text() == "c\n"  # "r" then "c" (a plain file keeps only the last write)


def test_fans_auto_after_a_sigkill_of_a_simulating_daemon_uses_its_tree(tmp_path: Path) -> None:
    """`fans-auto -c demo.toml` after the demo was killed: the simulated tree, as the daemon had it, not /sys."""
    config = tmp_path / "sim.toml"
    config.write_text(f'runtime_dir = "{tmp_path / "run"}"\ninterval_s = 0.05\n[http]\nenabled = false\n'
                      "[simulate]\nenabled = true\n")
    tree = tmp_path / "run/simulated-sysfs"
    proc = subprocess.Popen([GPUWATCH, "run", "-c", str(config)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        enables = wait_for(lambda: list(tree.glob("class/drm/card0/device/hwmon/hwmon*/pwm1_enable")), "the tree")
        wait_for(lambda: enables[0].read_text().strip() == "1", "manual fan mode")
    finally:
        _stop(proc, signal.SIGKILL)
    done = gpuwatch("fans-auto", "-c", str(config))
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout == "0000:28:00.0: fan handed back to the firmware (pwm1_enable 2, automatic)\n"
    assert enables[0].read_text().strip() == "2"
    again = gpuwatch("fans-auto", "-c", str(config))
    assert again.returncode == 0 and again.stdout.startswith("nothing to hand back: no restore file (")
