"""A lumped thermal model of one air-cooled GPU (pure): power and fan duty in, temperatures and RPM out.

Nodes, each a first-order lag towards its steady value (exact exponential step, so any ``dt_s`` is
stable):

* board power follows the load within ~1 s (``power_tau_s``);
* the heatsink/edge node: steady ``edge = ambient + power / G(airflow)``, where the conductance
  ``G = passive_w_per_k + cooling_scale * fan_w_per_k * airflow`` grows with the fan; time constant
  ``heat_capacity_j_per_k / G`` (about a minute: a real card takes minutes to heat through);
* junction (hotspot) sits above edge by ``junction_k_per_w * power`` and follows within seconds;
* memory follows edge plus its own share of the power, more slowly;
* the fan's RPM follows the commanded duty with its own spin-up lag; airflow is RPM / max RPM;
* a power cap below the load's demand holds the power at the cap, and the training step rate falls to
  ``(cap / demand) ** speed_exponent`` of full speed (``speed_ratio``). The exponent is 1/2: the
  core's dynamic power near the top of the voltage/frequency curve goes as f^3 (exponent 1/3), but
  the board's memory, fabric and leakage power does not scale with the core clock, so a cut of the
  board's power costs the clock more than the cube root says; and a memory-bound step loses less
  than its clock. Published power-limit sweeps of training fall between 1/3 and 1 (docs/power.md,
  "How much speed a cap costs", with the sources and the sensitivity of the results to it);
* a shader clock ceiling at ``clock_ratio`` of the card's maximum (gpuwatch/clock/) lowers the load's
  demand: the core's dynamic power goes as f*V^2 and V falls with f down to ``voltage_floor_ratio`` of its
  top (``dynamic_ratio``), so a small clock cut buys a large power cut; the step rate goes with the clock,
  times what a cap below that lower demand still takes (the rule above). Without a ceiling (1.0) every
  formula is the one of a card without clock control.
* a power-limited card (its demand at the top clock above its cap, as RDNA3 boards at their default cap) runs
  below its maximum clock (``operating_clock_ratio``): a ceiling above that clock changes neither its power nor
  its speed, one below it lowers both (the speed in proportion to the clock).

Default constants are picked so that an RX 5600 XT-like card (150 W under load, ~25 W idle) with
~30 °C case air idles around 42-45 °C, settles at a junction of ~84 °C under full load with gpuwatch's
default curve (50 % floor), and passes a junction pause limit of 100 °C with the fan stuck at 30 %.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace


@dataclass(frozen=True)
class ThermalParams:
    """Constants of one simulated card."""

    ambient_c: float = 30.0
    idle_power_w: float = 25.0
    load_power_w: float = 150.0
    power_tau_s: float = 1.0
    passive_w_per_k: float = 0.8
    fan_w_per_k: float = 4.0
    cooling_scale: float = 1.0
    heat_capacity_j_per_k: float = 200.0
    junction_k_per_w: float = 0.11
    junction_tau_s: float = 3.0
    mem_offset_k: float = 2.0
    mem_k_per_w: float = 0.03
    mem_tau_s: float = 40.0
    fan_max_rpm: float = 3200.0
    fan_tau_s: float = 2.0
    # Below this duty the fan does not turn (stall), as small fans do.
    fan_start_ratio: float = 0.08
    # Step rate under a cap = (P / P_demand) ** speed_exponent (see the module docstring); 1/3..1 bound it.
    speed_exponent: float = 0.5
    # The core voltage at the lowest clocks, share of its top: below the V/F curve's knee only f falls.
    voltage_floor_ratio: float = 0.7


@dataclass(frozen=True)
class ThermalState:
    """One instant of the card."""

    edge_c: float
    junction_c: float
    mem_c: float
    power_w: float
    fan_rpm: float


@dataclass(frozen=True)
class ThermalInputs:
    """What drives the card: the fan duty actually reaching the fan, the workload, and the power cap."""

    fan_duty_ratio: float
    load_ratio: float
    power_cap_w: float | None = None
    clock_ratio: float = 1.0  # the shader clock's ceiling, share of the card's maximum


def dynamic_ratio(params: ThermalParams, clock_ratio: float) -> float:
    """The core's dynamic power at ``clock_ratio`` of the top clock, share of its top: f * V^2, V with f
    down to the voltage floor."""
    f = min(1.0, max(0.0, clock_ratio))
    return f * max(params.voltage_floor_ratio, f) ** 2


def demand_w(params: ThermalParams, load_ratio: float, clock_ratio: float = 1.0) -> float:
    """What the workload would draw without a cap (under a clock ceiling: with its lower clock)."""
    load = min(1.0, max(0.0, load_ratio))
    return params.idle_power_w + (params.load_power_w - params.idle_power_w) * load * dynamic_ratio(params, clock_ratio)


def steady_power_w(params: ThermalParams, load_ratio: float, power_cap_w: float | None = None,
                   clock_ratio: float = 1.0) -> float:
    demand = demand_w(params, load_ratio, clock_ratio)
    return demand if power_cap_w is None else min(demand, power_cap_w)


def operating_clock_ratio(params: ThermalParams, load_ratio: float, power_cap_w: float | None,
                          clock_ratio: float = 1.0) -> float:
    """The clock the shader runs at under ``load_ratio``, share of the card's maximum: the ceiling, or lower where
    the power cap binds first. The SMU's power loop (PPT) lowers the clock until the board's power meets the cap,
    so a power-limited card runs at the f where ``demand_w(f) == cap``, below its overdrive maximum (an RX 7900 XTX
    sustains ~2680 of its 2940 MHz, LACT #1068): a ceiling above that f changes nothing."""
    ceiling = min(1.0, max(0.0, clock_ratio))
    if power_cap_w is None or demand_w(params, load_ratio, ceiling) <= power_cap_w:
        return ceiling
    low, high = 0.0, ceiling  # demand_w rises with the clock: bisect to well under a MHz
    for _ in range(32):
        mid = (low + high) / 2
        low, high = (mid, high) if demand_w(params, load_ratio, mid) <= power_cap_w else (low, mid)
    return low


def running_clock_mhz(params: ThermalParams, load_ratio: float, power_cap_w: float | None, clock_ratio: float,
                      max_mhz: float, idle_mhz: float) -> float:
    """The shader clock a driver reports (gpu_metrics' gfxclk, hwmon's freq1_input): the idle clock, up to the
    operating clock in proportion to the load (busy)."""
    load = min(1.0, max(0.0, load_ratio))
    top = operating_clock_ratio(params, load, power_cap_w, clock_ratio) * max_mhz
    return idle_mhz + load * max(0.0, top - idle_mhz)


def speed_ratio(params: ThermalParams, load_ratio: float, power_cap_w: float | None, clock_ratio: float = 1.0) -> float:
    """The step rate as a share of full speed: (P / P_demand) ** speed_exponent under a cap below the demand (the
    card then runs at its operating clock, ``operating_clock_ratio``), scaled down with the clock where a ceiling
    holds it below that operating clock. A ceiling at or above the operating clock changes nothing."""
    ceiling = min(1.0, max(0.0, clock_ratio))
    demand = demand_w(params, load_ratio)
    capped = 1.0 if demand <= 0 else (steady_power_w(params, load_ratio, power_cap_w) / demand) ** params.speed_exponent
    if ceiling >= 1.0:
        return float(capped)
    operating = operating_clock_ratio(params, load_ratio, power_cap_w)
    if operating <= 0:
        return ceiling
    return float(capped * min(1.0, ceiling / operating))


def steady_rpm(params: ThermalParams, fan_duty_ratio: float) -> float:
    duty = min(1.0, max(0.0, fan_duty_ratio))
    return 0.0 if duty < params.fan_start_ratio else duty * params.fan_max_rpm


def conductance_w_per_k(params: ThermalParams, fan_rpm: float) -> float:
    airflow = min(1.0, max(0.0, fan_rpm / params.fan_max_rpm)) if params.fan_max_rpm > 0 else 0.0
    return params.passive_w_per_k + params.cooling_scale * params.fan_w_per_k * airflow


def equilibrium(params: ThermalParams, inputs: ThermalInputs) -> ThermalState:
    """Where the card settles if the inputs stay as they are."""
    power = steady_power_w(params, inputs.load_ratio, inputs.power_cap_w, inputs.clock_ratio)
    rpm = steady_rpm(params, inputs.fan_duty_ratio)
    edge = params.ambient_c + power / conductance_w_per_k(params, rpm)
    return ThermalState(
        edge_c=edge,
        junction_c=edge + params.junction_k_per_w * power,
        mem_c=edge + params.mem_offset_k + params.mem_k_per_w * power,
        power_w=power,
        fan_rpm=rpm,
    )


def idle_state(params: ThermalParams, fan_duty_ratio: float = 0.33) -> ThermalState:
    """A card that has been idle for long (the simulator's starting point)."""
    return equilibrium(params, ThermalInputs(fan_duty_ratio=fan_duty_ratio, load_ratio=0.0))


def step(params: ThermalParams, state: ThermalState, inputs: ThermalInputs, dt_s: float) -> ThermalState:
    """The card ``dt_s`` seconds later; inputs are held constant over the step."""
    if dt_s <= 0:
        return state
    power = _lag(state.power_w, steady_power_w(params, inputs.load_ratio, inputs.power_cap_w, inputs.clock_ratio),
                 params.power_tau_s, dt_s)
    rpm = _lag(state.fan_rpm, steady_rpm(params, inputs.fan_duty_ratio), params.fan_tau_s, dt_s)
    conductance = conductance_w_per_k(params, rpm)
    edge = _lag(
        state.edge_c,
        params.ambient_c + power / conductance,
        params.heat_capacity_j_per_k / conductance,
        dt_s,
    )
    junction = _lag(state.junction_c, edge + params.junction_k_per_w * power, params.junction_tau_s, dt_s)
    mem = _lag(state.mem_c, edge + params.mem_offset_k + params.mem_k_per_w * power, params.mem_tau_s, dt_s)
    return replace(state, edge_c=edge, junction_c=junction, mem_c=mem, power_w=power, fan_rpm=rpm)


def _lag(value: float, target: float, tau_s: float, dt_s: float) -> float:
    if tau_s <= 0:
        return target
    return target + (value - target) * math.exp(-dt_s / tau_s)
