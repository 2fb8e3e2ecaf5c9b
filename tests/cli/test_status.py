"""`gpuwatch status` / `sensors` as a user runs them: real processes against fake trees."""

from __future__ import annotations

import json
import os
import pty
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpuwatch.sim.tree import FakeSysfsTree
from tests.support.trees import capture
from tests.support.waiting import wait_for


@pytest.fixture
def setup(tmp_path: Path) -> tuple[FakeSysfsTree, Path]:
    tree = FakeSysfsTree(tmp_path / "sys")
    tree.add_capture(capture("navi10-rx5700xt-sapphire"))
    tree.add_capture(capture("navi31-rx7900xtx-sapphire-nitro"))
    config = tmp_path / "gpuwatch.toml"
    config.write_text(
        f'sysfs_root = "{tree.root}"\nruntime_dir = "{tmp_path / "run"}"\ninterval_s = 0.2\n'
        "[http]\nenabled = false\n[fan]\nmode = \"monitor-only\"\n"
    )
    return tree, config


def gpuwatch(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gpuwatch", *args], capture_output=True, text=True, timeout=timeout)


def test_status_json_without_daemon_reads_sysfs(setup: tuple[FakeSysfsTree, Path]) -> None:
    _, config = setup
    result = gpuwatch("status", "--json", "-c", str(config))
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["schema"] == 1 and doc["source"] == "sysfs" and doc["daemon"] is None
    navi10 = next(g for g in doc["gpus"] if g["gpu_id"] == "0000:28:00.0")
    assert navi10["temperatures"]["junction"] == {
        "temp_c": 58.0, "crit_c": 108.0, "crit_hyst_c": None, "emergency_c": 113.0, "limit_c": 98.0,
    }
    assert navi10["power_w"] == 29.0 and navi10["power_cap_w"] == 220.0 and navi10["fan_rpm"] == 29
    assert navi10["pwm"] == 65 and navi10["pwm_enable"] == 2 and navi10["vram_total_bytes"] is None
    text = gpuwatch("status", "-c", str(config)).stdout
    assert "daemon is not running" in text and "[0000:28:00.0] card1" in text and "\033[" not in text
    assert "vram   N/A / N/A" in text


def test_status_exit_1_when_over_limit(setup: tuple[FakeSysfsTree, Path]) -> None:
    tree, config = setup
    hwmon = next((tree.root / "class/drm/card1/device/hwmon").iterdir())
    (hwmon / "temp2_input").write_text("99000\n")  # junction limit = crit 108 - 10
    result = gpuwatch("status", "--json", "-c", str(config))
    assert result.returncode == 1
    assert next(g for g in json.loads(result.stdout)["gpus"] if g["card"] == "card1")["over_limit"] == ["junction"]


def test_status_reads_running_daemon_state(setup: tuple[FakeSysfsTree, Path], tmp_path: Path) -> None:
    _, config = setup
    daemon = subprocess.Popen([sys.executable, "-m", "gpuwatch", "run", "-c", str(config)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        state = tmp_path / "run/state.json"
        def published() -> bool:
            assert daemon.poll() is None, daemon.stderr.read() if daemon.stderr else ""
            return state.exists()

        wait_for(published, "the daemon's state file", 20)
        doc = json.loads(gpuwatch("status", "--json", "-c", str(config)).stdout)
        assert doc["source"] == "daemon" and doc["daemon"]["pid"] == daemon.pid
        assert len(doc["gpus"]) == 2
        text = gpuwatch("status", "-c", str(config)).stdout
        assert f"daemon running (pid {daemon.pid}" in text
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=20)
    assert not state.exists()
    assert "daemon is not running" in gpuwatch("status", "-c", str(config)).stdout


def test_colours_only_on_a_tty(setup: tuple[FakeSysfsTree, Path]) -> None:
    _, config = setup
    assert "\033[31m" not in gpuwatch("status", "-c", str(config)).stdout
    assert "\033[32m" in gpuwatch("status", "--color", "always", "-c", str(config)).stdout
    leader, follower = pty.openpty()
    env = {k: v for k, v in os.environ.items() if k != "NO_COLOR"}
    proc = subprocess.Popen([sys.executable, "-m", "gpuwatch", "status", "-c", str(config)],
                            stdout=follower, stderr=subprocess.DEVNULL, env=env)
    os.close(follower)
    output = b""
    while True:
        try:
            chunk = os.read(leader, 4096)
        except OSError:
            break
        if not chunk:
            break
        output += chunk
    proc.wait(timeout=30)
    os.close(leader)
    assert b"\033[32m" in output


def test_watch_refreshes_until_interrupted(setup: tuple[FakeSysfsTree, Path]) -> None:
    _, config = setup
    proc = subprocess.Popen([sys.executable, "-m", "gpuwatch", "status", "--watch", "0.1", "-c", str(config)],
                            stdout=subprocess.PIPE, text=True)
    time.sleep(2.0)
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=20)
    assert out.count("[0000:28:00.0]") >= 2


def test_sensors_json_lists_unsupported_cards(setup: tuple[FakeSysfsTree, Path]) -> None:
    tree, config = setup
    tree.add_capture(capture("radeon-driver-pitcairn-hd7870"), card="card5", pci_slot="0000:44:00.0")
    doc = json.loads(gpuwatch("sensors", "--json", "-c", str(config)).stdout)
    assert doc["unsupported"] == [{"card": "card5", "driver": "radeon", "gpu_id": "0000:44:00.0"}]
    assert "not supported, not read" in gpuwatch("sensors", "-c", str(config)).stdout
