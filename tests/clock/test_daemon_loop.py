"""Closed loop on the simulated Navi 31-like card (cap floor 90 %) with the real daemon: fan -> cap -> clock ->
pause. The fan controller, the governor, the clock rung and the supervisor with the demo trainer as a real
child; the test drives the simulator's clock (a fixed 5 s per tick), as tests/e2e/test_power_loop.py does.
The cap reaches its floor, the clock rung takes over from the clock the power-limited card runs at (issue 49), the
trainer is never paused, and the shutdown puts the overdrive table back."""

from __future__ import annotations

from pathlib import Path

from gpuwatch.model import ClockMode, PowerMode, TrainerPhase
from gpuwatch.sim import navi31
from tests.e2e.test_closed_loop import demo_trainer, make_daemon, phase
from tests.e2e.test_power_loop import SimClock, run_for


def test_the_high_floor_card_holds_without_a_pause(tmp_path: Path) -> None:
    daemon = make_daemon(tmp_path, {"cooling_scale": 0.4, "time_scale": 1.0, "card": "navi31"},
                         trainer=[demo_trainer(tmp_path)])
    simulator = daemon.parts.simulator
    assert simulator is not None
    simulator.clock = SimClock()
    device = simulator.cards[0].device_dir
    try:
        run_for(daemon, 300, stop=lambda s: phase(s) == TrainerPhase.RUNNING)
        states, junctions = run_for(daemon, 1500)
        assert any(s.powers[0].mode is PowerMode.FLOOR for s in states)
        clocks = [s.clocks[0] for s in states]
        assert any(c.mode is ClockMode.LIMITING for c in clocks), clocks[-1]
        # Issue 49 item 7: the card is power-limited (navi31.PARAMS): it runs under its 2500 MHz overdrive maximum,
        # as the sampler reads it (gpu_metrics' average gfxclk), and the first ceiling lands under that clock.
        first = next(i for i, c in enumerate(clocks) if c.ceiling_mhz is not None)
        ran_hz = states[first - 1].snapshot.gpus[0].sclk_average_hz
        assert ran_hz is not None and ran_hz / 1e6 < 0.95 * navi31.SCLK_MAX_MHZ
        ceiling = clocks[first].ceiling_mhz
        assert ceiling is not None and ceiling < ran_hz / 1e6
        late = clocks[-len(clocks) // 3:]
        assert all(c.ceiling_mhz is not None and 1500 <= c.ceiling_mhz < navi31.SCLK_MAX_MHZ for c in late)
        assert simulator.kernel.od_max_mhz(device) == late[-1].ceiling_mhz  # what the kernel has in force
        assert max(junctions[len(junctions) // 3:]) <= 101.0  # at most 1 °C over the 100 °C pause limit
        trainer = states[-1].trainers[0]
        assert trainer.phase == TrainerPhase.RUNNING and trainer.pauses_total == 0, trainer
    finally:
        daemon.shutdown()
    assert simulator.kernel.od_max_mhz(device) == navi31.SCLK_MAX_MHZ  # the original back on shutdown
    assert not (tmp_path / "run" / "clock-restore.json").exists()
