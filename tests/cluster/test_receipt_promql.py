"""A job's receipt against Prometheus (real, tests/support/stack.py): the energy `gpuwatch receipt` reports
equals PromQL's ``increase(gpuwatch_gpu_energy_joules_total[...])`` over the job's ticks within 1 %, and the
running ``gpuwatch_job_energy_joules_total`` Prometheus scraped last is the receipt's (the job mapped onto the
simulated, busy GPU by a prolog's DCGM-style file, as on a Slurm node without cgroups)."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.processes import Processes
from tests.support.stack import GPUWATCH, daemon_config, missing, query, start_gpuwatch, start_prometheus
from tests.support.waiting import wait_for

pytestmark = pytest.mark.skipif(bool(missing("prometheus")), reason=missing("prometheus") or "runs")
SLOT = "0000:28:00.0"
INTERVAL_S = 0.25
JOB_S = 10.0  # 40 ticks: the 1 % holds at any length; the suite pays for every second


@pytest.fixture
def processes(tmp_path: Path) -> Iterator[Processes]:
    with Processes(tmp_path / "logs") as started:
        yield started


def test_the_receipts_energy_is_promqls_increase_within_1_percent(tmp_path: Path, processes: Processes) -> None:
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    config = tmp_path / "gpuwatch.toml"
    config.write_text(daemon_config(tmp_path / "run", f'[simulate]\nenabled = true\ndesktop_client = true\n'
                                    f'tree_dir = "{tmp_path / "tree"}"\n[health]\njob_mapping_dirs = ["{jobs}"]\n',
                                    interval_s=INTERVAL_S))
    daemon, address = start_gpuwatch(processes, "gpuwatch", config)
    _, prometheus = start_prometheus(processes, tmp_path / "prometheus", (
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        f"scrape_configs:\n  - job_name: gpuwatch\n    static_configs:\n      - targets: ['{address}']\n"))
    wait_for(lambda: query(prometheus, f'gpuwatch_gpu_energy_joules_total{{gpu="{SLOT}"}}'), "a scrape", 60,
             detail=daemon.tail)
    state = tmp_path / "run/state.json"
    (jobs / "0").write_text("4711\n")  # the prolog
    time.sleep(JOB_S)
    (jobs / "0").unlink()  # the epilog, then its receipt once the job's last tick is past
    job = wait_for(lambda: (j := json.loads(state.read_text())["jobs"][0]) and not j["active"] and j, "the job over",
                   60, ignore=(OSError, ValueError, KeyError, IndexError), detail=daemon.tail)
    receipt = subprocess.run([*GPUWATCH, "receipt", "4711", "--json", "-c", str(config)], capture_output=True,
                             text=True, timeout=60)
    assert receipt.returncode == 0, receipt.stderr
    energy_j = json.loads(receipt.stdout)["gpus"][0]["energy_j"]
    assert energy_j == job["gpus"][0]["energy_j"] and energy_j > 0
    # The job's ticks: from the tick before its first (the increase starts there) to its last.
    window_s = job["last_seen_unix"] - job["first_seen_unix"] + INTERVAL_S
    at = job["last_seen_unix"]
    wait_for(lambda: time.time() > at + 3, "Prometheus to scrape past the job's end", 30)

    def increase() -> float:
        expr = f'increase(gpuwatch_gpu_energy_joules_total{{gpu="{SLOT}"}}[{window_s * 1000:.0f}ms] @ {at:.3f})'
        (found,) = query(prometheus, expr)
        return float(found["value"][1])

    promql_j = increase()
    assert abs(promql_j - energy_j) <= 0.01 * energy_j, (promql_j, energy_j, window_s)
    (last,) = query(prometheus, 'last_over_time(gpuwatch_job_energy_joules_total{job_id="4711"}[10m])')
    # The last scrape of the running counter is at most one scrape (1 s of the job's ticks) behind the receipt.
    assert energy_j * (1 - 1.5 / window_s) <= float(last["value"][1]) <= energy_j
