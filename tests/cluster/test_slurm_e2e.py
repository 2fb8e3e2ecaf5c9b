"""Issue 34 on a real Slurm (munged + slurmctld + slurmd, Debian's 22.05; tests/support/slurm.py), as root.

* slurmd's HealthCheckProgram is `gpuwatch health --slurm`: a simulated GPU reset (the card stops answering,
  the fan goes failsafe) drains the node with a ``gpuwatch:G0..`` reason after [health] drain_after_checks
  checks; the card answering again resumes it after resume_after_checks; an admin's drain (``maint``) is
  left alone however healthy the node is; a card held under its limit by a lowered cap (normal operation,
  a Nagios WARNING) never drains the node.
* A batch job's prolog writes the DCGM-style mapping file: the simulated GPU's process carries the job id
  in /metrics while the job runs; the epilog's `gpuwatch receipt $SLURM_JOB_ID` prints its receipt.
* A batch job of two tasks, `srun gpuwatch train -- python pause_loop.py` (issue 33's attached runs): both
  attach to the node's daemon with the job's id (the state, `gpuwatch status`, gpuwatch_trainer_info; their
  GPU processes through the prolog's mapping), are paused when the card is over its limit and resumed under
  it, and the epilog's receipt counts the job's GPU, its energy and the seconds its runs were held.

The receipt against Prometheus' integrals is tests/cluster/test_receipt_promql.py's (without Slurm); a job
across nodes is tests/cluster/test_srun_pause.py's (this Slurm has one node).
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import slurm
from tests.support.paths import REPO
from tests.support.processes import Processes
from tests.support.stack import GPUWATCH, daemon_config, start_gpuwatch
from tests.support.tmpfs import fill, tmpfs
from tests.support.waiting import wait_for

pytestmark = pytest.mark.skipif(bool(slurm.missing()), reason=slurm.missing() or "runs")
SLOT = "0000:28:00.0"


@pytest.fixture
def processes(tmp_path: Path) -> Iterator[Processes]:
    with Processes(tmp_path / "logs") as started:
        yield started


def reason(cluster: slurm.Slurm) -> str | None:
    found = re.search(r"^\s*Reason=(.*?)(?: \[[^]]*\])?$", cluster.show_node(), re.M)
    return found.group(1) if found else None


def drained(cluster: slurm.Slurm) -> bool:
    state = re.search(r"State=(\S+)", cluster.show_node())
    return state is not None and "DRAIN" in state.group(1)


def said(root: Path) -> str:
    log = root / "health.log"
    return log.read_text() if log.exists() else ""


def checks_run(root: Path) -> int:
    log = root / "health.log"
    return len(log.read_text().splitlines()) if log.exists() else 0


def test_a_gpu_fault_drains_healing_resumes_an_admin_drain_stays(tmp_path: Path, processes: Processes) -> None:
    config = tmp_path / "gpuwatch.toml"
    config.write_text(daemon_config(tmp_path / "run", f'[simulate]\nenabled = true\ntree_dir = "{tmp_path / "tree"}"\n'
                                    "[simulate.faults]\ngpu_reset_outage_s = 12.0\n"
                                    "[health]\ndrain_after_checks = 2\nresume_after_checks = 2\n"))
    daemon, _ = start_gpuwatch(processes, "gpuwatch", config)
    root = tmp_path / "slurm"
    check = slurm.python_command("health", "--slurm", "-c", str(config))
    cluster = slurm.start_slurm(processes, root, health_check=f"{check} >> {root / 'health.log'} 2>&1", interval_s=2)
    wait_for(lambda: checks_run(root) >= 2, "slurmd to run the health check", 60)
    assert not drained(cluster), cluster.show_node()
    assert "nothing to do" in (root / "health.log").read_text()

    reset = subprocess.run([*GPUWATCH, "simulate-reset", "-c", str(config)], capture_output=True, text=True,
                           timeout=60)
    assert reset.returncode == 0, reset.stderr
    # The check says what it did once scontrol has done it: wait for both (the node's state comes first).
    wait_for(lambda: drained(cluster) and "drained " in said(root), "the node drained by gpuwatch", 90,
             detail=lambda: cluster.show_node())
    why = reason(cluster)
    assert why is not None and re.match(rf"gpuwatch:G0(06|10) {SLOT} ", why), cluster.show_node()
    # The outage ends, the card answers: two healthy checks later the node is back.
    wait_for(lambda: not drained(cluster) and "resumed " in said(root), "the node resumed", 120,
             detail=lambda: cluster.show_node() + daemon.tail())

    cluster.scontrol("update", f"nodename={cluster.node}", "state=drain", "reason=maint: new PSU")
    seen = checks_run(root)
    wait_for(lambda: checks_run(root) >= seen + 4, "four more healthy checks", 60)
    assert drained(cluster) and reason(cluster) == "maint: new PSU", cluster.show_node()
    assert "left alone" in (root / "health.log").read_text()


def test_a_jobs_process_carries_its_job_id_and_the_epilog_prints_its_receipt(tmp_path: Path,
                                                                             processes: Processes) -> None:
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    config = tmp_path / "gpuwatch.toml"
    config.write_text(daemon_config(tmp_path / "run", f'[simulate]\nenabled = true\ndesktop_client = true\n'
                                    f'tree_dir = "{tmp_path / "tree"}"\n[health]\njob_mapping_dirs = ["{jobs}"]\n',
                                    interval_s=0.25))
    _, address = start_gpuwatch(processes, "gpuwatch", config)
    root = tmp_path / "slurm"
    receipt = slurm.python_command("receipt", "-c", str(config), "--json")
    cluster = slurm.start_slurm(
        processes, root,
        # The prolog maps the job onto GPU index 0 (DCGM's form); the epilog takes the mapping away, then asks
        # for the receipt (the daemon keeps it after the job's last tick).
        prolog=f'echo "$SLURM_JOB_ID" > {jobs}/0',
        epilog=f'rm -f {jobs}/0; sleep 1; {receipt} "$SLURM_JOB_ID" > {root}/receipt-$SLURM_JOB_ID.json 2>&1')

    def metrics() -> str:
        with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as response:
            return str(response.read().decode())

    job = cluster.sbatch("-o", str(root / "job.out"), "--wrap", "sleep 8")
    wait_for(lambda: f'gpuwatch_gpu_job_info{{gpu="{SLOT}",job_id="{job}"}} 1.0' in metrics(),
             "the job's id in /metrics", 60)
    assert f'gpuwatch_gpu_processes{{gpu="{SLOT}",job_id="{job}",scope="unsupervised"}} 1.0' in metrics()
    out = root / f"receipt-{job}.json"
    wait_for(lambda: out.exists() and out.read_text().strip(), "the epilog's receipt", 90)
    doc = json.loads(out.read_text())
    assert doc["job_id"] == job and doc["gpus"][0]["gpu_id"] == SLOT and doc["gpus"][0]["energy_j"] > 0
    wait_for(lambda: "gpuwatch_gpu_job_info" not in metrics(), "the job's series gone after the epilog", 30)


def test_a_governed_node_is_never_drained(tmp_path: Path, processes: Processes) -> None:
    """A hot card held under its limit by a lowered power cap is gpuwatch doing its job: a note (Nagios
    WARNING), never a drain."""
    config = tmp_path / "gpuwatch.toml"
    config.write_text(daemon_config(tmp_path / "run", f'[simulate]\nenabled = true\ntree_dir = "{tmp_path / "tree"}"\n'
                                    "time_scale = 50.0\ncooling_scale = 0.4\n"
                                    "[health]\ndrain_after_checks = 1\n", interval_s=0.25))
    daemon, _ = start_gpuwatch(processes, "gpuwatch", config)
    state = tmp_path / "run/state.json"
    wait_for(lambda: "power capped" in " ".join(json.loads(state.read_text())["health"]["notes"]), "the cap governing",
             90, ignore=(OSError, ValueError, KeyError, TypeError), detail=daemon.tail)
    root = tmp_path / "slurm"
    check = slurm.python_command("health", "--slurm", "-c", str(config))
    cluster = slurm.start_slurm(processes, root, health_check=f"{check} >> {root / 'health.log'} 2>&1", interval_s=2)
    wait_for(lambda: checks_run(root) >= 4, "four health checks", 60)
    assert not drained(cluster), cluster.show_node()
    lines = (root / "health.log").read_text().splitlines()
    assert all("healthy check(s) in a row, nothing to do" in line for line in lines), lines
    nagios = subprocess.run([*GPUWATCH, "health", "--format", "nagios", "-c", str(config)], capture_output=True,
                            text=True, timeout=60)
    assert nagios.returncode == 1 and nagios.stdout.startswith("GPUWATCH WARNING - gpuwatch: healthy ("), nagios.stdout


HOT = "[thermal]\nedge_limit_c = 20\n"  # ambient 30 °C: every simulated card is over it
COOL = "[thermal]\nedge_limit_c = 140\njunction_limit_c = 140\nmem_limit_c = 140\n"


def test_srun_gpuwatch_train_carries_its_job_is_paused_when_hot_and_its_receipt_covers_it(
        short_dir: Path, tmp_path: Path, processes: Processes) -> None:
    """A batch job of two tasks, `srun gpuwatch train -- python pause_loop.py`: each task's wrapper attaches to the
    node's daemon (runs ``loop`` and ``loop-2``); each carries the job's id (status, gpuwatch_trainer_info), so
    do their GPU processes (the prolog's mapping: this Slurm runs proctrack/linuxproc); a hot card pauses both,
    cool resumes both; the epilog's receipt has the job's GPU, its energy and the seconds its runs were held."""
    jobs, run = short_dir / "jobs", short_dir / "run"
    jobs.mkdir()
    config = short_dir / "gpuwatch.toml"

    def write(thermal: str) -> None:
        config.write_text(daemon_config(run, f'[simulate]\nenabled = true\ntree_dir = "{short_dir / "tree"}"\n'
                                        "[attached]\ndebounce_s = 0\nmin_pause_s = 0\n"
                                        f'[health]\njob_mapping_dirs = ["{jobs}"]\n{thermal}', interval_s=0.25))

    write(COOL)
    daemon, address = start_gpuwatch(processes, "gpuwatch", config)
    root = tmp_path / "slurm"
    receipt = slurm.python_command("receipt", "-c", str(config), "--json")
    cluster = slurm.start_slurm(
        processes, root, prolog=f'echo "$SLURM_JOB_ID" > {jobs}/0',
        epilog=f'rm -f {jobs}/0; sleep 1; {receipt} "$SLURM_JOB_ID" > {root}/receipt-$SLURM_JOB_ID.json 2>&1')
    train = slurm.python_command("train", "--runtime-dir", str(run), "--name", "loop", "--", sys.executable,
                                 str(REPO / "tests/support/pause_loop.py"), "--step-s", "0.05", launcher="srun")
    # Slurm hands the job the submitting shell's environment (--export=ALL): its XDG_RUNTIME_DIR is the login
    # node's /run/user/<uid>, which the compute node does not have; the wrapper's run directory goes to /tmp.
    job = cluster.sbatch("-o", str(root / "job.out"), f"--export=ALL,XDG_RUNTIME_DIR={short_dir / 'login-node'}",
                         "--ntasks=2", "--overcommit", "--wrap", train)  # the node has one CPU: two tasks on it

    def metrics() -> str:
        with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as response:
            return str(response.read().decode())

    names = ("loop", "loop-2")

    def runs() -> dict[str, dict[str, Any]]:
        try:
            trainers = json.loads((run / "state.json").read_text())["trainers"]
        except (OSError, ValueError, KeyError):
            return {}
        return {t["name"]: t for t in trainers if t["name"] in names}

    def all_runs(check: Callable[[dict[str, Any]], object]) -> bool:
        found = runs()
        return len(found) == 2 and all(check(t) for t in found.values())

    def detail() -> str:
        out = root / "job.out"
        return f"{runs()}\n{out.read_text() if out.exists() else ''}\n{daemon.tail()}"

    wait_for(lambda: all_runs(lambda t: t["phase"] == "running" and t["steps_total"]),
             "both tasks' runs attached and stepping", 90, detail=detail)
    assert {(t["origin"], t["job_id"]) for t in runs().values()} == {("attached", job)}, runs()
    wait_for(lambda: f'gpuwatch_gpu_processes{{gpu="{SLOT}",job_id="{job}",scope="supervised"}} 2.0' in metrics(),
             "the runs' GPU processes under the job's id in /metrics", 60, detail=detail)
    for name in names:
        assert re.search(rf'gpuwatch_trainer_info{{gpus="",job_id="{job}",origin="attached",trainer="{name}"}} 1\.0',
                         metrics()), metrics()
    status = subprocess.run([*GPUWATCH, "status", "-c", str(config)], capture_output=True, text=True, timeout=60)
    assert status.stdout.count(f"[attached, root, job {job}]") == 2, status.stdout + status.stderr

    write(HOT)  # [thermal] is live: a SIGHUP and the card is over its limit
    daemon.process.send_signal(signal.SIGHUP)
    wait_for(lambda: all_runs(lambda t: t["phase"] == "paused"), "both runs held for the hot card", 60, detail=detail)
    write(COOL)
    daemon.process.send_signal(signal.SIGHUP)
    wait_for(lambda: all_runs(lambda t: t["phase"] == "running" and t["resumes_total"] == 1),
             "both runs resumed once the card is cool", 60, detail=detail)

    for name in names:
        stop = subprocess.run([*GPUWATCH, "stop", name, "-c", str(config)], capture_output=True, text=True,
                              timeout=60)
        assert stop.returncode == 0, stop.stdout + stop.stderr
    out = root / f"receipt-{job}.json"
    wait_for(lambda: out.exists() and out.read_text().strip(), "the epilog's receipt", 90, detail=detail)
    doc = json.loads(out.read_text())
    assert doc["job_id"] == job and [g["gpu_id"] for g in doc["gpus"]] == [SLOT], doc
    assert doc["gpus"][0]["energy_j"] > 0 and doc["paused_s"] > 0, doc
    assert doc["user"] == "root", doc


def test_a_stuck_daemon_in_a_full_runtime_directory_drains_the_node(tmp_path: Path, processes: Processes) -> None:
    """Issue 46: the runtime directory is a full tmpfs and the daemon is stuck (SIGSTOP) with a garbage state file
    left in it. The gate cannot save its count there, so it drains at the first unhealthy check, and the reason is
    the unusable state (G014), never "G002 daemon not running". The epilog's `receipt` says the daemon runs."""
    daemon = None
    with tmpfs(tmp_path / "run") as run:
        try:
            config = tmp_path / "gpuwatch.toml"
            config.write_text(daemon_config(run, f'[simulate]\nenabled = true\ntree_dir = "{tmp_path / "tree"}"\n'
                                            "[health]\ndrain_after_checks = 2\n"))
            daemon, _ = start_gpuwatch(processes, "gpuwatch", config)
            state = run / "state.json"
            wait_for(lambda: json.loads(state.read_text()).get("health"), "the first verdict", 60,
                     ignore=(OSError, ValueError))
            daemon.process.send_signal(signal.SIGSTOP)
            state.write_text(json.dumps({**json.loads(state.read_text()), "taken_unix": "soon"}))
            fill(run)  # whatever the check would create there now fails with ENOSPC
            assert not (run / "slurm-checks.json").exists()
            root = tmp_path / "slurm"
            check = slurm.python_command("health", "--slurm", "-c", str(config))
            cluster = slurm.start_slurm(processes, root, health_check=f"{check} >> {root / 'health.log'} 2>&1",
                                        interval_s=2)
            wait_for(lambda: drained(cluster) and "drained " in said(root), "the node drained at once", 90,
                     detail=lambda: cluster.show_node() + said(root))
            why = reason(cluster)
            assert why is not None and why.startswith("gpuwatch:G014 daemon state unusable: taken_unix"), why
            assert "at once: the check count cannot be saved" in said(root) and "Traceback" not in said(root)
            receipt = subprocess.run([*GPUWATCH, "receipt", "7", "-c", str(config)], capture_output=True, text=True,
                                     timeout=120)
            assert receipt.returncode == 3 and f"the daemon (pid {daemon.process.pid}) runs" in receipt.stderr
        finally:
            if daemon is not None:
                daemon.process.send_signal(signal.SIGCONT)
                daemon.process.terminate()
                daemon.process.wait(60)
