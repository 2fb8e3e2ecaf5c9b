"""Where receipts wait while no daemon runs (publish/receipt_store.py) and NodeWatch taking them back, on real files:
the newer of a killed daemon's state file and a stopped daemon's state.last.json, this boot's only; garbage, another
boot or nothing at all is one log line and empty receipts; a reload keeps them and [health] jobs_kept bounds them."""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import psutil
import pytest

from gpuwatch.config.file import Config
from gpuwatch.config.sections import HealthConfig
from gpuwatch.daemon.health import NodeWatch
from gpuwatch.model import DaemonInfo, GpuProcess, GpuReading, PublishedState, Snapshot, TempReading
from gpuwatch.publish.receipt_store import boot_id, keep_last_state, last_state_file, take_back
from gpuwatch.publish.state import BOOT_ID_FILE

SLOT = "0000:03:00.0"
BOOT = "1d2c3b4a-0000-4000-8000-00000000beef"


def fake_proc(root: Path, boot: str = BOOT) -> Path:
    (root / BOOT_ID_FILE).parent.mkdir(parents=True)
    (root / BOOT_ID_FILE).write_text(boot + "\n")  # the kernel's form: the uuid and a newline
    return root


def tick(t: float, jobs: dict[int, str], energy_j: float, temp_c: float = 60.0,
         counter_j: float | None = None) -> PublishedState:
    """GPU A at ``t``: the daemon's energy counter, integrated unless the firmware's (``counter_j``) is trusted."""
    gpu = GpuReading(gpu_id=SLOT, card="card0", backend="amdgpu", energy_joules=energy_j,
                     energy_source="integrated" if counter_j is None else "accumulator",
                     energy_accumulator_j=counter_j, temps=(TempReading("junction", temp_c),))
    rows = tuple(GpuProcess(pid=pid, gpu_id=SLOT, command="python3", job_id=job) for pid, job in jobs.items())
    return PublishedState(snapshot=Snapshot(taken_unix=1000 + t, taken_monotonic=t, gpus=(gpu,), processes=rows),
                          daemon=DaemonInfo(pid=1, version="x", started_unix=900.0))


def config(tmp_path: Path, kept: int = 32) -> Config:
    return Config(runtime_dir=tmp_path / "run", proc_root=tmp_path / "proc", health=HealthConfig(jobs_kept=kept))


def document(watch: NodeWatch, state: PublishedState, cfg: Config) -> Any:
    from gpuwatch.publish.document import to_document

    return to_document(watch.observe(state, cfg), "daemon")


def previous_daemon(tmp_path: Path, jobs: int = 1) -> Any:
    """A daemon that saw ``jobs`` jobs one after the other, the last ("99" + jobs) still running with 400 J and
    90 °C at its last tick, and published its state file (the daemon's own, integrated energy counter)."""
    cfg = config(tmp_path)
    watch = NodeWatch()
    watch.take_back(cfg)
    document(watch, tick(0.0, {}, 0.0), cfg)
    for t in range(1, jobs):  # the ended ones
        document(watch, tick(float(t), {10 + t: str(99 + t)}, 100.0 * t), cfg)
    last, energy_j = str(99 + jobs), 100.0 * (jobs - 1)
    document(watch, tick(float(jobs), {99: last}, energy_j + 100.0, temp_c=90.0), cfg)
    doc = document(watch, tick(float(jobs) + 1, {99: last}, energy_j + 400.0, temp_c=70.0), cfg)
    cfg.state_file.parent.mkdir(parents=True, exist_ok=True)
    cfg.state_file.write_text(json.dumps(doc))
    return doc


