"""A job's receipt across daemon restarts, with a real simulated daemon: a prolog's mapping file puts the simulated
desktop client in job 4711; the daemon is SIGKILLed mid-job and started again, reloaded, stopped cleanly and started
again. The receipt after has the energy and the highest temperatures of every part, and says each time no daemon
ran (the simulated card's energy counter is the daemon's own integral: the gaps' energy is left out, and said).
A state file from another boot, or garbage, is ignored with one log line."""

from __future__ import annotations

import json
import re
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.processes import Processes, Started, get_json, wait_up
from tests.support.stack import GPUWATCH

SLOT = "0000:28:00.0"
WAIT_S = 90.0  # a daemon's start and a few ticks on 2 loaded cores


@pytest.fixture
def processes(tmp_path: Path) -> Iterator[Processes]:
    with Processes(tmp_path / "logs") as started:
        yield started


def write_config(tmp_path: Path, jobs_kept: int = 32) -> Path:
    config = tmp_path / "gpuwatch.toml"
    config.write_text(f'runtime_dir = "{tmp_path / "run"}"\ninterval_s = 0.2\n[http]\nlisten = "127.0.0.1"\n'
                      f'port = 0\n[simulate]\nenabled = true\ndesktop_client = true\ntree_dir = "{tmp_path / "tree"}"\n'
                      f'[health]\njob_mapping_dirs = ["{tmp_path / "jobs"}"]\njobs_kept = {jobs_kept}\n')
    return config


def start(processes: Processes, config: Path, name: str) -> tuple[Started, int]:
    daemon = processes.start(name, [*GPUWATCH, "run", "-c", str(config)])
    port = int(wait_up("HTTP", lambda: re.search(r"HTTP listening on [\d.]+:(\d+)", daemon.log.read_text()), daemon,
                       WAIT_S).group(1))
    return daemon, port


def job(state: Path) -> Any:
    """Job 4711's receipt in the state file, None before it has one."""
    return next((j for j in json.loads(state.read_text())["jobs"] if j["job_id"] == "4711"), None)


def counted(state: Path) -> float:
    """Job 4711's energy so far, 0 before it has a receipt (the client's process may come a tick late)."""
    receipt = job(state)
    return float(receipt["gpus"][0]["energy_j"]) if receipt is not None else 0.0


def ended(daemon: Started, how: signal.Signals) -> None:
    daemon.process.send_signal(how)
    daemon.process.wait(timeout=WAIT_S)  # the kernel has dropped its runtime lock


def cli(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*GPUWATCH, *args, "-c", str(config)], capture_output=True, text=True, timeout=60)


