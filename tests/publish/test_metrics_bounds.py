"""One bad series never costs the others on /metrics (issue 31 point 7): a value no float can carry is left
out and counted, a part that fails to render is left out whole and counted; every scrape answers 200."""

from __future__ import annotations

import urllib.request
from dataclasses import replace
from pathlib import Path

from gpuwatch.model import GpuProcess, GpuReading, PublishedState
from gpuwatch.publish.http import HttpServer
from gpuwatch.publish.metrics import render
from gpuwatch.publish.state import StateHolder
from tests.support.published import example_state

HUGE = 10**400  # float(HUGE) raises OverflowError: the exposition printed none of /metrics for it


def _scrape(state: PublishedState) -> tuple[int, str]:
    """/metrics from a real HTTP server on a loopback port."""
    holder = StateHolder()
    holder.publish(state, {})
    server = HttpServer(holder, "127.0.0.1", 0)
    server.start()
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/metrics", timeout=10) as response:
            return response.status, response.read().decode()
    finally:
        server.stop()


def _with_processes(state: PublishedState, *rows: GpuProcess) -> PublishedState:
    return replace(state, snapshot=replace(state.snapshot, processes=rows))


def test_a_value_no_float_can_carry_is_dropped_and_counted(tmp_path: Path) -> None:
    state = example_state(tmp_path)
    gpu = state.snapshot.gpus[0]
    hostile = GpuProcess(pid=4242, gpu_id=gpu.gpu_id, command="miner", vram_bytes=HUGE)
    bad_gpu: GpuReading = replace(gpu, vram_used_bytes=HUGE)
    state = _with_processes(state, hostile)
    state = replace(state, snapshot=replace(state.snapshot, gpus=(bad_gpu, *state.snapshot.gpus[1:])))
    status, text = _scrape(state)
    assert status == 200
    assert f'gpuwatch_gpu_vram_used_bytes{{gpu="{gpu.gpu_id}"}}' not in text
    assert f'gpuwatch_gpu_processes_vram_bytes{{gpu="{gpu.gpu_id}",job_id="",scope="unsupervised"}}' not in text
    assert 'gpuwatch_metrics_dropped_series{family="gpuwatch_gpu_vram_used_bytes"} 1.0' in text
    assert 'gpuwatch_metrics_dropped_series{family="gpuwatch_gpu_processes_vram_bytes"} 1.0' in text
    # Everything else is there: the same GPU's other values, the process count, the other GPUs.
    assert f'gpuwatch_gpu_up{{gpu="{gpu.gpu_id}"}} 1.0' in text
    assert f'gpuwatch_gpu_processes{{gpu="{gpu.gpu_id}",job_id="",scope="unsupervised"}} 1.0' in text
    for other in state.snapshot.gpus[1:]:
        assert f'gpuwatch_gpu_up{{gpu="{other.gpu_id}"}}' in text


def test_a_part_that_fails_to_render_costs_only_itself(tmp_path: Path) -> None:
    state = example_state(tmp_path)
    gpu = state.snapshot.gpus[0]
    # A row whose VRAM is no number at all: the processes' families raise while summing it.
    broken = GpuProcess(pid=4242, gpu_id=gpu.gpu_id, command="miner", vram_bytes="a lot")  # type: ignore[arg-type]
    status, text = _scrape(_with_processes(state, broken))
    assert status == 200
    assert 'gpuwatch_metrics_dropped_series{family="render:processes"} 1.0' in text
    assert "gpuwatch_gpu_processes{" not in text
    assert f'gpuwatch_gpu_up{{gpu="{gpu.gpu_id}"}} 1.0' in text and "gpuwatch_ticks_total" in text


def test_a_clean_state_renders_no_drop_family(tmp_path: Path) -> None:
    assert all(family.name != "gpuwatch_metrics_dropped_series" for family in render(example_state(tmp_path)))
