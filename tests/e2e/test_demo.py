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
from gpuwatch.publish.state import read_state_file
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


def demo_config(tmp_path: Path, time_scale: float = 30.0) -> Path:
    """config/demo.toml as it ships, with its runtime directory and checkpoints under ``tmp_path``."""
    text = (REPO / "config/demo.toml").read_text().replace(".tmp/demo/checkpoints", str(tmp_path / "checkpoints"))
    demo = tomllib.loads(text)
    demo["runtime_dir"] = str(tmp_path / "run")
    demo["http"]["port"] = 0
    demo["simulate"]["time_scale"] = time_scale
    config = tmp_path / "demo.toml"
    config.write_text(tomli_w.dumps(demo))
    return config


def test_run_demo_shows_the_simulated_gpu_and_ctrl_c_stops_it_all(tmp_path: Path) -> None:
    config = demo_config(tmp_path)
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


def _trainer(tmp_path: Path) -> dict[str, Any]:
    doc = read_state_file(tmp_path / "run/state.json")
    return dict(doc["trainers"][0]) if doc and doc["trainers"] else {}


def _reset(tmp_path: Path) -> dict[str, Any]:
    doc = read_state_file(tmp_path / "run/state.json")
    return dict(doc["gpus"][0]["reset"] or {}) if doc and doc["gpus"] else {}


@pytest.mark.timeout(600)
def test_the_demos_gpu_reset_is_recovered_and_the_trainer_resumes_from_its_checkpoint(tmp_path: Path) -> None:
    """What the banner's `simulate-reset` line promises, on the demo's own config (a compositor on the card
    too): the card comes back, its processes leave D state, and the trainer restarts from a checkpoint."""
    config = demo_config(tmp_path, time_scale=10.0)
    text = config.read_text().replace('"--checkpoint-dir"', '"--checkpoint-every", "5", "--checkpoint-dir"')
    config.write_text(text)
    proc = subprocess.Popen([sys.executable, str(REPO / "demo/run_demo.py"), "--config", str(config), "--plain"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        wait_for(lambda: _trainer(tmp_path).get("phase") == "running" and list(
            (tmp_path / "checkpoints").glob("step-*.json")), "the demo trainer's first checkpoint", 180)
        reset = subprocess.run([sys.executable, "-m", "gpuwatch", "simulate-reset", "-c",
                                str(tmp_path / "run/demo.toml")], capture_output=True, text=True, timeout=60, cwd=REPO)
        assert reset.returncode == 0, reset.stderr
        wait_for(lambda: _reset(tmp_path).get("resets_total") == 1, "the reset to be seen", 60)
        wait_for(lambda: dict(_trainer(tmp_path).get("restarts_by_reason") or {}).get("gpu_reset") == 1
                 and _trainer(tmp_path).get("phase") == "running", "the trainer to restart after the reset", 180,
                 detail=lambda: f"{_trainer(tmp_path)}\n{_reset(tmp_path)}")
        assert _reset(tmp_path)["recovering"] is False and _reset(tmp_path)["stuck_pids"] == []
        log_path = _trainer(tmp_path)["log_path"]
        wait_for(lambda: "train_demo: resumed from" in Path(log_path).read_text(), "the resume from a checkpoint", 120)
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=90)
    assert proc.returncode == 0, err
    daemon_log = (tmp_path / "run/daemon.log").read_text()
    assert "answers again" in daemon_log and "may need a reboot" not in daemon_log
