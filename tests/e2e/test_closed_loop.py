"""Closed loop on the simulator, time-scaled: the real daemon, fan controller and (when present) supervisor
act on simulated cards whose temperatures answer the fan writes and the trainer's pauses.

Each test runs the daemon's own tick() against a simulator whose clock runs 100-200x faster than the
wall clock, so minutes of heating pass in seconds; every test is bounded and stops what it started.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from gpuwatch.config.file import parse_config
from gpuwatch.daemon.loop import Daemon
from gpuwatch.model import FanMode, PublishedState, TrainerPhase
from gpuwatch.publish.metrics import GpuwatchCollector
from gpuwatch.resets.recovery import answers
from tests.support.paths import REPO

TICK_SLEEP_S = 0.02


def registry_of(state: PublishedState) -> CollectorRegistry:
    registry = CollectorRegistry()
    registry.register(GpuwatchCollector(lambda: state))
    return registry


def demo_trainer(tmp_path: Path, **overrides: Any) -> dict[str, Any]:
    """The demo trainer, light and quick to pause (cooperatively, through the pause file)."""
    trainer: dict[str, Any] = {
        "name": "demo",
        "command": [sys.executable, str(REPO / "demo/train_demo.py"), "--step-s", "0.05", "--backend", "python"],
        "cwd": str(tmp_path),
        "debounce_s": 0.0,
        "min_pause_s": 0.0,  # the card cools in time-scaled seconds; the supervisor counts real ones
        "hysteresis_c": 20.0,
        "grace_s": 5.0,
    }
    if os.geteuid() == 0:
        trainer["user"] = "root"
    return trainer | overrides


def phase(state: PublishedState) -> TrainerPhase | None:
    return state.trainers[0].phase if state.trainers else None


def make_daemon(tmp_path: Path, simulate: dict[str, Any], **extra: Any) -> Daemon:
    data: dict[str, Any] = {
        "runtime_dir": str(tmp_path / "run"),
        "interval_s": 0.05,
        "http": {"enabled": False},
        "simulate": {"enabled": True, "tree_dir": str(tmp_path / "tree"), "time_scale": 200.0} | simulate,
    }
    return Daemon(parse_config(data | extra))


def run_until(daemon: Daemon, sim_s: float, wall_limit_s: float = 15.0,
              stop: Callable[[PublishedState], bool] | None = None) -> list[PublishedState]:
    """Tick until ``sim_s`` simulated seconds passed (or ``stop`` says so); bounded in wall time."""
    states: list[PublishedState] = []
    assert daemon.parts.simulator is not None
    deadline = time.monotonic() + wall_limit_s
    while daemon.parts.simulator.sim_time_s < sim_s and time.monotonic() < deadline:
        states.append(daemon.tick())
        if stop and stop(states[-1]):
            break
        time.sleep(TICK_SLEEP_S)
    return states


def junction(state: PublishedState) -> float | None:
    temp = state.snapshot.gpus[0].temp("junction")
    return None if temp is None else temp.temp_c


def hwmon_file(daemon: Daemon, name: str) -> str:
    assert daemon.parts.simulator is not None
    return (daemon.parts.simulator.root / daemon.parts.simulator.cards[0].hwmon_dir / name).read_text().strip()


def test_default_curve_and_healthy_fan_settle_below_the_pause_limit(tmp_path: Path) -> None:
    daemon = make_daemon(tmp_path, {"time_scale": 300.0}, trainer=[demo_trainer(tmp_path)])
    try:
        run_until(daemon, sim_s=300, stop=lambda s: phase(s) == TrainerPhase.RUNNING)
        assert daemon.parts.simulator is not None
        daemon.parts.simulator.sim_time_s = 0.0  # heat-up starts when the trainer does
        states = run_until(daemon, sim_s=1500)
        assert daemon.parts.simulator is not None and daemon.parts.simulator.sim_time_s >= 1500, "too slow a machine"
        late = [junction(s) for s in states[-len(states) // 4:]]  # the last ~6 simulated minutes
        assert all(j is not None and 75 <= j <= 92 for j in late), late
        assert max(j for s in states if (j := junction(s)) is not None) < 100
        fan = states[-1].fans[0]
        assert fan.mode == FanMode.CURVE and fan.target_ratio is not None
        # The curve, not the firmware's 33 %, is driving the fan: well above the 50 % floor, RPM to match.
        assert hwmon_file(daemon, "pwm1_enable") == "1"
        assert int(hwmon_file(daemon, "pwm1")) > 0.6 * 255
        assert states[-1].snapshot.gpus[0].fan_rpm > 0.6 * 3200
        trainer = states[-1].trainers[0]
        assert trainer.phase == TrainerPhase.RUNNING and trainer.pauses_total == 0
        assert daemon.parts.simulator.cards[0].load_ratio == 1.0
        # Energy of the run, from the power integrated tick by tick (Navi 10 has no usable accumulator).
        gpu = states[-1].snapshot.gpus[0]
        assert gpu.energy_source == "integrated" and gpu.energy_joules is not None and gpu.energy_joules > 0
        assert trainer.run_energy_j is not None and 0 < trainer.run_energy_j <= gpu.energy_joules
        assert trainer.steps_per_kj is not None and trainer.steps_per_kj > 0
    finally:
        daemon.shutdown()
    assert hwmon_file(daemon, "pwm1_enable") == "2"  # given back to the firmware on exit


def test_broken_sensor_sends_the_fan_to_full_speed(tmp_path: Path) -> None:
    daemon = make_daemon(tmp_path, {"faults": {"sensor_garbage": True}, "time_scale": 20.0})
    try:
        states = run_until(daemon, sim_s=60, stop=lambda s: bool(s.fans) and s.fans[0].mode == FanMode.FAILSAFE)
        assert states[-1].fans[0].mode == FanMode.FAILSAFE
        assert junction(states[-1]) is None
        assert any(e.sensor == "temp2_input" for e in states[-1].snapshot.gpus[0].errors)
        run_until(daemon, sim_s=daemon.parts.simulator.sim_time_s + 20)  # type: ignore[union-attr]
        assert hwmon_file(daemon, "pwm1") == "255"
        assert int(hwmon_file(daemon, "fan1_input")) > 3000
    finally:
        daemon.shutdown()


def test_firmware_taking_the_fan_back_is_reasserted(tmp_path: Path) -> None:
    daemon = make_daemon(tmp_path, {"faults": {"firmware_reset_every_s": 100}, "time_scale": 200.0})
    try:
        states = run_until(daemon, sim_s=450)
        assert states[-1].fans[0].mode_resets_total >= 2
        daemon.tick()
        assert hwmon_file(daemon, "pwm1_enable") == "1"
    finally:
        daemon.shutdown()


def test_card_falling_off_the_bus_is_reported_and_the_loop_goes_on(tmp_path: Path) -> None:
    daemon = make_daemon(tmp_path, {"gpus": 2, "faults": {"disappear_after_s": 30, "cards": [1]},
                                    "time_scale": 100.0})
    try:
        states = run_until(daemon, sim_s=120)
        last = states[-1]
        assert [g.up for g in last.snapshot.gpus] == [True, False]
        assert last.daemon is not None and last.daemon.failures == ()
        gone = [f for f in last.fans if f.gpu_id == last.snapshot.gpus[1].gpu_id]
        assert gone and gone[0].mode == FanMode.FAILSAFE
    finally:
        daemon.shutdown()


def test_fan_stuck_at_30_percent_pauses_the_trainer_before_crit_and_resumes_it(tmp_path: Path) -> None:
    # The pause alone: with the power governor (the default) this card holds its limit without one
    # (tests/e2e/test_power_loop.py).
    daemon = make_daemon(tmp_path, {"time_scale": 100.0, "faults": {"fan_stuck_percent": 30}},
                         trainer=[demo_trainer(tmp_path)], power={"mode": "off"})
    try:
        states = run_until(daemon, sim_s=3000, wall_limit_s=20,
                           stop=lambda s: bool(s.trainers) and s.trainers[0].resumes_total >= 1
                           and s.trainers[0].phase == TrainerPhase.RUNNING)
        trainer = states[-1].trainers[0]
        assert trainer.pauses_total >= 1 and trainer.resumes_total >= 1, trainer
        assert trainer.phase == TrainerPhase.RUNNING
        temps = [j for s in states if (j := junction(s)) is not None]
        assert max(temps) >= 99  # it really got hot: the pause came from the limit...
        assert max(temps) < 110  # ...and before the card's crit
        paused = [s for s in states if phase(s) == TrainerPhase.PAUSED]
        assert paused
        assert min(junction(s) or 200 for s in paused) < 90  # it cooled down while paused
        assert trainer.restarts_total == 0  # paused, never killed
    finally:
        daemon.shutdown()


def test_broken_sensor_fan_to_full_and_trainer_off_the_gpu(tmp_path: Path) -> None:
    daemon = make_daemon(tmp_path, {"time_scale": 50.0}, trainer=[demo_trainer(tmp_path)])
    try:
        run_until(daemon, sim_s=600, stop=lambda s: phase(s) == TrainerPhase.RUNNING)
        assert daemon.parts.simulator is not None
        daemon.parts.simulator.faults = replace(daemon.parts.simulator.faults, sensor_garbage=True)
        start = daemon.parts.simulator.sim_time_s
        states = run_until(daemon, sim_s=start + 300, wall_limit_s=15,
                           stop=lambda s: phase(s) not in (TrainerPhase.RUNNING, TrainerPhase.PAUSING)
                           and bool(s.fans) and s.fans[0].mode == FanMode.FAILSAFE)
        assert states[-1].fans[0].mode == FanMode.FAILSAFE
        # Paused, or stopped as an emergency: either way no longer loading the GPU.
        assert phase(states[-1]) not in (TrainerPhase.RUNNING, TrainerPhase.PAUSING), states[-1].trainers
        run_until(daemon, sim_s=daemon.parts.simulator.sim_time_s + 20)
        assert hwmon_file(daemon, "pwm1") == "255"
        assert daemon.parts.simulator.cards[0].load_ratio == 0.0
    finally:
        daemon.shutdown()


def test_without_fan1_input_the_rpm_comes_from_gpu_metrics_and_a_stall_is_still_detected(tmp_path: Path) -> None:
    # The simulated card has no hwmon tach, like RDNA4 before Linux 6.15: its RPM is only in gpu_metrics.
    daemon = make_daemon(tmp_path, {"fan1_input": False, "time_scale": 100.0})
    sim = daemon.parts.simulator
    assert sim is not None
    try:
        states = run_until(daemon, sim_s=60)
        assert not (sim.root / sim.cards[0].hwmon_dir / "fan1_input").exists()
        gpu, fan = states[-1].snapshot.gpus[0], states[-1].fans[0]
        assert gpu.fan_rpm is not None and gpu.fan_rpm > 0.4 * 3200
        assert dict(gpu.sources)["fan_rpm"] == "gpu_metrics"
        assert fan.mode == FanMode.CURVE and fan.rpm == gpu.fan_rpm and not fan.stalled
        sim.faults = replace(sim.faults, fan_stuck_ratio=0.0)  # the fan stops while driven
        states = run_until(daemon, sim_s=sim.sim_time_s + 120, stop=lambda s: s.fans[0].stalled)
        fan = states[-1].fans[0]
        assert fan.stalled and fan.stalls_total == 1 and fan.rpm == 0
        assert (fan.applied_pwm or 0) > 0 and fan.message is not None and "stalled" in fan.message
        assert states[-1].snapshot.gpus[0].fan_rpm == 0
    finally:
        daemon.shutdown()


def checkpointing_trainer(tmp_path: Path) -> dict[str, Any]:
    """The demo trainer saving its step every 5 steps; a restart resumes from the newest checkpoint."""
    demo = [sys.executable, str(REPO / "demo/train_demo.py"), "--step-s", "0.05", "--backend", "python",
            "--checkpoint-dir", str(tmp_path / "ckpt"), "--checkpoint-every", "5"]
    return demo_trainer(tmp_path, command=demo, restart_command=demo + ["--resume", "{last_checkpoint}"],
                        checkpoint_glob=str(tmp_path / "ckpt" / "step-*.json"))


@pytest.mark.parametrize("stuck_s", [None, 40.0])
def test_gpu_reset_restarts_the_trainer_from_its_checkpoint_within_a_few_ticks(
        tmp_path: Path, stuck_s: float | None) -> None:
    """A simulated reset under the supervised trainer (no `gpus`: judged on what its tree uses): the run ends,
    the GPU comes back, the trainer resumes from its checkpoint, counted as gpu_reset -- within a few ticks,
    not after hang_timeout_s. With a leftover stuck in D state, the restart waits until it is gone."""
    faults = {"gpu_reset_outage_s": 5.0} | ({"gpu_reset_stuck_s": stuck_s} if stuck_s else {})
    daemon = make_daemon(tmp_path, {"time_scale": 20.0, "faults": faults}, trainer=[checkpointing_trainer(tmp_path)])
    sim = daemon.parts.simulator
    assert sim is not None
    try:
        states = run_until(daemon, sim_s=10_000, wall_limit_s=20, stop=lambda s: bool(
            s.trainers and s.trainers[0].gpu_use and s.trainers[0].gpu_use[0].engine_busy_ratio is not None
            and list((tmp_path / "ckpt").glob("step-*.json"))))
        before = states[-1].trainers[0]
        assert before.phase == TrainerPhase.RUNNING and before.gpus_used == ("0000:28:00.0",)
        (use,) = before.gpu_use
        assert use.kfd_vram_bytes == 4 * 2**30 and use.engine_busy_ratio is not None
        sim.inject_reset()
        after = run_until(daemon, sim_s=10_000, wall_limit_s=30, stop=lambda s: dict(
            s.trainers[0].restarts_by_reason).get("gpu_reset") == 1)
        trainer, reset = after[-1].trainers[0], after[-1].snapshot.resets[0]
        assert dict(trainer.restarts_by_reason) == {"gpu_reset": 1} and trainer.phase == TrainerPhase.RUNNING
        assert reset.resets_total == 1 and reset.last_source == "devcoredump" and reset.dump_path
        assert Path(reset.dump_path).read_text().startswith("**** AMDGPU Device Coredump ****")
        assert "VRAM lost" in (reset.last_summary or "")
        exposition = generate_latest(registry_of(after[-1])).decode()  # what Prometheus scrapes (GpuReset fires on it)
        assert 'gpuwatch_gpu_resets_total{gpu="0000:28:00.0"} 1.0' in exposition
        assert 'gpuwatch_trainer_restarts_by_reason_total{reason="gpu_reset",trainer="demo"} 1.0' in exposition
        first_stop = next(i for i, s in enumerate(after) if phase(s) != TrainerPhase.RUNNING)
        assert first_stop <= 1, "the run ended on the tick the reset was seen"
        # After the old run is gone and the card answers again (both take their own time on a loaded
        # machine), the restart waits only for answer_ticks (3) more ticks.
        gone = next(i for i, s in enumerate(after) if phase(s) == TrainerPhase.BACKOFF)
        back = next(i for i, s in enumerate(after) if i >= gone and answers(s.snapshot.gpus[0])
                    and not s.snapshot.resets[0].stuck_pids)
        assert len(after) - 1 - back <= 3, [(phase(s), s.trainers[0].reason) for s in after]
        if stuck_s is not None:
            waited = [s.trainers[0].reason or "" for s in after if phase(s) == TrainerPhase.BACKOFF]
            assert any("in D state since its reset" in reason for reason in waited), waited
            assert any(s.snapshot.resets[0].stuck_pids for s in after)
        resumed = run_until(daemon, sim_s=10_000, wall_limit_s=10,
                            stop=lambda s: s.trainers[0].steps_total is not None)
        assert (resumed[-1].trainers[0].steps_total or 0) >= 5, "resumed from the checkpoint, not from step 0"
        log_text = Path(trainer.log_path or "").read_text()
        assert "train_demo: resumed from" in log_text
    finally:
        daemon.shutdown()