def test_a_receipt_survives_a_sigkill_a_reload_and_a_clean_restart(tmp_path: Path, processes: Processes) -> None:
    (tmp_path / "jobs").mkdir()
    config = write_config(tmp_path)
    state = tmp_path / "run/state.json"
    first, _ = start(processes, config, "first")
    wait_up("the desktop client", lambda: json.loads(state.read_text())["processes"], first, WAIT_S)
    (tmp_path / "jobs/0").write_text("4711\n")  # the prolog (DCGM's form)
    wait_up("energy counted", lambda: counted(state) > 0, first, WAIT_S)
    before = job(state)
    ended(first, signal.SIGKILL)  # mid-job: the state file stays as its last tick wrote it
    killed = json.loads(state.read_text())
    assert killed["daemon"]["boot_id"] == Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    last = job(state)  # the first half, up to the killed daemon's last tick
    assert last["gpus"][0]["energy_j"] >= before["gpus"][0]["energy_j"] > 0

    second, port = start(processes, config, "second")
    after = wait_up("the job counted again", lambda: (j := job(state)) and j["gpus"][0]["energy_j"]
                    > last["gpus"][0]["energy_j"] and j["unobserved_s"] > 0 and j, second, WAIT_S)
    assert "took back 1 job receipt(s) (1 running)" in second.log.read_text()
    (gap,) = after["gaps"]
    assert gap[0] == killed["taken_unix"] and gap[1] > gap[0]
    assert after["unobserved_s"] == pytest.approx(gap[1] - gap[0])
    gpu, half = after["gpus"][0], last["gpus"][0]
    assert after["first_seen_unix"] == last["first_seen_unix"] and after["active"]
    assert gpu["energy_unseen_s"] == pytest.approx(after["unobserved_s"]) and gpu["gap_energy_j"] == 0
    assert set(gpu["max_temps_c"]) == set(half["max_temps_c"])
    assert all(gpu["max_temps_c"][label] >= temp for label, temp in half["max_temps_c"].items())
    status = next(j for j in get_json(f"http://127.0.0.1:{port}/status")["jobs"] if j["job_id"] == "4711")
    assert status["gaps"] == [gap] and status["unobserved_s"] == after["unobserved_s"]
    text = cli(config, "receipt", "4711")
    assert text.returncode == 0, text.stderr
    assert f"unobserved {after['unobserved_s']:.0f} s: no daemon ran 1 time(s)" in text.stdout
    assert "not counted: the energy of" in text.stdout and "+ some not counted" in text.stdout
    assert json.loads(cli(config, "receipt", "4711", "--json").stdout)["gaps"] == [gap]

    # SIGHUP (a smaller jobs_kept): the receipt is kept as it is, the gap included.
    write_config(tmp_path, jobs_kept=1)
    second.process.send_signal(signal.SIGHUP)
    wait_up("the reload", lambda: "config reloaded" in second.log.read_text(), second, WAIT_S)
    reloaded = wait_up("a tick after the reload", lambda: (j := job(state))["last_seen_unix"] > after["last_seen_unix"]
                       and j, second, WAIT_S)
    assert reloaded["gaps"] == [gap] and reloaded["gpus"][0]["energy_j"] >= gpu["energy_j"]

    ended(second, signal.SIGTERM)  # a clean stop (systemctl restart): the state file is kept as state.last.json
    assert second.process.returncode == 0 and not state.exists()
    kept = json.loads((tmp_path / "run/state.last.json").read_text())
    stopped = next(j for j in kept["jobs"] if j["job_id"] == "4711")
    between = cli(config, "receipt", "4711", "--json")  # an epilog between the stop and the start
    assert between.returncode == 0 and json.loads(between.stdout) == {**stopped, "receipt": "partial"}
    assert "no daemon runs; the receipts as the daemon that stopped at" in between.stderr
    third, _ = start(processes, config, "third")
    again = wait_up("the second gap", lambda: (j := job(state)) and len(j["gaps"]) == 2 and j, third, WAIT_S)
    assert again["gaps"][0] == gap and again["gaps"][1][0] == kept["taken_unix"]
    assert again["gpus"][0]["energy_j"] >= stopped["gpus"][0]["energy_j"] >= gpu["energy_j"]
    assert again["unobserved_s"] == pytest.approx(sum(b - a for a, b in again["gaps"]))
    for daemon in (first, second, third):
        assert "Traceback" not in daemon.log.read_text()


@pytest.mark.parametrize(("spoil", "says"), [
    (lambda doc: json.dumps({**doc, "daemon": {**doc["daemon"], "boot_id": "an-earlier-boot"}}),
     "written in another boot"),
    (lambda doc: json.dumps(doc)[: len(json.dumps(doc)) // 2], "unreadable"),
])
def test_a_state_file_from_another_boot_or_garbage_is_ignored_with_one_line(
        tmp_path: Path, processes: Processes, spoil: Any, says: str) -> None:
    (tmp_path / "jobs").mkdir()
    (tmp_path / "jobs/0").write_text("4711\n")
    config = write_config(tmp_path)
    state = tmp_path / "run/state.json"
    first, _ = start(processes, config, "first")
    wait_up("the job's receipt", lambda: counted(state) > 0, first, WAIT_S)
    ended(first, signal.SIGKILL)
    state.write_text(spoil(json.loads(state.read_text())))
    second, _ = start(processes, config, "second")
    fresh = wait_up("a new receipt", lambda: job(state), second, WAIT_S)
    assert fresh["gaps"] == [] and fresh["unobserved_s"] == 0  # started empty: nothing said about the other one
    lines = [line for line in second.log.read_text().splitlines() if "receipts" in line]
    assert len(lines) == 1 and says in lines[0] and "they start empty" in lines[0], lines
    assert "Traceback" not in second.log.read_text()
