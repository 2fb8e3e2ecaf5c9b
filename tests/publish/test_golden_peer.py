"""tests/golden/metrics.txt checked against a peer: Prometheus' node_exporter (hwmon and drm collectors)
reading the very same fake tree the golden file's state was sampled from (tests/support/published.py).

The golden file is written by gpuwatch itself (GPUWATCH_UPDATE_GOLDEN=1); this test is what makes its
values more than "what the code printed last time": every quantity node_exporter also exports for these
cards (temperatures and their crit/emergency, power and the cap with its range, fan rpm and range, pwm
mode and duty, busy, VRAM, the card's unique id) must be the golden file's value, in gpuwatch's units.
"""

from __future__ import annotations

import shutil
import subprocess
import urllib.request
from collections.abc import Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.paths import TESTS
from tests.support.processes import free_port
from tests.support.published import GPU_A, GPU_B, two_gpu_tree
from tests.support.waiting import wait_for

NODE_EXPORTER = shutil.which("prometheus-node-exporter") or shutil.which("node_exporter")
GOLDEN = TESTS / "golden" / "metrics.txt"

pytestmark = pytest.mark.skipif(NODE_EXPORTER is None, reason="node_exporter missing: apt-get install "
                                "prometheus-node-exporter (scripts/install-system-deps.sh does it for make test / CI)")

Samples = dict[str, dict[frozenset[tuple[str, str]], float]]


def parse(text: str) -> Samples:
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, {})[frozenset(sample.labels.items())] = sample.value
    return out


def one(samples: Samples, name: str, **labels: str) -> float | None:
    """The value of the sample of ``name`` with exactly these labels (None: there is none)."""
    return samples.get(name, {}).get(frozenset(labels.items()))


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Samples]:
    """node_exporter's hwmon and drm metrics for the golden state's tree."""
    root = tmp_path_factory.mktemp("peer") / "sys"
    two_gpu_tree(root)
    assert NODE_EXPORTER is not None
    port = free_port()
    child = subprocess.Popen([NODE_EXPORTER, f"--path.sysfs={root}", "--collector.disable-defaults",
                              "--collector.hwmon", "--collector.drm", f"--web.listen-address=127.0.0.1:{port}"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        def scrape() -> str | None:
            assert child.poll() is None, child.stderr.read() if child.stderr else ""
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
                    return str(response.read().decode())
            except OSError:
                return None

        yield parse(wait_for(scrape, "node_exporter's /metrics", 60))
    finally:
        child.terminate()
        child.wait(timeout=20)


@pytest.fixture(scope="module")
def golden() -> Samples:
    return parse(GOLDEN.read_text())


def gpu_of_chip(chip: str) -> str:
    """node_exporter's hwmon chip name is "<parent slot>_<device slot>", dots as underscores."""
    for gpu in (GPU_A, GPU_B):
        if chip.endswith(gpu.replace(".", "_")):
            return gpu
    raise AssertionError(f"no GPU for hwmon chip {chip}")


# node_exporter hwmon family -> gpuwatch family, per sensor kind; the values are in the same units.
TEMPS = {"node_hwmon_temp_celsius": "gpuwatch_gpu_temperature_celsius",
         "node_hwmon_temp_crit_celsius": "gpuwatch_gpu_temperature_crit_celsius",
         "node_hwmon_temp_emergency_celsius": "gpuwatch_gpu_temperature_emergency_celsius"}
PER_GPU = {"node_hwmon_power_average_watt": "gpuwatch_gpu_power_watts",
           "node_hwmon_power_cap_watt": "gpuwatch_gpu_power_cap_watts",
           "node_hwmon_power_cap_min_watt": "gpuwatch_gpu_power_cap_min_watts",
           "node_hwmon_power_cap_max_watt": "gpuwatch_gpu_power_cap_max_watts",
           "node_hwmon_power_cap_default_watt": "gpuwatch_gpu_power_cap_default_watts",
           "node_hwmon_fan_rpm": "gpuwatch_gpu_fan_rpm",
           "node_hwmon_fan_min_rpm": "gpuwatch_gpu_fan_min_rpm",
           "node_hwmon_fan_max_rpm": "gpuwatch_gpu_fan_max_rpm",
           "node_hwmon_pwm_enable": "gpuwatch_gpu_fan_pwm_enable"}


def test_hwmon_values_are_node_exporters(node: Samples, golden: Samples) -> None:
    labels = {(dict(k)["chip"], dict(k)["sensor"]): dict(k)["label"] for k in node["node_hwmon_sensor_label"]}
    compared: dict[str, set[str]] = {}
    for theirs, ours in {**TEMPS, **PER_GPU}.items():
        for key, value in node[theirs].items():
            chip, sensor = dict(key)["chip"], dict(key)["sensor"]
            gpu = gpu_of_chip(chip)
            wanted = {"gpu": gpu, "sensor": labels[(chip, sensor)]} if theirs in TEMPS else {"gpu": gpu}
            assert one(golden, ours, **wanted) == pytest.approx(value, abs=1e-9), (ours, wanted, value)
            compared.setdefault(ours, set()).add(gpu)
    # Every family on both cards (node_exporter states each of them for both): nothing compared by accident.
    assert compared == {ours: {GPU_A, GPU_B} for ours in {**TEMPS, **PER_GPU}.values()}


def test_fan_duty_is_node_exporters_pwm_over_its_range(node: Samples, golden: Samples) -> None:
    for key, pwm in node["node_hwmon_pwm"].items():
        chip = dict(key)["chip"]
        low = one(node, "node_hwmon_pwm_min", chip=chip, sensor="pwm1") or 0.0
        high = one(node, "node_hwmon_pwm_max", chip=chip, sensor="pwm1")
        assert high is not None
        duty = one(golden, "gpuwatch_gpu_fan_duty_ratio", gpu=gpu_of_chip(chip))
        assert duty == pytest.approx((pwm - low) / (high - low))


def test_drm_values_are_node_exporters(node: Samples, golden: Samples) -> None:
    """Busy percent as a ratio, VRAM where the card has the files (node_exporter says 0 where it has none:
    gpuwatch leaves the series out, "missing is never 0"), and the unique id."""
    card_gpu = {dict(k)["card"]: dict(k)["gpu"] for k in golden["gpuwatch_gpu_info"]}
    assert sorted(card_gpu.values())[:2] == [GPU_A, GPU_B]
    for key, busy in node["node_drm_gpu_busy_percent"].items():
        gpu = card_gpu[dict(key)["card"]]
        assert one(golden, "gpuwatch_gpu_busy_ratio", gpu=gpu) == pytest.approx(busy / 100)
    for theirs, ours in (("node_drm_memory_vram_size_bytes", "gpuwatch_gpu_vram_total_bytes"),
                         ("node_drm_memory_vram_used_bytes", "gpuwatch_gpu_vram_used_bytes")):
        for key, value in node[theirs].items():
            gpu = card_gpu[dict(key)["card"]]
            size = one(node, "node_drm_memory_vram_size_bytes", card=dict(key)["card"])
            assert one(golden, ours, gpu=gpu) == (value if size else None), (ours, gpu)
    for key in node["node_drm_card_info"]:
        theirs = dict(key)
        ours = next(dict(k) for k in golden["gpuwatch_gpu_info"] if dict(k)["card"] == theirs["card"])
        assert ours["unique_id"] == theirs["unique_id"]
