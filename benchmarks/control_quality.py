#!/usr/bin/env python3
"""Control quality of the default config on the simulated RX 5600 XT, in simulated time (no sleeping).

Runs the thermal model (gpuwatch/sim/physics.py) in a closed loop with gpuwatch's real fan-curve rules
(gpuwatch/fan/curve.py, the default [fan] config) and the real pause limits (gpuwatch/limits.py, the default
[thermal] config and a default [[trainer]]: junction limit = crit 110 - 10 = 100 °C held for debounce_s,
resume below limit - hysteresis), with sensor readings in whole degrees plus noise, and prints
per scenario: the highest junction temperature, the overshoot over the pause limit, how often the fan
changes direction per hour (hunting), and the time the trainer spent paused.

The workload trains for 9 minutes then evaluates (idle) for 1, as real runs do.

    .venv/bin/python benchmarks/control_quality.py [--hours 2] [--tick-s 1]
"""

from __future__ import annotations

import argparse
import random
import sys
from dataclasses import dataclass, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gpuwatch.config import Config, TrainerConfig  # noqa: E402
from gpuwatch.fan.curve import CurveState, curve_params, decide  # noqa: E402
from gpuwatch.limits import breaches, sensor_limit_c  # noqa: E402
from gpuwatch.model import GpuReading, TempReading  # noqa: E402
from gpuwatch.sim.navi10 import CRIT_C  # noqa: E402
from gpuwatch.sim.physics import ThermalInputs, ThermalParams, ThermalState, idle_state, step  # noqa: E402


@dataclass(frozen=True)
class Scenario:
    name: str
    params: ThermalParams
    fan_stuck_ratio: float | None = None
    hysteresis_c: float | None = None  # the trainer's resume hysteresis; None: [thermal]'s 5 °C


@dataclass
class Result:
    max_junction_c: float = 0.0
    overshoot_c: float = 0.0
    direction_changes: int = 0
    paused_s: float = 0.0
    pauses: int = 0


def reading(state: ThermalState, rng: random.Random) -> GpuReading:
    """What the daemon would read: whole degrees with a little noise, as the simulator writes them."""
    temps = tuple(TempReading(label=label, temp_c=float(round(temp + rng.uniform(-0.6, 0.6))),
                              crit_c=float(CRIT_C[label]))
                  for label, temp in (("edge", state.edge_c), ("junction", state.junction_c), ("mem", state.mem_c)))
    return GpuReading(gpu_id="sim", card="card0", backend="amdgpu", temps=temps)


def run(scenario: Scenario, config: Config, hours: float, tick_s: float) -> Result:
    params = scenario.params
    trainer = TrainerConfig(name="bench", command=["true"], hysteresis_c=scenario.hysteresis_c)
    thermal = trainer.thermal(config.thermal)
    state, curve_state, rng = idle_state(params), CurveState(), random.Random(1)
    hot_since: float | None = None
    paused_at = 0.0
    limit_c = sensor_limit_c(TempReading("junction", None, crit_c=float(CRIT_C["junction"])), thermal) or 100.0
    result, paused, last_percent, last_direction = Result(), False, None, 0
    cp = curve_params(config.fan)
    for i in range(int(hours * 3600 / tick_s)):
        now = i * tick_s
        gpu = reading(state, rng)
        junction = gpu.temp("junction")
        assert junction is not None
        decision = decide(cp, curve_state, junction.temp_c, junction.crit_c, now)
        curve_state = decision.state
        if last_percent is not None and decision.percent != last_percent:
            direction = 1 if decision.percent > last_percent else -1
            if last_direction and direction != last_direction:
                result.direction_changes += 1
            last_direction = direction
        last_percent = decision.percent
        # The supervisor's rule: pause once a limit is held for debounce_s, resume once every sensor
        # is a hysteresis below its limit and the pause has lasted min_pause_s.
        hot = bool(breaches(gpu, thermal))
        hot_since = (hot_since if hot_since is not None else now) if hot else None
        if not paused and hot_since is not None and now - hot_since >= trainer.debounce_s:
            paused, paused_at, result.pauses = True, now, result.pauses + 1
        elif (paused and now - paused_at >= trainer.min_pause_s
              and not breaches(gpu, thermal, margin_c=thermal.hysteresis_c)):
            paused = False
        training = (now % 600) < 540
        load = 1.0 if training and not paused else 0.0
        duty = scenario.fan_stuck_ratio if scenario.fan_stuck_ratio is not None else decision.percent / 100.0
        state = step(params, state, ThermalInputs(fan_duty_ratio=duty, load_ratio=load), tick_s)
        result.max_junction_c = max(result.max_junction_c, state.junction_c)
        result.paused_s += tick_s if paused else 0.0
    result.overshoot_c = max(0.0, result.max_junction_c - limit_c)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="closed-loop control quality on the simulated GPU")
    parser.add_argument("--hours", type=float, default=2.0)
    parser.add_argument("--tick-s", type=float, default=1.0, help="daemon interval (simulated seconds)")
    args = parser.parse_args(argv)
    config = Config()
    base = ThermalParams()
    scenarios = [
        Scenario("default config, healthy fan", base),
        Scenario("hot case (cooling x0.4)", replace(base, cooling_scale=0.4)),
        Scenario("hot case, resume hysteresis 20 (demo)", replace(base, cooling_scale=0.4), hysteresis_c=20.0),
        Scenario("fan stuck at 30 %", base, fan_stuck_ratio=0.3),
        Scenario("ambient 40 °C", replace(base, ambient_c=40.0)),
    ]
    print(f"{args.hours:g} simulated hours, tick {args.tick_s:g} s, default [fan] and [thermal] config, "
          f"pause limit junction {CRIT_C['junction'] - config.thermal.junction_crit_margin_c:g} °C\n")
    header = f"{'scenario':38} {'max junction':>12} {'overshoot':>9} {'fan reversals/h':>15} {'paused':>14} {'pauses':>6}"
    print(header)
    print("-" * len(header))
    for scenario in scenarios:
        r = run(scenario, config, args.hours, args.tick_s)
        paused_pct = 100.0 * r.paused_s / (args.hours * 3600)
        print(f"{scenario.name:38} {r.max_junction_c:10.1f} °C {r.overshoot_c:6.1f} °C "
              f"{r.direction_changes / args.hours:15.1f} {r.paused_s:7.0f} s {paused_pct:4.1f}% {r.pauses:6d}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
