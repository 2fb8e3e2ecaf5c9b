"""The /metrics exposition: golden file (byte for byte), promtool lint, and the collector's rules.

Regenerate the golden file after an intended change with
``GPUWATCH_UPDATE_GOLDEN=1 pytest tests/publish/test_metrics.py`` and review the diff.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from gpuwatch.config.cooling import ThermalConfig
from gpuwatch.limits import limits_in_force
from gpuwatch.model import (
    PWM_MAX_DEFAULT,
    FanMode,
    FanState,
    GpuReading,
    PublishedState,
    ReadError,
    SensorLimit,
    Snapshot,
    TempReading,
)
from gpuwatch.publish.metrics import GpuwatchCollector
from tests.support.paths import TESTS
from tests.support.published import GPU_GONE, example_state

GOLDEN = TESTS / "golden" / "metrics.txt"
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason="promtool missing: apt-get install prometheus "
                                    "(scripts/install-system-deps.sh does it for make test / CI)")


def exposition(state: PublishedState | None) -> str:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(GpuwatchCollector(lambda: state))
    return generate_latest(registry).decode()


def samples(text: str) -> dict[str, float]:
    return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
            if line and not line.startswith("#")}


def test_golden_file(tmp_path: Path) -> None:
    text = exposition(example_state(tmp_path / "sys"))
    if os.environ.get("GPUWATCH_UPDATE_GOLDEN"):
        GOLDEN.write_text(text)
    assert text == GOLDEN.read_text(), "exposition changed: rerun with GPUWATCH_UPDATE_GOLDEN=1 and review the diff"


@pytest.mark.prometheus
@needs_promtool
def test_promtool_check_metrics_accepts_golden() -> None:
    done = subprocess.run([PROMTOOL, "check", "metrics"], input=GOLDEN.read_bytes(), capture_output=True, timeout=30)
    assert done.returncode == 0 and not done.stdout.strip(), (done.stdout + done.stderr).decode()


def test_nothing_before_first_tick() -> None:
    assert exposition(None) == ""


def test_gone_gpu_keeps_info_with_up_zero_and_no_values(tmp_path: Path) -> None:
    got = samples(exposition(example_state(tmp_path / "sys")))
    assert got[f'gpuwatch_gpu_up{{gpu="{GPU_GONE}"}}'] == 0
    assert any(k.startswith("gpuwatch_gpu_info{") and GPU_GONE in k for k in got)
    # Identity stays: the GPU's info, up 0, and which trainer is configured on it (vit uses every GPU).
    # and the health verdict's fault (G004: the GPU is down).
    identity = ("gpuwatch_gpu_info", "gpuwatch_gpu_up", "gpuwatch_trainer_gpu_info", "gpuwatch_health_fault")
    assert [k for k in got if GPU_GONE in k and not k.startswith(identity)] == []


@pytest.mark.parametrize(
    "reading, absent",
    [
        (GpuReading(gpu_id="g", card="card0", backend="amdgpu"), "gpuwatch_gpu_power_watts"),
        (GpuReading(gpu_id="g", card="card0", backend="amdgpu", temps=(TempReading("junction", None, crit_c=110.0),)),
         'gpuwatch_gpu_temperature_celsius{gpu="g",sensor="junction"}'),
        (GpuReading(gpu_id="g", card="card0", backend="amdgpu", temps=(TempReading("junction", None, crit_c=110.0),)),
         'gpuwatch_gpu_thermal_over_limit{gpu="g",sensor="junction"}'),
    ],
)
def test_absent_values_are_absent_series_not_zero(reading: GpuReading, absent: str) -> None:
    text = exposition(PublishedState(snapshot=Snapshot(0.0, 0.0, (reading,))))
    assert absent not in text
    assert 'gpuwatch_gpu_up{gpu="g"} 1.0' in text


@pytest.mark.parametrize(
    "temp_c, thermal, over",
    [
        (99.0, ThermalConfig(), 0.0),  # junction crit 110 - margin 10 = 100
        (100.0, ThermalConfig(), 1.0),
        (80.0, ThermalConfig(junction_limit_c=80.0), 1.0),
    ],
)
def test_thermal_limit_and_over_limit(temp_c: float, thermal: ThermalConfig, over: float) -> None:
    gpu = GpuReading(gpu_id="g", card="card0", backend="amdgpu", temps=(TempReading("junction", temp_c, crit_c=110.0),))
    snapshot = Snapshot(0.0, 0.0, (gpu,))
    got = samples(exposition(PublishedState(snapshot=snapshot, limits_c=limits_in_force(snapshot, thermal))))
    assert got['gpuwatch_gpu_thermal_over_limit{gpu="g",sensor="junction"}'] == over


def test_limits_come_from_the_published_state_only() -> None:
    """The collector keeps no [thermal]: the same readings with other limits in force (a reload's, at the
    next tick) export other limits, and a state without limits exports none, though crit is known."""
    gpu = GpuReading(gpu_id="g", card="card0", backend="amdgpu",
                     temps=(TempReading("edge", 70.0), TempReading("junction", 90.0, crit_c=110.0)))
    snapshot = Snapshot(0.0, 0.0, (gpu,))
    limit, over = "gpuwatch_gpu_temperature_limit_celsius", "gpuwatch_gpu_thermal_over_limit"
    edge, junction = '{gpu="g",sensor="edge"}', '{gpu="g",sensor="junction"}'
    default = samples(exposition(PublishedState(snapshot, limits_c=limits_in_force(snapshot, ThermalConfig()))))
    assert (default[limit + edge], default[over + edge]) == (90.0, 0.0)  # edge_limit_c's default
    assert (default[limit + junction], default[over + junction]) == (100.0, 0.0)  # crit 110 - margin 10
    reloaded = samples(exposition(PublishedState(snapshot, limits_c=(SensorLimit("g", "junction", 85.0),))))
    assert (reloaded[limit + junction], reloaded[over + junction]) == (85.0, 1.0)
    assert limit + edge not in reloaded and over + edge not in reloaded
    assert limit not in exposition(PublishedState(snapshot)) and over not in exposition(PublishedState(snapshot))


def test_current_read_errors_are_flagged_per_sensor() -> None:
    gpu = GpuReading(gpu_id="g", card="card0", backend="amdgpu", errors=(ReadError("temp2_input", "EIO"),))
    got = samples(exposition(PublishedState(snapshot=Snapshot(0.0, 0.0, (gpu,)),
                                            read_errors_total=(("g", "temp2_input", 4),))))
    assert got['gpuwatch_gpu_read_failing{gpu="g",sensor="temp2_input"}'] == 1
    assert got['gpuwatch_gpu_read_errors_total{gpu="g",sensor="temp2_input"}'] == 4


@pytest.mark.parametrize(
    "reading, duty",
    [
        (GpuReading(gpu_id="g", card="card0", backend="amdgpu", pwm=51, pwm_min=0, pwm_max=255, fan_duty_ratio=0.9),
         0.2),
        (GpuReading(gpu_id="g", card="nvidia0", backend="nvml", fan_duty_ratio=0.35), 0.35),  # no pwm1 on NVML
    ],
)
def test_fan_duty_prefers_pwm_then_board_duty(reading: GpuReading, duty: float) -> None:
    got = samples(exposition(PublishedState(snapshot=Snapshot(0.0, 0.0, (reading,)))))
    assert got['gpuwatch_gpu_fan_duty_ratio{gpu="g"}'] == pytest.approx(duty)


def test_a_sampled_pwm_needs_the_cards_range_a_written_one_is_on_the_backends() -> None:
    """Without pwm1_max the sampled duty is unknown (absent), while the controller's own writes are read on
    PWM_MAX_DEFAULT, the scale the backend wrote them on."""
    gpu = GpuReading(gpu_id="g", card="card0", backend="amdgpu", pwm=51)
    fan = FanState(gpu_id="g", backend="pwm1", mode=FanMode.CURVE, applied_pwm=51, readback_pwm=PWM_MAX_DEFAULT)
    got = samples(exposition(PublishedState(snapshot=Snapshot(0.0, 0.0, (gpu,)), fans=(fan,))))
    assert gpu.pwm_ratio is None and gpu.fan_duty is None and 'gpuwatch_gpu_fan_duty_ratio{gpu="g"}' not in got
    assert got['gpuwatch_fan_applied_duty_ratio{gpu="g"}'] == pytest.approx(0.2)
    assert got['gpuwatch_fan_readback_duty_ratio{gpu="g"}'] == 1.0