def test_a_restarted_watch_resumes_the_killed_daemons_receipts_and_says_the_gap(tmp_path: Path) -> None:
    fake_proc(tmp_path / "proc")
    before = previous_daemon(tmp_path)
    assert before["daemon"]["boot_id"] == BOOT  # published for the next daemon
    cfg = config(tmp_path)
    watch = NodeWatch()
    watch.take_back(cfg)  # the new daemon's own energy counter starts at 0 again
    watch.observe(tick(30.0, {99: "100"}, 0.0, temp_c=60.0), cfg)
    (job,) = watch.observe(tick(31.0, {99: "100"}, 50.0, temp_c=65.0), cfg).jobs
    (gpu,) = job.gpus
    assert job.job_id == "100" and job.active and job.unobserved_s == 28.0 and job.gaps == ((1002.0, 1030.0),)
    assert gpu.energy_j == 400.0 + 50.0 and gpu.energy_unseen_s == 28.0  # an integrated counter: the gap left out
    assert dict(gpu.max_temps_c) == {"junction": 90.0}


def test_the_gaps_energy_comes_from_a_trusted_firmware_counter(tmp_path: Path) -> None:
    fake_proc(tmp_path / "proc")
    cfg = config(tmp_path)
    killed = NodeWatch()
    killed.take_back(cfg)
    document(killed, tick(0.0, {99: "7"}, 0.0, counter_j=10_000.0), cfg)
    cfg.state_file.parent.mkdir(parents=True)
    cfg.state_file.write_text(json.dumps(document(killed, tick(1.0, {99: "7"}, 250.0, counter_j=10_250.0), cfg)))
    watch = NodeWatch()
    watch.take_back(cfg)
    # 8 s later: the firmware's counter went on by 1600 J (200 W); the new daemon's own starts at 0.
    watch.observe(tick(9.0, {99: "7"}, 0.0, counter_j=11_850.0), cfg)
    (gpu,) = watch.observe(tick(10.0, {99: "7"}, 200.0, counter_j=12_050.0), cfg).jobs[0].gpus
    assert (gpu.energy_j, gpu.gap_energy_j, gpu.energy_unseen_s) == (250.0 + 1600.0 + 200.0, 1600.0, 0.0)


def test_a_reload_keeps_the_receipts_and_jobs_kept_bounds_them(tmp_path: Path) -> None:
    fake_proc(tmp_path / "proc")
    previous_daemon(tmp_path, jobs=3)
    watch = NodeWatch()
    watch.take_back(config(tmp_path))
    assert [j.job_id for j in watch.observe(tick(10.0, {}, 0.0), config(tmp_path)).jobs] == ["102", "101", "100"]
    # SIGHUP: the daemon keeps its NodeWatch and passes the new [health] with the next tick.
    assert [j.job_id for j in watch.observe(tick(11.0, {}, 0.0), config(tmp_path, kept=2)).jobs] == ["102", "101"]


def test_only_the_newest_jobs_kept_are_taken_back(tmp_path: Path) -> None:
    fake_proc(tmp_path / "proc")
    previous_daemon(tmp_path, jobs=3)
    cfg = config(tmp_path, kept=1)
    taken = take_back(cfg.state_file, BOOT, cfg.health.jobs_kept)
    assert taken is not None and [j.job_id for j in taken.jobs] == ["102"]


def test_a_clean_stop_keeps_the_state_file_as_state_last_and_the_newer_one_wins(tmp_path: Path) -> None:
    fake_proc(tmp_path / "proc")
    previous_daemon(tmp_path)
    state = config(tmp_path).state_file
    keep_last_state(state)
    keep_last_state(state)  # nothing left to keep: no error
    assert not state.exists() and last_state_file(state).exists()
    taken = take_back(state, BOOT, 32)
    assert taken is not None and [j.job_id for j in taken.jobs] == ["100"]
    # A later daemon that was killed left a newer state file: it wins over the older kept one.
    newer = json.loads(last_state_file(state).read_text())
    newer["jobs"][0]["job_id"] = "200"
    state.write_text(json.dumps(newer))
    os.utime(last_state_file(state), (1_000_000.0, 1_000_000.0))
    taken = take_back(state, BOOT, 32)
    assert taken is not None and [j.job_id for j in taken.jobs] == ["200"]


