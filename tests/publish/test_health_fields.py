"""Throttling, energy and PCIe health in the JSON document, the status text and /metrics (absent stays absent)."""

from __future__ import annotations

import json
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest

from gpuwatch.cli.status import exit_code, render
from gpuwatch.model import GpuReading, PublishedState, Snapshot
from gpuwatch.publish.document import to_document
from gpuwatch.publish.metrics import GpuwatchCollector
from tests.support.published import GPU_A, GPU_B, NOW_UNIX, example_state


def samples(state: PublishedState) -> dict[str, float]:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(GpuwatchCollector(lambda: state))
    lines = generate_latest(registry).decode().splitlines()
    return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in lines if line and line[0] != "#"}


def test_document_carries_the_new_fields_as_plain_json(tmp_path: Path) -> None:
    doc = to_document(example_state(tmp_path / "sys"), "daemon")
    json.dumps(doc)  # plain JSON all the way down
    b = next(g for g in doc["gpus"] if g["gpu_id"] == GPU_B)
    assert b["gpu_metrics_revision"] == "1.3"
    assert b["throttle_flags"] == ["PPT0"] and b["throttle_reasons"] == ["power"]
    assert b["indep_throttle_status"] == 1 << 36 | 1  # raw, the idle hotspot bit included
    assert b["throttled_s"] == {"power": 1.0, "current": 0.0, "thermal": 0.0, "other": 0.0}
    assert (b["energy_joules"], b["energy_source"]) == (68.0, "integrated")
    assert (b["pcie_slot_link_speed_gts"], b["pcie_slot_link_width"]) == (8.0, 8)
    assert (b["pcie_aer_correctable_total"], b["pcie_replays_total"]) == (3, 5)
    assert b["sources"] == {"mem_busy_ratio": "gpu_metrics"}
    assert b["temperatures"]["vrmem"]["temp_c"] == 44.0 and b["temperatures"]["vrmem"]["limit_c"] is None
    trainer = doc["trainers"][0]
    assert (trainer["run_energy_j"], trainer["energy_total_j"], trainer["steps_per_kj"]) == (1.8e6, 2.5e6, 4.5)


def test_status_shows_throttling_energy_and_a_slot_below_its_max(tmp_path: Path) -> None:
    doc = to_document(example_state(tmp_path / "sys"), "daemon")
    text = render(doc, now=NOW_UNIX)
    block_a, block_b = text.split(f"[{GPU_B}]")[0].split(f"[{GPU_A}]")[1], text.split(f"[{GPU_B}]")[1]
    assert "thrtl" not in block_a and "pcie" not in block_a and "vrgfx" not in block_a  # nothing to look at
    assert "thrtl  THROTTLING power (PPT0)  throttled power 0m01s" in block_b
    assert "pcie   8.0 GT/s x8 (below max 16.0 GT/s x16)  aer cor/nonfatal/fatal 3/0/0  replays 5" in block_b
    assert "energy <0.001 kWh" in block_b
    assert "energy 0.500 kWh  4.5 steps/kJ" in text
    assert exit_code(doc) == 1  # unchanged rules: the example has a failsafe fan and a daemon failure


def test_a_card_without_any_of_it_shows_none_of_it() -> None:
    gpu = GpuReading("0000:03:00.0", "card0", "amdgpu", power_w=50.0)
    state = PublishedState(Snapshot(NOW_UNIX, 1.0, (gpu,)))
    text = render(to_document(state, "sysfs"), now=NOW_UNIX)
    assert "thrtl" not in text and "pcie" not in text and "energy" not in text
    got = samples(state)
    assert not [k for k in got if "throttle" in k or "energy" in k or "aer" in k or "slot" in k or "replays" in k]


def test_metrics_of_the_example(tmp_path: Path) -> None:
    got = samples(example_state(tmp_path / "sys"))
    assert got[f'gpuwatch_gpu_throttle_active{{gpu="{GPU_B}",reason="power"}}'] == 1
    assert got[f'gpuwatch_gpu_throttle_active{{gpu="{GPU_B}",reason="thermal"}}'] == 0  # idle hotspot bit dropped
    assert got[f'gpuwatch_gpu_energy_joules_total{{gpu="{GPU_A}",source="integrated"}}'] == 36.0
    assert got[f'gpuwatch_gpu_pcie_aer_errors_total{{gpu="{GPU_B}",kind="correctable"}}'] == 3
    assert got[f'gpuwatch_gpu_pcie_slot_link_width_lanes{{gpu="{GPU_B}"}}'] == 8
    assert got[f'gpuwatch_gpu_temperature_celsius{{gpu="{GPU_A}",sensor="vrgfx"}}'] == 49
    assert got[f'gpuwatch_gpu_clock_hertz{{clock="sclk_average",gpu="{GPU_A}"}}'] == 500e6
    assert got['gpuwatch_trainer_steps_per_kilojoule{trainer="resnet"}'] == 4.5
