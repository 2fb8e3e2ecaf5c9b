"""Step heartbeat and cooperative pause with a real optimizer loop."""

from __future__ import annotations

import threading

import pytest

torch = pytest.importorskip("torch")

from gpuwatch.heartbeat import read_heartbeat  # noqa: E402
from gpuwatch.train.pause.hooks import StepHeartbeat, install_step_hooks  # noqa: E402
from tests.support.waiting import wait_for  # noqa: E402


def _train(steps: int, optimizers: int = 1) -> None:
    model = torch.nn.Linear(4, 1)
    opts = [torch.optim.SGD(model.parameters(), lr=0.01) for _ in range(optimizers)]
    data = torch.randn(8, 4)
    for _ in range(steps):
        for opt in opts:
            opt.zero_grad()
            model(data).square().mean().backward()
            opt.step()


def test_heartbeat_counts_steps_and_rate(tmp_path):
    beat_file = tmp_path / "hb.json"
    hooks = StepHeartbeat(beat_file, None, interval_s=0.0).install()
    try:
        _train(1)
        first = read_heartbeat(beat_file)
        assert first is not None and first.steps_total == 1 and first.steps_per_s is None
        _train(4)
    finally:
        hooks.remove()
    beat = read_heartbeat(beat_file)
    assert beat is not None
    assert beat.steps_total == 5 and not beat.paused
    assert beat.steps_per_s is not None and beat.steps_per_s > 0
    assert beat.last_step_unix is not None and beat.last_step_unix <= beat.updated_unix
    _train(2)  # removed: no more writes
    assert read_heartbeat(beat_file).steps_total == 5


def test_heartbeat_is_throttled_but_first_step_always_written(tmp_path):
    beat_file = tmp_path / "hb.json"
    hooks = StepHeartbeat(beat_file, None, interval_s=3600.0).install()
    try:
        _train(3)
    finally:
        hooks.remove()
    assert read_heartbeat(beat_file).steps_total == 1
    assert hooks.steps == 3


def test_every_optimizer_step_counts(tmp_path):
    hooks = StepHeartbeat(tmp_path / "hb.json", None, interval_s=0.0).install()
    try:
        _train(3, optimizers=2)
    finally:
        hooks.remove()
    assert read_heartbeat(tmp_path / "hb.json").steps_total == 6


def test_cooperative_pause_blocks_at_step_boundary(tmp_path):
    beat_file, pause_file = tmp_path / "hb.json", tmp_path / "pause"
    hooks = StepHeartbeat(beat_file, pause_file, interval_s=0.0, paused_every_s=0.05, poll_s=0.01).install()
    try:
        _train(2)
        pause_file.touch()
        worker = threading.Thread(target=_train, args=(3,))
        worker.start()
        wait_for(lambda: (b := read_heartbeat(beat_file)) is not None and b.paused, "a paused heartbeat",
                 interval_s=0.01)
        held = read_heartbeat(beat_file)
        assert held.steps_total == 2
        first_update = held.updated_unix
        # still alive
        wait_for(lambda: read_heartbeat(beat_file).updated_unix > first_update, "a newer heartbeat", interval_s=0.01)
        assert read_heartbeat(beat_file).paused and hooks.steps == 2 and worker.is_alive()
        pause_file.unlink()
        worker.join(timeout=10)
        assert not worker.is_alive()
    finally:
        hooks.remove()
    beat = read_heartbeat(beat_file)
    assert beat.steps_total == 5 and not beat.paused


def test_install_reads_supervisor_environment(tmp_path):
    env = {"GPUWATCH_HEARTBEAT_FILE": str(tmp_path / "hb.json"), "GPUWATCH_PAUSE_FILE": str(tmp_path / "p")}
    hooks = install_step_hooks(environ=env)
    assert hooks is not None
    try:
        assert hooks.interval_s == 1.0 and str(hooks.pause_file) == env["GPUWATCH_PAUSE_FILE"]
        _train(1)
    finally:
        hooks.remove()
    assert read_heartbeat(tmp_path / "hb.json").steps_total == 1
    assert install_step_hooks(environ={}) is None
    # RANK in the environment decides nothing (DataLoader workers inherit it): the role is read at the
    # first step, and without torch.distributed this is a single process writing the heartbeat file.
    other_rank = install_step_hooks(environ={**env, "RANK": "1"})
    assert other_rank is not None
    try:
        _train(1)
    finally:
        other_rank.remove()
    assert other_rank.role == "single" and read_heartbeat(tmp_path / "hb.json").steps_total == 1


def test_missing_heartbeat_directory_does_not_break_training(tmp_path):
    hooks = StepHeartbeat(tmp_path / "gone" / "hb.json", None, interval_s=0.0).install()
    try:
        _train(2)
    finally:
        hooks.remove()
    assert hooks.steps == 2


def test_steps_between_heartbeat_writes_touch_no_file(tmp_path):
    # Why the hooks are cheap (benchmarks/heartbeat_hook_cost.py measures it; no timing here): inside
    # the write interval a step only counts, and the pause gate finds no pause file.
    beat_file = tmp_path / "hb.json"
    hooks = StepHeartbeat(beat_file, tmp_path / "no-pause", interval_s=3600.0).install()
    try:
        _train(1)
        first = beat_file.stat()
        _train(50)
    finally:
        hooks.remove()
    assert hooks.steps == 51
    assert beat_file.stat().st_mtime_ns == first.st_mtime_ns and read_heartbeat(beat_file).steps_total == 1


def test_the_ordinary_step_only_counts(tmp_path, monkeypatch):
    # Issue 38: the per-step cost at small steps. Between ticks (TICK_S apart; an hour here) a step
    # neither stats the pause file nor reads the wall clock: it counts and reads one clock.
    from gpuwatch.train.pause import hooks as hooks_module

    looks = []
    real = hooks_module.pause_requested
    monkeypatch.setattr(hooks_module, "pause_requested", lambda path: looks.append(path) or real(path))
    monkeypatch.setattr(hooks_module, "TICK_S", 3600.0)
    hooks = StepHeartbeat(tmp_path / "hb.json", tmp_path / "no-pause", interval_s=3600.0).install()
    try:
        _train(50)
    finally:
        hooks.remove()
    assert hooks.steps == 50 and len(looks) == 2  # the first step and the one after the first tick; none after
