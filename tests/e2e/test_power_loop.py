"""Closed loop on the simulator with the power governor (fan -> power cap -> pause): the real daemon (fan
controller, governor, supervisor with the demo trainer as a real child) on a simulated card in a hot case.

The test drives the simulator's clock itself, a fixed 5 s per tick (the governor runs on the simulator's
clock, docs/power.md), so the loop sees the same physics whatever the machine's load; the supervisor's
debounce is 0, so any pause it is allowed to make, it makes at once.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gpuwatch.daemon.loop import Daemon
from gpuwatch.model import PowerMode, PublishedState, TrainerPhase
from tests.e2e.test_closed_loop import demo_trainer, make_daemon, phase

TICK_SIM_S = 5.0
ORIGINAL_UW = "150000000"


class SimClock:
    """The simulator's clock, advanced by the test: a fixed step per tick."""

    def __init__(self) -> None:
        self.now_s = 0.0

    def __call__(self) -> float:
        return self.now_s


def stepped(tmp_path: Path, faults: dict[str, Any] | None = None, trainer: bool = True) -> Daemon:
    daemon = make_daemon(tmp_path, {"cooling_scale": 0.4, "time_scale": 1.0, "faults": faults or {}},
                         trainer=[demo_trainer(tmp_path)] if trainer else [])
    assert daemon.parts.simulator is not None
    daemon.parts.simulator.clock = SimClock()
    return daemon


def run_for(daemon: Daemon, sim_s: float, stop: Callable[[PublishedState], bool] | None = None,
            ) -> tuple[list[PublishedState], list[float]]:
    """Tick, ``TICK_SIM_S`` simulated seconds apart; the states and the model's true junction after each."""
    simulator = daemon.parts.simulator
    assert simulator is not None and isinstance(simulator.clock, SimClock)
    states, junctions = [], []
    end = simulator.sim_time_s + sim_s
    while simulator.sim_time_s < end:
        simulator.clock.now_s += TICK_SIM_S
        states.append(daemon.tick())  # the simulator steps right before the sample
        junctions.append(simulator.cards[0].state.junction_c)
        if stop and stop(states[-1]):
            break
    return states, junctions


def cap_file(daemon: Daemon) -> Path:
    assert daemon.parts.simulator is not None
    return daemon.parts.simulator.root / daemon.parts.simulator.cards[0].hwmon_dir / "power1_cap"


def test_hot_case_holds_under_the_limit_without_a_pause(tmp_path: Path) -> None:
    daemon = stepped(tmp_path)
    try:
        run_for(daemon, 300, stop=lambda s: phase(s) == TrainerPhase.RUNNING)
        states, junctions = run_for(daemon, 900)
        powers = [s.powers[0] for s in states]
        assert any(p.mode is PowerMode.GOVERNING for p in powers)
        late = powers[-len(powers) // 3:]
        assert all(p.cap_w is not None and 110 <= p.cap_w < 150 for p in late), [p.cap_w for p in late]
        assert max(junctions) <= 101.0  # never more than 1 °C over the 100 °C pause limit
        assert min(junctions[-len(junctions) // 3:]) >= 94  # held near the limit, not far below it
        trainer = states[-1].trainers[0]
        assert trainer.phase == TrainerPhase.RUNNING and trainer.pauses_total == 0, trainer
        assert late[-1].throughput_kept_ratio is not None and 0.9 < late[-1].throughput_kept_ratio < 1
    finally:
        daemon.shutdown()
    assert cap_file(daemon).read_text().strip() == ORIGINAL_UW  # the cap found at start, back on shutdown


def test_read_only_cap_falls_back_to_pausing(tmp_path: Path) -> None:
    daemon = stepped(tmp_path, faults={"power_cap_readonly": True})
    try:
        states, _ = run_for(daemon, 1500, stop=lambda s: bool(s.trainers) and s.trainers[0].pauses_total >= 1)
        power = states[-1].powers[0]
        assert power.mode is PowerMode.UNAVAILABLE and "does not keep" in (power.reason or "")
        assert power.pause_allowed and states[-1].trainers[0].pauses_total >= 1
    finally:
        daemon.shutdown()


def test_an_exception_out_of_the_loop_gives_the_cap_back(tmp_path: Path) -> None:
    daemon = stepped(tmp_path, trainer=False)  # no trainer: the simulated card runs at full load
    states, _ = run_for(daemon, 900, stop=lambda s: s.powers[0].cap_w is not None and s.powers[0].cap_w < 150)
    assert states[-1].powers[0].mode is PowerMode.GOVERNING and int(cap_file(daemon).read_text()) < 150_000_000

    def broken_tick() -> PublishedState:
        raise RuntimeError("a bug in the loop")

    daemon.tick = broken_tick  # type: ignore[method-assign]
    with pytest.raises(RuntimeError, match="a bug in the loop"):
        daemon.run()
    assert cap_file(daemon).read_text().strip() == ORIGINAL_UW
    assert not (tmp_path / "run/power-restore.json").exists()
