"""The `make run` demo: the demo trainer speaks the heartbeat/pause protocol, and run_demo starts,
shows the simulated GPU and stops everything it started."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import tomllib
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import tomli_w

from gpuwatch.cli.status import render
from gpuwatch.config.file import parse_config
from gpuwatch.daemon.loop import Daemon
from gpuwatch.heartbeat import HEARTBEAT_ENV, PAUSE_ENV, read_heartbeat
from gpuwatch.model import TrainerPhase, TrainerState
from gpuwatch.publish.document import to_document
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


def _run_demo() -> Any:
    sys.path.insert(0, str(REPO / "demo"))
    try:
        import run_demo  # type: ignore[import-not-found]
    finally:
        sys.path.remove(str(REPO / "demo"))
    return run_demo


def test_demo_config_is_valid_once_prepared() -> None:
    run_demo = _run_demo()
    notes: list[str] = []
    data, config = run_demo.prepare(REPO / "config/demo.toml", notes)
    assert config.simulating and config.simulate.cooling_scale < 1
    assert Path(data["runtime_dir"]).is_absolute()
    for trainer in data.get("trainer", []):
        assert trainer["command"][0] == sys.executable
    assert parse_config(data) == config


def test_the_banner_counts_the_simulated_cards() -> None:
    run_demo = _run_demo()
    config = parse_config({"simulate": {"enabled": True}})
    for extra, cards, said in (([], 1, "one simulated RX 5600 XT "),
                               (["--simulate", "2"], 2, "2 simulated RX 5600 XT cards"),
                               (["--simulate"], 1, "one simulated")):
        assert run_demo.simulated_cards(config, extra) == cards
        assert said in run_demo.banner(config, Path("demo.toml"), Path("daemon.log"), [], cards).splitlines()[0]


@pytest.mark.parametrize("cards", [1, 2])
def test_the_screen_fits_80x24_and_the_log_gets_what_is_left(tmp_path: Path, cards: int,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    run_demo = _run_demo()
    monkeypatch.chdir(REPO)  # `make run` runs it from the checkout: paths below it are shown relative
    config = parse_config({"runtime_dir": str(tmp_path), "simulate": {"enabled": True, "gpus": cards},
                           "http": {"enabled": False}})
    daemon = Daemon(config)
    state = daemon.tick()
    trainer = TrainerState(name="demo", phase=TrainerPhase.RUNNING, pid=4242, started_unix=state.snapshot.taken_unix,
                           steps_per_s=4.98, last_step_age_s=0.0, reason="resumed")
    status = render(to_document(replace(state, trainers=(trainer,)), source="daemon"))
    daemon.shutdown()
    top = run_demo.screen_header(config, REPO / ".tmp/demo/demo.toml", cards)
    log = [f"18:04:{n:02d} trainer demo: paused -> running: resumed, a line long enough to wrap in eighty columns"
           for n in range(30)]
    rows = run_demo.screen(top, status, log, 80, 24)
    assert sum(run_demo._height(row, 80) for row in rows) <= 24
    assert rows[:2] == top and all(len(row) <= 80 for row in top)
    assert rows[2:2 + len(status.splitlines())] == status.splitlines()  # header, GPU blocks, trainer line
    shown = rows[3 + len(status.splitlines()):]  # after "-- daemon log --"
    assert shown == log[len(log) - len(shown):]  # the newest lines, as many as fit
    used = sum(run_demo._height(row, 80) for row in rows)
    assert used + run_demo._height(log[-len(shown) - 1], 80) > 24  # not one more line would fit
    assert len(shown) >= (3 if cards == 1 else 0)


def test_run_demo_shows_the_simulated_gpu_and_ctrl_c_stops_it_all(tmp_path: Path) -> None:
    demo = tomllib.loads((REPO / "config/demo.toml").read_text())
    demo["runtime_dir"] = str(tmp_path / "run")
    demo["http"]["port"] = 0
    demo["simulate"]["time_scale"] = 30.0
    config = tmp_path / "demo.toml"
    config.write_text(tomli_w.dumps(demo))
    # Its own session, like a terminal's foreground job: Ctrl-C is a SIGINT to the whole group.
    proc = subprocess.Popen([sys.executable, str(REPO / "demo/run_demo.py"), "--config", str(config), "--plain"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        wait_for((tmp_path / "run/state.json").exists, "the daemon's first tick", 60)
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=90)
    assert proc.returncode == 0, err
    assert "/metrics" in out and "status --watch 1" in out and "one simulated RX 5600 XT" in out
    assert out.splitlines()[-2:] == [
        "  GPU 0000:28:00.0: fan handed back to the firmware (pwm1_enable 2, automatic)",
        f"Daemon log: {tmp_path / 'run/daemon.log'}",
    ]
    assert "gpuwatch demo stopped: the trainer was stopped first, then" in out
    log = (tmp_path / "run/daemon.log").read_text()
    assert "simulating 1 RX 5600 XT" in log and "gpuwatch stopped" in log
    assert "took the fan at " in log and "{'" not in log  # values, not Python dicts
    signals = [line.split(": ", 1)[1] for line in log.splitlines() if "received SIG" in line]
    assert signals == ["received SIGTERM, stopping"]
    assert not (tmp_path / "run/state.json").exists()  # the daemon cleaned up on SIGTERM
