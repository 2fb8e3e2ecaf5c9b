"""`gpuwatch receipt JOBID` against a real simulated daemon: a prolog's DCGM-style mapping file puts the
simulated desktop client in job 4711; /metrics carries the job; the receipt's energy is the increase of the
GPU's energy counter over the job's ticks; after the epilog removes the file, the receipt stays."""

from __future__ import annotations

import json
import re
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuwatch.cli.health.receipt import render
from tests.support.processes import Processes
from tests.support.stack import GPUWATCH
from tests.support.waiting import wait_for

SLOT = "0000:28:00.0"


@pytest.fixture
def processes(tmp_path: Path) -> Iterator[Processes]:
    with Processes(tmp_path / "logs") as started:
        yield started


def cli(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*GPUWATCH, *args, "-c", str(config)], capture_output=True, text=True, timeout=60)


def test_a_mapped_job_in_metrics_and_its_receipt(tmp_path: Path, processes: Processes) -> None:
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    config = tmp_path / "gpuwatch.toml"
    config.write_text(f'runtime_dir = "{tmp_path / "run"}"\ninterval_s = 0.2\n[http]\nlisten = "127.0.0.1"\n'
                      f'port = 0\n[simulate]\nenabled = true\ndesktop_client = true\ntree_dir = "{tmp_path / "tree"}"\n'
                      f'[health]\njob_mapping_dirs = ["{jobs}"]\n')
    daemon = processes.start("gpuwatch", [*GPUWATCH, "run", "-c", str(config)])
    port = int(wait_for(lambda: re.search(r"HTTP listening on [\d.]+:(\d+)", daemon.log.read_text()), "HTTP",
                        60, detail=daemon.tail).group(1))
    state = tmp_path / "run/state.json"
    wait_for(lambda: json.loads(state.read_text())["processes"], "the desktop client", 60,
             ignore=(OSError, ValueError, KeyError), detail=daemon.tail)
    (jobs / "0").write_text("4711\n")  # the prolog (DCGM's form)

    def metrics() -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
            return str(response.read().decode())

    wait_for(lambda: f'gpuwatch_gpu_job_info{{gpu="{SLOT}",job_id="4711"}} 1.0' in metrics(), "the job in /metrics",
             60, detail=daemon.tail)
    assert re.search(rf'gpuwatch_gpu_processes{{gpu="{SLOT}",job_id="4711",scope="unsupervised"}} 1\.0', metrics())
    first = json.loads(state.read_text())
    wait_for(lambda: json.loads(state.read_text())["jobs"][0]["gpus"][0]["energy_j"] > 0, "energy counted", 60,
             ignore=(OSError, ValueError), detail=daemon.tail)
    (jobs / "0").unlink()  # the epilog
    wait_for(lambda: not json.loads(state.read_text())["jobs"][0]["active"], "the job over", 60,
             ignore=(OSError, ValueError), detail=daemon.tail)
    last = json.loads(state.read_text())
    job = last["jobs"][0]
    assert job["job_id"] == "4711" and "gpuwatch_gpu_job_info" not in metrics()
    # The receipt's energy is the GPU counter's increase between the tick before the job and its last tick.
    assert first["gpus"][0]["energy_joules"] <= last["gpus"][0]["energy_joules"]
    done = cli(config, "receipt", "4711")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("job 4711") and f"{SLOT}: " in done.stdout
    assert json.loads(cli(config, "receipt", "4711", "--json").stdout)["job_id"] == "4711"
    missing = cli(config, "receipt", "999")
    assert missing.returncode == 1 and "job 999 was not seen" in missing.stderr


def test_render_names_each_gpu() -> None:
    job = {"job_id": "7", "user": "alice", "first_seen_unix": 10.0, "last_seen_unix": 70.0, "active": False,
           "paused_s": 5.0, "gpus": [{"gpu_id": SLOT, "energy_j": 12_000.0, "max_temps_c": {"junction": 88.0},
                                      "governed_s": 30.0, "throttled_s": {"thermal": 2.0, "power": 0.0},
                                      "resets": 0}]}
    assert render(job) == ("job 7 (alice): 60 s on 1 GPU(s), 12.0 kJ (final)\n  paused 5 s\n"
                           f"  {SLOT}: 12.0 kJ, max junction 88°C\n"
                           "    governed 30 s, throttled thermal 2 s, resets 0\n")


def test_render_says_what_a_restart_left_unseen() -> None:
    job = {"job_id": "7", "user": None, "first_seen_unix": 10.0, "last_seen_unix": 130.0, "active": True,
           "paused_s": 0.0, "unobserved_s": 20.0, "gaps": [[40.0, 52.0], [90.0, 98.0]],
           "gpus": [{"gpu_id": SLOT, "energy_j": 12_000.0, "max_temps_c": {"junction": 88.0}, "governed_s": 0.0,
                     "throttled_s": {}, "resets": 0, "gap_energy_j": 2_500.0, "energy_unseen_s": 8.0}]}
    assert render(job) == ("job 7: 120 s on 1 GPU(s), 12.0 kJ + some not counted (partial: running at the last tick)\n"
                           "  paused 0 s\n"
                           "  unobserved 20 s: no daemon ran 2 time(s) (a restart, a crash)\n"
                           "    its temperatures, throttling, caps and pauses then are not in this receipt\n"
                           f"  {SLOT}: 12.0 kJ, max junction 88°C\n    governed 0 s, throttled none, resets 0\n"
                           "    2.5 kJ of it while no daemon ran, from the GPU's energy counter\n"
                           "    not counted: the energy of 8 s with no daemon (its counter could not tell)\n")


@pytest.mark.parametrize(("unseen_from", "said"), [
    ("scheduler", "    the first from the job's start on this node: when Slurm made its cgroup\n"),
    ("processes", "    the first from the job's start on this node: its processes' earliest start\n"),
    (None, ""),
])
def test_render_says_where_the_start_of_a_job_already_running_came_from(unseen_from: str | None, said: str) -> None:
    job = {"job_id": "7", "user": None, "first_seen_unix": 100.0, "last_seen_unix": 130.0, "active": True,
           "paused_s": 0.0, "unobserved_s": 60.0, "gaps": [[40.0, 100.0]], "unseen_from": unseen_from, "gpus": []}
    assert render(job) == ("job 7: 30 s on 0 GPU(s), 0.0 kJ (partial: running at the last tick)\n  paused 0 s\n"
                           "  unobserved 60 s: no daemon ran 1 time(s) (a restart, a crash)\n"
                           "    its temperatures, throttling, caps and pauses then are not in this receipt\n" + said)
