"""The simulator's clock ceiling (issue 36): the physics (power with f*V^2, speed with f; nothing changes
without a ceiling), the Navi 31-like card's cap floor and clock files, the simulated kernel's OD edit and
commit, and the clock rung driving a hot simulated card through them."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from gpuwatch.clock.controller import ClockController
from gpuwatch.config.file import parse_config
from gpuwatch.gpus.amdgpu_source import AmdgpuSource
from gpuwatch.gpus.sampler import Sampler
from gpuwatch.model import Acted, ClockMode, FanMode, FanState, PowerMode, PowerState
from gpuwatch.sim import navi31
from gpuwatch.sim.cards import SimulatedGpus
from gpuwatch.sim.physics import (
    ThermalInputs,
    ThermalParams,
    demand_w,
    dynamic_ratio,
    equilibrium,
    operating_clock_ratio,
    running_clock_mhz,
    speed_ratio,
    steady_power_w,
)
from gpuwatch.sysfs import Sysfs, SysfsError


@pytest.mark.parametrize("load", [0.0, 0.5, 1.0])
@pytest.mark.parametrize("cap_w", [None, 90.0, 150.0])
def test_without_a_ceiling_nothing_changes(load: float, cap_w: float | None) -> None:
    params = ThermalParams()
    assert speed_ratio(params, load, cap_w) == speed_ratio(params, load, cap_w, 1.0)
    assert equilibrium(params, ThermalInputs(0.5, load, cap_w)) == equilibrium(
        params, ThermalInputs(0.5, load, cap_w, clock_ratio=1.0))


def test_a_small_clock_cut_buys_a_large_power_cut() -> None:
    params = navi31.PARAMS
    assert dynamic_ratio(params, 0.9) == pytest.approx(0.729)  # f * V^2 with V ~ f
    assert dynamic_ratio(params, 0.5) == pytest.approx(0.5 * 0.7**2)  # under the voltage floor: only f
    full, cut = demand_w(params, 1.0), demand_w(params, 1.0, 0.9)
    assert (full - cut) / full > 0.2  # 10 % of the clock: over 20 % of the board's power
    assert speed_ratio(params, 1.0, None, 0.9) == pytest.approx(0.9)  # the step rate goes with the clock
    # Under a cap below the lower demand the card runs under the ceiling (the cap binds first): the cap's law alone.
    assert speed_ratio(params, 1.0, 200.0, 0.9) == speed_ratio(params, 1.0, 200.0)
    assert speed_ratio(params, 1.0, 200.0) == pytest.approx((200.0 / full) ** params.speed_exponent)


def test_a_power_limited_card_runs_below_its_maximum() -> None:
    """The Navi 31-like card at its default cap runs ~91 % of its overdrive maximum (an RX 7900 XTX: ~2680 of 2940
    MHz, LACT #1068); a ceiling above that clock changes neither its power nor its speed, one below lowers both."""
    params, cap_w = navi31.PARAMS, navi31.POWER_CAP_UW / 1e6
    operating = operating_clock_ratio(params, 1.0, cap_w)
    assert 0.89 < operating < 0.93
    assert demand_w(params, 1.0, operating) == pytest.approx(cap_w, abs=0.01)
    assert running_clock_mhz(params, 1.0, cap_w, 1.0, 2500.0, 300.0) == pytest.approx(operating * 2500.0)
    assert running_clock_mhz(params, 0.0, cap_w, 1.0, 2500.0, 300.0) == 300.0  # idle: the idle clock
    for above in (operating + 0.01, 0.97, 1.0):
        assert speed_ratio(params, 1.0, cap_w, above) == speed_ratio(params, 1.0, cap_w)
        assert steady_power_w(params, 1.0, cap_w, above) == cap_w
    below = operating - 0.05
    assert steady_power_w(params, 1.0, cap_w, below) < cap_w
    assert speed_ratio(params, 1.0, cap_w, below) == pytest.approx(speed_ratio(params, 1.0, cap_w) * below / operating)
    assert operating_clock_ratio(params, 1.0, cap_w, below) == below


def _simulator(tmp_path: Path, **kwargs: object) -> SimulatedGpus:
    return SimulatedGpus(root=tmp_path / "sim", card="navi31", **kwargs)  # type: ignore[arg-type]


def test_the_navi31_card_keeps_its_cap_floor(tmp_path: Path) -> None:
    sim = _simulator(tmp_path)
    (card,) = sim.cards
    cap = sim.root / card.hwmon_dir / "power1_cap"
    cap.write_text("200000000\n")  # below power1_cap_min: the kernel refuses it
    sim.advance_by(1.0)
    assert cap.read_text() == "290000000\n"
    cap.write_text("261000000\n")
    sim.advance_by(1.0)
    assert cap.read_text() == "261000000\n"


def test_the_simulated_kernel_plays_the_od_edit_and_commit(tmp_path: Path) -> None:
    sim = _simulator(tmp_path)
    (card,) = sim.cards
    od = f"{card.device_dir}/pp_od_clk_voltage"
    sim.kernel.write(od, "s 1 2000\n")
    assert sim.kernel.od_max_mhz(card.device_dir) == 2500  # an edit is not in force before the commit
    sim.kernel.write(od, "c\n")
    assert sim.kernel.od_max_mhz(card.device_dir) == 2000
    with pytest.raises(SysfsError, match="EINVAL"):
        sim.kernel.write(od, "s 1 4000\n")  # out of OD_RANGE
    sim.advance_by(1.0)
    assert card.clock_ratio == pytest.approx(0.8)
    sim.inject_reset(card.gpu_id)  # a GPU reset puts the firmware's table back
    assert sim.kernel.od_max_mhz(card.device_dir) == 2500
    with pytest.raises(SysfsError, match="EINVAL"):
        sim.kernel.write(f"{card.device_dir}/pp_dpm_sclk", "0\n")  # a mask needs manual


def test_the_clock_rung_holds_a_hot_simulated_card_at_the_cap_floor(tmp_path: Path) -> None:
    """A hot case (cooling x0.4, the fan at full duty) on the Navi 31-like card, the cap already at its floor:
    the clock rung lowers the ceiling through the simulated kernel until the card holds under its limit."""
    sim = _simulator(tmp_path, params=replace(navi31.PARAMS, cooling_scale=0.4), sensor_noise_c=0.0)
    (card,) = sim.cards
    (sim.root / card.hwmon_dir / "power1_cap").write_text("261000000\n")
    (sim.root / card.hwmon_dir / "pwm1_enable").write_text("1\n")
    (sim.root / card.hwmon_dir / "pwm1").write_text("255\n")
    config = parse_config({"runtime_dir": str(tmp_path / "run")})
    source = AmdgpuSource(Sysfs(sim.root), clock=lambda: sim.sim_time_s)
    sampler = Sampler([source], monotonic=lambda: sim.sim_time_s)
    controller = ClockController(sim.kernel, tmp_path / "run", locate=source.locate, clock=lambda: sim.sim_time_s)
    fan = (FanState(gpu_id=card.gpu_id, backend="pwm1", mode=FanMode.CURVE, can_rise=False),)
    power = (PowerState(gpu_id=card.gpu_id, mode=PowerMode.FLOOR),)
    junctions, states = [], []
    for _ in range(1000):
        sim.advance_by(1.0)
        (state,) = controller.tick(sampler.sample(), Acted(fans=fan, powers=power), config)
        states.append(state)
        junctions.append(card.state.junction_c)
    try:
        assert any(s.mode is ClockMode.LIMITING for s in states)
        assert max(junctions[600:]) < 100.0  # settled under the pause limit (110 - 10)
        assert card.clock_ratio < 1.0 and states[-1].ceiling_mhz == sim.kernel.od_max_mhz(card.device_dir)
    finally:
        controller.restore()
    assert sim.kernel.od_max_mhz(card.device_dir) == 2500
