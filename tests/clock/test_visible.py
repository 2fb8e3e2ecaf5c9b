"""The clock rung is visible: its line in `gpuwatch status`, its ClockCeilingDoc in /status, its families and the
ladder's rung in /metrics (the names contracts.md gives the alert rules and the dashboard)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from gpuwatch.cli.status import render
from gpuwatch.model import ClockMode, ClockState, PowerMode, PowerState
from gpuwatch.publish.document import to_document
from gpuwatch.publish.metrics import render as metrics
from tests.support.published import GPU_A, GPU_B, example_state, with_rungs


def test_status_shows_the_ceiling_in_force(tmp_path: Path) -> None:
    doc = to_document(example_state(tmp_path / "sys"), "daemon")
    text = render(doc, now=doc["taken_unix"])
    assert "  clock  ceiling 2300/2500 MHz, floor 1500 MHz" in text
    assert all(len(line) <= 80 for line in text.splitlines() if line.startswith("  clock"))
    # GPU_B's clock cannot be set, but its cap is not at its floor: nothing said, the screen stays short.
    assert text.count("  clock  ") == 1


@pytest.mark.parametrize(("clock", "power_mode", "line"), [
    (ClockState(GPU_A, ClockMode.FLOOR, ceiling_mhz=1500.0, original_mhz=2500.0, floor_mhz=1500.0), PowerMode.FLOOR,
     "  clock  ceiling 1500/2500 MHz, floor 1500 MHz (at its floor: pause allowed)"),
    (ClockState(GPU_A, ClockMode.FLOOR, ceiling_mhz=2400.0, original_mhz=2500.0, floor_mhz=2400.0,
                card_floor_mhz=2400.0), PowerMode.FLOOR,
     "  clock  ceiling 2400/2500 MHz, floor 2400 MHz (card's own): pause allowed"),
    (ClockState(GPU_A, ClockMode.LIMITING, ceiling_mhz=2300.0, original_mhz=2500.0, floor_mhz=1500.0,
                not_in_force=True), PowerMode.FLOOR,
     "  clock  ceiling 2300/2500 MHz ignored by the card: pause allowed"),
    (ClockState(GPU_A, ClockMode.DRY_RUN, target_ceiling_mhz=2400.0, floor_mhz=1500.0), PowerMode.FLOOR,
     "  clock  dry-run: would set 2400 MHz, floor 1500 MHz"),
    (ClockState(GPU_A, ClockMode.UNAVAILABLE, reason="no pp_od_clk_voltage"), PowerMode.FLOOR,
     "  clock  clock ceiling not governed: no pp_od_clk_voltage"),
    (ClockState(GPU_A, ClockMode.UNAVAILABLE, reason="no pp_od_clk_voltage"), PowerMode.GOVERNING, None),
    (ClockState(GPU_A, ClockMode.IDLE, original_mhz=2500.0, floor_mhz=1500.0), PowerMode.FLOOR, None),
])
def test_the_clock_line(tmp_path: Path, clock: ClockState, power_mode: PowerMode, line: str | None) -> None:
    state = example_state(tmp_path / "sys")
    powers = tuple(replace(p, mode=power_mode) if p.gpu_id == GPU_A else p for p in state.powers)
    doc = to_document(replace(state, clocks=(clock,), powers=powers), "daemon")
    lines = [text for text in render(doc, now=doc["taken_unix"]).splitlines() if text.startswith("  clock  ")]
    assert lines == ([] if line is None else [line])


def _samples(state: object) -> dict[str, float]:
    found = {}
    for family in metrics(state):  # type: ignore[arg-type]
        for sample in family.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()))
            found[f"{sample.name}{{{labels}}}"] = sample.value
    return found


def test_the_metric_names_of_the_contract(tmp_path: Path) -> None:
    got = _samples(example_state(tmp_path / "sys"))
    assert got[f'gpuwatch_clock_ceiling_mhz{{gpu="{GPU_A}"}}'] == 2300.0
    assert f'gpuwatch_clock_ceiling_mhz{{gpu="{GPU_B}"}}' not in got  # absent when none is in force
    assert got[f'gpuwatch_clock_ceiling_floor_mhz{{gpu="{GPU_A}"}}'] == 1500.0
    assert got[f'gpuwatch_clock_limited_seconds_total{{gpu="{GPU_A}"}}'] == 600.0
    rungs = {key: value for key, value in got.items() if key.startswith("gpuwatch_ladder_rung{") and GPU_A in key}
    assert len(rungs) == 5 and rungs[f'gpuwatch_ladder_rung{{gpu="{GPU_A}",rung="clock"}}'] == 1.0
    assert sum(rungs.values()) == 1.0
    # GPU_B: a trainer on it ("bert") is paused: the top of the ladder.
    assert got[f'gpuwatch_ladder_rung{{gpu="{GPU_B}",rung="pause"}}'] == 1.0


def test_the_rung_follows_the_highest_part_in_use(tmp_path: Path) -> None:
    """The same rule as the live page's (publish.live.rung_of), computed when the state is built."""
    state = replace(example_state(tmp_path / "sys"), trainers=(), clocks=())
    got = _samples(with_rungs(state))
    assert got[f'gpuwatch_ladder_rung{{gpu="{GPU_A}",rung="cap"}}'] == 1.0  # the cap governs GPU_A
    idle = replace(state, powers=(PowerState(GPU_A, PowerMode.IDLE),))
    assert _samples(with_rungs(idle))[f'gpuwatch_ladder_rung{{gpu="{GPU_A}",rung="none"}}'] == 1.0  # fan at 40 %
    blowing = replace(idle, fans=tuple(replace(f, target_ratio=0.8) for f in idle.fans))
    assert _samples(with_rungs(blowing))[f'gpuwatch_ladder_rung{{gpu="{GPU_A}",rung="fan"}}'] == 1.0


def test_status_names_a_ceiling_a_killed_daemon_left(tmp_path: Path) -> None:
    from gpuwatch.cli.leftovers import leftover_lines
    path = tmp_path / "clock-restore.json"
    (line,) = leftover_lines({"gpus": []}, {path: [GPU_A]})  # type: ignore[typeddict-item]
    assert line == f"no daemon runs, yet {path} holds a lowered shader clock ceiling ({GPU_A}): it was not given back"