@pytest.mark.parametrize(("content", "says"), [
    (b"{\"schema\": 1, \"jobs\": [", "unreadable"),
    (b"\xff\xfe garbage", "unreadable"),
    (b"[]", "the document is not an object"),
    (None, "written in another boot"),
])
def test_garbage_or_another_boots_file_is_one_line_and_empty_receipts(
        tmp_path: Path, content: bytes | None, says: str, caplog: pytest.LogCaptureFixture) -> None:
    fake_proc(tmp_path / "proc", boot="another-boot")
    previous_daemon(tmp_path)  # written with this test's fake proc: "another-boot"
    (tmp_path / "proc" / BOOT_ID_FILE).write_text(BOOT + "\n")  # rebooted
    cfg = config(tmp_path)
    if content is not None:
        cfg.state_file.write_bytes(content)
    watch = NodeWatch()
    with caplog.at_level(logging.INFO, logger="gpuwatch.receipts"):
        watch.take_back(cfg)
    assert watch.observe(tick(40.0, {}, 0.0), cfg).jobs == ()
    (line,) = [r for r in caplog.records if r.name == "gpuwatch.receipts"]
    assert line.levelno == logging.WARNING and says in line.getMessage() and str(cfg.state_file) in line.getMessage()
    assert "\n" not in line.getMessage() and line.exc_info is None


def test_no_previous_daemon_is_one_line_and_empty_receipts(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    fake_proc(tmp_path / "proc")
    watch = NodeWatch()
    with caplog.at_level(logging.INFO, logger="gpuwatch.receipts"):
        watch.take_back(config(tmp_path))
    assert [r.getMessage() for r in caplog.records if r.name == "gpuwatch.receipts"] == [
        f"no previous daemon's state in {tmp_path / 'run'}: job receipts start empty"]
    assert watch.observe(tick(0.0, {}, 0.0), config(tmp_path)).jobs == ()


def test_the_boot_id_is_the_proc_trees_else_the_machines(tmp_path: Path) -> None:
    assert boot_id(fake_proc(tmp_path / "proc")) == BOOT
    machine = boot_id(tmp_path / "simulated-proc")  # a simulated proc tree has none: the machine's own /proc's
    assert machine == Path("/proc", BOOT_ID_FILE).read_text().strip()


@pytest.mark.parametrize("with_cgroup", [True, False])
def test_receipts_not_taken_back_start_the_gap_at_the_jobs_cgroup_else_its_processes(tmp_path: Path,
                                                                                      with_cgroup: bool) -> None:
    """No previous daemon: a Slurm job already running at the first tick gets the time from its start as a gap,
    the start taken from its cgroup directory (a real directory in the kernel's v2 layout) where there is one,
    else from its processes (this test's own process: psutil reads its start), and the receipt says which."""
    fake_proc(tmp_path / "proc")
    cgroup = tmp_path / "cgroup"
    job_dir = cgroup / "system.slice/slurmstepd.scope/job_42"
    if with_cgroup:
        job_dir.mkdir(parents=True)
    pid = 4_194_000 if with_cgroup else os.getpid()  # a pid psutil cannot find: the cgroup alone tells the start
    (tmp_path / "proc" / str(pid)).mkdir()
    (tmp_path / "proc" / str(pid) / "cgroup").write_text("0::/system.slice/slurmstepd.scope/job_42/step_0/user\n")
    watch = NodeWatch(cgroup_root=cgroup)
    cfg = config(tmp_path)
    watch.take_back(cfg)
    now = time.time() + 60.0
    state = tick(0.0, {pid: "42"}, 0.0)
    state = replace(state, snapshot=replace(state.snapshot, taken_unix=now),
                    daemon=replace(state.daemon, started_unix=now - 10.0))  # type: ignore[type-var]
    (job,) = watch.observe(state, cfg).jobs
    start = job_dir.stat().st_ctime if with_cgroup else psutil.Process().create_time()
    assert job.gaps == ((start, now),) and job.unobserved_s == now - start
    assert job.unseen_from == ("scheduler" if with_cgroup else "processes")
