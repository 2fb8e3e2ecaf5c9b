"""The `make run` demo: the demo trainer speaks the heartbeat/pause protocol, and run_demo starts,
shows the simulated GPU and stops everything it started."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import tomli_w

from gpuwatch.config import parse_config
from gpuwatch.heartbeat import HEARTBEAT_ENV, PAUSE_ENV, read_heartbeat
from tests.support.paths import REPO
from tests.support.waiting import wait_for


def test_demo_trainer_beats_and_holds_while_paused(tmp_path: Path) -> None:
    heartbeat, pause = tmp_path / "hb.json", tmp_path / "pause"
    env = os.environ | {HEARTBEAT_ENV: str(heartbeat), PAUSE_ENV: str(pause)}
    proc = subprocess.Popen([sys.executable, str(REPO / "demo/train_demo.py"), "--step-s", "0.01",
                             "--backend", "python"], env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert wait_for(lambda: (hb := read_heartbeat(heartbeat)) is not None and hb.steps_total >= 3)
        pause.touch()
        assert wait_for(lambda: (hb := read_heartbeat(heartbeat)) is not None and hb.paused)
        held = read_heartbeat(heartbeat).steps_total  # type: ignore[union-attr]
        time.sleep(0.3)
        assert read_heartbeat(heartbeat).steps_total == held  # type: ignore[union-attr]
        pause.unlink()
        assert wait_for(lambda: (hb := read_heartbeat(heartbeat)) is not None and hb.steps_total > held)
        assert read_heartbeat(heartbeat).pid == proc.pid  # type: ignore[union-attr]
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=10)
    assert proc.returncode == 0
    assert "paused by gpuwatch" in out and "resumed" in out


def test_demo_config_is_valid_once_prepared() -> None:
    sys.path.insert(0, str(REPO / "demo"))
    try:
        import run_demo  # type: ignore[import-not-found]
    finally:
        sys.path.remove(str(REPO / "demo"))
    notes: list[str] = []
    data, config = run_demo.prepare(REPO / "config/demo.toml", notes)
    assert config.simulating and config.simulate.cooling_scale < 1
    assert Path(data["runtime_dir"]).is_absolute()
    for trainer in data.get("trainer", []):
        assert trainer["command"][0] == sys.executable
    assert parse_config(data) == config


def test_run_demo_shows_the_simulated_gpu_and_stops(tmp_path: Path) -> None:
    demo = tomllib.loads((REPO / "config/demo.toml").read_text())
    demo["runtime_dir"] = str(tmp_path / "run")
    demo["http"]["port"] = 0
    demo["simulate"]["time_scale"] = 30.0
    config = tmp_path / "demo.toml"
    config.write_text(tomli_w.dumps(demo))
    result = subprocess.run([sys.executable, str(REPO / "demo/run_demo.py"), "--config", str(config),
                             "--seconds", "4", "--plain"], capture_output=True, text=True, timeout=90)
    assert result.returncode == 0, result.stderr
    assert "/metrics" in result.stdout and "status --watch 1" in result.stdout
    assert "Navi 10" in result.stdout and "junction" in result.stdout
    log = (tmp_path / "run/daemon.log").read_text()
    assert "simulating 1 RX 5600 XT" in log and "gpuwatch stopped" in log
    assert not (tmp_path / "run/state.json").exists()  # the daemon cleaned up on SIGTERM
    restored = json.dumps(sorted(p.name for p in (tmp_path / "run").iterdir()))
    assert "demo.toml" in restored
