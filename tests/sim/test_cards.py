"""The simulated cards: a real-topology Navi 10 tree that the real amdgpu code reads and the fan writes."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gpuwatch.cli.parser import build_parser
from gpuwatch.cli.settings import with_simulation
from gpuwatch.config.base import ConfigError
from gpuwatch.config.file import Config, parse_config
from gpuwatch.daemon.loop import Daemon
from gpuwatch.gpus.amdgpu import discover, read_card
from gpuwatch.gpus.amdgpu_source import AmdgpuSource
from gpuwatch.model import PublishedState, Snapshot, TrainerPhase, TrainerState
from gpuwatch.sim.cards import SimulatedGpus
from gpuwatch.sim.faults import SimFaults
from gpuwatch.sim.physics import ThermalParams, operating_clock_ratio
from gpuwatch.sim.start import SimulatedSource
from gpuwatch.sysfs import Sysfs


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def make(tmp_path: Path, **kwargs: object) -> SimulatedGpus:
    return SimulatedGpus(root=tmp_path / "sim", **kwargs)  # type: ignore[arg-type]


def reading(sim: SimulatedGpus, index: int = 0):
    sysfs = Sysfs(sim.root)
    return read_card(sysfs, discover(sysfs).cards[index])


def hw(sim: SimulatedGpus, name: str, index: int = 0) -> Path:
    return sim.root / sim.cards[index].hwmon_dir / name


def test_tree_is_a_navi10_rx5600xt_with_kernel_topology(tmp_path: Path) -> None:
    sim = make(tmp_path, count=2)
    sysfs = Sysfs(sim.root)
    found = discover(sysfs)
    assert [c.gpu_id for c in found.cards] == ["0000:28:00.0", "0000:2b:00.0"]
    gpu = read_card(sysfs, found.cards[0])
    assert gpu.errors == ()
    assert gpu.device_id == "1002:731F"
    assert gpu.vram_total_bytes == 6442450944
    assert {t.label: t.crit_c for t in gpu.temps} == {"edge": 100.0, "junction": 110.0, "mem": 105.0,
                                                      "vrgfx": None, "vrsoc": None, "vrmem": None}
    assert gpu.gpu_metrics_revision == "1.3" and gpu.throttle_reasons == ()  # the table the simulator writes
    assert all(t.crit_hyst_c is None for t in gpu.temps)  # -273150 = none, as on the real card
    assert (gpu.fan_max_rpm, gpu.pwm_max, gpu.pwm_enable) == (3200, 255, 2)
    assert (hwmon := found.cards[0].hwmon_dir) and hwmon.startswith("devices/pci0000:00/")
    assert (sim.root / "class/hwmon/hwmon1/name").read_text() == "amdgpu\n"
    assert (sim.root / "class/drm/card0/device/vendor").read_text() == "0x1002\n"
    idle = gpu.temp("junction")
    assert idle is not None and idle.temp_c is not None and 38 < idle.temp_c < 50


def test_auto_mode_runs_the_firmware_curve_and_ignores_pwm_writes(tmp_path: Path) -> None:
    sim = make(tmp_path, load_without_trainer=0.0)
    hw(sim, "pwm1").write_text("255\n")
    sim.advance_by(60)
    gpu = reading(sim)
    assert gpu.pwm_enable == 2
    assert gpu.pwm is not None and gpu.pwm < 100  # the firmware's duty, not the write
    assert gpu.fan_rpm is not None and gpu.fan_rpm < 1200


@pytest.mark.parametrize("enable, pwm, rpm_range", [("1", "255", (3100, 3200)), ("1", "128", (1500, 1700)),
                                                    ("0", "10", (3100, 3200))])
def test_fan_follows_what_is_written(tmp_path: Path, enable: str, pwm: str, rpm_range: tuple[int, int]) -> None:
    sim = make(tmp_path)
    hw(sim, "pwm1_enable").write_text(enable)
    hw(sim, "pwm1").write_text(pwm)
    sim.advance_by(30)
    gpu = reading(sim)
    assert gpu.fan_rpm is not None and rpm_range[0] <= gpu.fan_rpm <= rpm_range[1]
    assert gpu.pwm == (int(pwm) if enable == "1" else 255)


def test_more_fan_means_cooler_and_load_means_power(tmp_path: Path) -> None:
    junctions = {}
    for pwm in ("100", "255"):
        sim = make(tmp_path / pwm)
        hw(sim, "pwm1_enable").write_text("1")
        hw(sim, "pwm1").write_text(pwm)
        sim.advance_by(1200)
        gpu = reading(sim)
        junctions[pwm] = gpu.temp("junction").temp_c  # type: ignore[union-attr]
        assert gpu.power_w == pytest.approx(150, abs=0.5)
        assert gpu.gpu_busy_ratio == 1.0
        sim.set_load(0.0)
        sim.advance_by(10)
        assert reading(sim).power_w == pytest.approx(25, abs=1)
    assert junctions["255"] < junctions["100"] - 15


@pytest.mark.parametrize(
    "written, kept_w",
    [
        ("120000000", 120),
        ("120700000", 120),  # truncated to whole watts, as amdgpu_hwmon_set_power_cap does
        ("60000000", 150),  # under power1_cap_min (75 W): refused, the last valid value reads back
        ("190000000", 150),  # over power1_cap_max (180 W)
        ("lots", 150),  # garbage: EINVAL
    ],
)
def test_power_cap_is_kept_like_the_kernel_keeps_it(tmp_path: Path, written: str, kept_w: float) -> None:
    sim = make(tmp_path)
    hw(sim, "power1_cap").write_text(written)
    sim.advance_by(60)
    gpu = reading(sim)
    assert gpu.power_cap_w == kept_w and gpu.power_w == pytest.approx(min(150, kept_w), abs=0.5)


def test_a_capped_card_is_busy_but_slower_and_cooler(tmp_path: Path) -> None:
    temps, clocks = {}, {}
    for cap in ("150000000", "100000000"):
        sim = make(tmp_path / cap)
        hw(sim, "pwm1_enable").write_text("1")
        hw(sim, "pwm1").write_text("255")
        hw(sim, "power1_cap").write_text(cap)
        sim.advance_by(1200)
        gpu = reading(sim)
        temps[cap], clocks[cap] = gpu.temp("junction").temp_c, gpu.sclk_hz  # type: ignore[union-attr]
        assert gpu.gpu_busy_ratio == 1.0
    assert temps["100000000"] < temps["150000000"] - 10
    # the SMU lowers the clock until the board's power meets the cap (physics.operating_clock_ratio)
    ratio = operating_clock_ratio(ThermalParams(), 1.0, 100.0)
    assert clocks["100000000"] == pytest.approx(clocks["150000000"] * ratio, rel=0.01)


def test_fault_power_cap_readonly_reverts_every_write(tmp_path: Path) -> None:
    sim = make(tmp_path, faults=SimFaults(power_cap_readonly=True))
    assert hw(sim, "power1_cap").stat().st_mode & 0o777 == 0o444
    if os.geteuid() == 0:
        hw(sim, "power1_cap").write_text("100000000")  # root may write a 0444 file: the firmware ignores it
    sim.advance_by(60)
    assert reading(sim).power_cap_w == 150 and reading(sim).power_w == pytest.approx(150, abs=0.5)


def test_time_scale_multiplies_the_clock(tmp_path: Path) -> None:
    clock = Clock()
    sim = make(tmp_path, time_scale=30.0, clock=clock)
    clock.now += 2.0
    sim.advance()
    assert sim.sim_time_s == pytest.approx(60.0)


def trainer(phase: TrainerPhase, gpus: tuple[str, ...] = ()) -> TrainerState:
    return TrainerState(name="t", phase=phase, gpus=gpus)


@pytest.mark.parametrize(
    "trainers, loads",
    [
        ((), [1.0, 1.0]),
        ((trainer(TrainerPhase.RUNNING),), [1.0, 1.0]),
        ((trainer(TrainerPhase.PAUSED),), [0.0, 0.0]),
        ((trainer(TrainerPhase.STOPPED),), [0.0, 0.0]),
        ((trainer(TrainerPhase.RUNNING, ("0000:2b:00.0",)),), [0.0, 1.0]),
        ((trainer(TrainerPhase.PAUSING, ("card0",)), trainer(TrainerPhase.BACKOFF)), [1.0, 0.0]),
    ],
)
def test_load_follows_the_published_trainer_phases(tmp_path: Path, trainers: tuple, loads: list[float]) -> None:
    sim = make(tmp_path, count=2)
    sim.observe(PublishedState(snapshot=Snapshot(0.0, 0.0, ()), trainers=trainers))
    assert [c.load_ratio for c in sim.cards] == loads


def test_fault_fan_stuck_ignores_writes(tmp_path: Path) -> None:
    sim = make(tmp_path, faults=SimFaults(fan_stuck_ratio=0.3))
    hw(sim, "pwm1_enable").write_text("1")
    hw(sim, "pwm1").write_text("255")
    sim.advance_by(30)
    gpu = reading(sim)
    assert gpu.pwm == 255
    assert gpu.fan_rpm == pytest.approx(960, abs=5)


def test_fault_sensor_garbage_is_a_read_error(tmp_path: Path) -> None:
    sim = make(tmp_path, faults=SimFaults(sensor_garbage=True))
    sim.advance_by(1)
    gpu = reading(sim)
    assert [t.temp_c for t in gpu.temps if t.label in ("edge", "junction", "mem")] == [None, None, None]
    assert {e.sensor for e in gpu.errors} == {"temp1_input", "temp2_input", "temp3_input"}


def test_fault_firmware_takes_the_fan_back(tmp_path: Path) -> None:
    sim = make(tmp_path, faults=SimFaults(firmware_reset_every_s=10))
    hw(sim, "pwm1_enable").write_text("1")
    sim.advance_by(5)
    assert reading(sim).pwm_enable == 1
    sim.advance_by(6)
    assert reading(sim).pwm_enable == 2
    hw(sim, "pwm1_enable").write_text("1")
    sim.advance_by(5)
    assert reading(sim).pwm_enable == 1
    sim.advance_by(5)
    assert reading(sim).pwm_enable == 2


def test_fault_card_disappears_for_one_card_only(tmp_path: Path) -> None:
    sim = make(tmp_path, count=2, faults=SimFaults(disappear_after_s=20, cards=(1,)))
    backend = AmdgpuSource(Sysfs(sim.root))
    assert len(backend.read_all()[0]) == 2
    sim.advance_by(30)
    readings, _ = backend.read_all()
    assert [(r.gpu_id, r.up) for r in readings] == [("0000:28:00.0", True), ("0000:2b:00.0", False)]
    assert [r.gpu_id for r in backend.read_all()[0]] == ["0000:28:00.0"]
    sim.advance_by(30)  # the gone card is left alone, the other one keeps working
    assert len(discover(Sysfs(sim.root)).cards) == 1


def test_refuses_a_foreign_directory_and_reuses_its_own(tmp_path: Path) -> None:
    foreign = tmp_path / "home"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match="not made by the simulator"):
        SimulatedGpus(root=foreign)
    assert (foreign / "notes.txt").exists()
    sim = make(tmp_path)
    hw(sim, "pwm1_enable").write_text("1")
    again = make(tmp_path)
    assert hw(again, "pwm1_enable").read_text() == "2\n"


def test_backend_advances_then_reads_through_amdgpu(tmp_path: Path) -> None:
    clock = Clock()
    sim = make(tmp_path, time_scale=60.0, clock=clock)
    backend = SimulatedSource(sim, AmdgpuSource(Sysfs(sim.root)))
    first = backend.read_all()[0][0].temp("junction").temp_c  # type: ignore[union-attr]
    clock.now += 5.0
    second = backend.read_all()[0][0].temp("junction").temp_c  # type: ignore[union-attr]
    assert sim.sim_time_s == pytest.approx(300.0)
    assert second is not None and first is not None and second > first + 20


@pytest.mark.parametrize("switch", [{"simulate": {"enabled": True}}, {"backend": "simulated"}])
def test_daemon_with_simulate_reads_the_tree(tmp_path: Path, switch: dict) -> None:
    config = parse_config({
        "runtime_dir": str(tmp_path / "run"),
        "http": {"enabled": False},
        "simulate": {"gpus": 2, "tree_dir": str(tmp_path / "tree")},
    } | {"backend": switch.get("backend", "auto")})
    if "simulate" in switch:
        config = with_simulation(config, 0)
    daemon = Daemon(config)
    try:
        state = daemon.tick()
        assert daemon.config.sysfs_root == tmp_path / "tree"
        assert [g.gpu_id for g in state.snapshot.gpus] == ["0000:28:00.0", "0000:2b:00.0"]
        assert all(g.temp("junction") is not None for g in state.snapshot.gpus)
        assert daemon.config.state_file.exists()
    finally:
        daemon.shutdown()


def test_cli_simulate_flag_and_config_errors() -> None:
    args = build_parser().parse_args(["run", "--simulate", "3"])
    assert args.simulate == 3
    assert build_parser().parse_args(["run", "--simulate"]).simulate == 0
    assert build_parser().parse_args(["run"]).simulate is None
    config = with_simulation(parse_config({"simulate": {"gpus": 2, "cooling_scale": 0.5}}), 0)
    assert (config.simulate.enabled, config.simulate.gpus, config.simulate.cooling_scale) == (True, 2, 0.5)
    with pytest.raises(ConfigError, match="simulate.gpus"):
        with_simulation(Config(), 99)
    with pytest.raises(ConfigError, match="simulate.faults.fan_stuck_percent"):
        parse_config({"simulate": {"faults": {"fan_stuck_percent": 130}}})


def test_idle_between_attached_runs_means_idle(tmp_path: Path) -> None:
    """`load_without_trainer` is the load of a simulator that supervises nothing yet: once a run was listed, a card no
    run loads idles, also after the last ended run was dropped (issue 50, item 12: not 109 °C between runs)."""
    sim = make(tmp_path, count=1)
    nothing = PublishedState(snapshot=Snapshot(0.0, 0.0, ()), trainers=())
    sim.observe(nothing)
    assert sim.cards[0].load_ratio == 1.0  # nothing listed yet: the fan curve has work
    ended = TrainerState(name="train", phase=TrainerPhase.FINISHED, origin="attached")
    for listed in [(trainer(TrainerPhase.RUNNING),), (ended,), ()]:
        sim.observe(PublishedState(snapshot=Snapshot(0.0, 0.0, ()), trainers=listed))
    assert sim.cards[0].load_ratio == 0.0  # the ended run dropped: idle, not back to full load
    sim.advance_by(1200)
    junction = reading(sim).temp("junction")
    assert junction is not None and junction.temp_c is not None and junction.temp_c < 60
