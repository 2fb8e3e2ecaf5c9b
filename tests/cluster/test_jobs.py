"""Job attribution (procs/jobs.py): Slurm's cgroup layouts, the prologs' mapping files, the monitor's rows."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuwatch.model import GpuProcess, JobStart
from gpuwatch.procfs import Procfs
from gpuwatch.procs.jobs import (
    START_SLACK_S,
    JobRef,
    attribute,
    cgroup_made_unix,
    cgroups_made,
    job_cgroup_dir,
    job_of_cgroup,
    job_start,
    parse_mapping,
    read_mappings,
)
from gpuwatch.procs.monitor import ProcessMonitor
from gpuwatch.sim.proctree import RENDER_NODE, FakeProcTree, amdgpu_fdinfo
from gpuwatch.supervise.peers import run_job

A, B = "0000:03:00.0", "0000:0c:00.0"

CGROUPS = [
    # cgroup v2 (Slurm 22.05+ cgroup/v2: slurmstepd's scope, the job, the step, the user's tasks)
    ("0::/system.slice/slurmstepd.scope/job_123/step_0/user/task_0\n", JobRef("123", "0")),
    ("0::/system.slice/slurmstepd.scope/job_77/step_batch/user/task_0\n", JobRef("77", "batch")),
    # cgroup v1: one line per hierarchy; the freezer's and memory's paths name the job
    ("12:pids:/user.slice\n11:memory:/slurm/uid_1000/job_4711/step_0/task_0\n7:freezer:/slurm/uid_1000/job_4711/"
     "step_0\n", JobRef("4711", "0")),
    # several slurmd per host: slurm_<nodename>
    ("4:cpuset:/slurm_node1/uid_0/job_9/step_extern\n", JobRef("9", "extern")),
    ("0::/system.slice/slurmstepd.scope/job_5\n", JobRef("5", None)),
    ("0::/user.slice/user-1000.slice/session-3.scope\n", None),
    ("0::/system.slice/gpuwatch.service\n", None),
    ("", None),
    ("garbage without colons /job_12\n", None),
    ("0::/kubepods/burstable/podjob_1/x\n", None),
]


@pytest.mark.parametrize(("text", "expected"), CGROUPS)
def test_the_job_of_a_cgroup(text: str, expected: JobRef | None) -> None:
    assert job_of_cgroup(text) == expected


JOB_DIRS = [
    ("0::/system.slice/slurmstepd.scope/job_123/step_0/user/task_0\n", "system.slice/slurmstepd.scope/job_123"),
    ("0::/system.slice/slurmstepd.scope/job_5\n", "system.slice/slurmstepd.scope/job_5"),
    # v1: the first hierarchy that names the job, under its mount directory
    ("12:pids:/user.slice\n11:memory:/slurm/uid_1000/job_4711/step_0/task_0\n", "memory/slurm/uid_1000/job_4711"),
    ("5:cpu,cpuacct:/slurm_node1/uid_0/job_9/step_extern\n", "cpu,cpuacct/slurm_node1/uid_0/job_9"),
    ("1:name=systemd:/slurm/uid_0/job_8/step_0\n", "systemd/slurm/uid_0/job_8"),
    ("0::/user.slice/user-1000.slice/session-3.scope\n", None),
    ("", None),
]


@pytest.mark.parametrize(("text", "expected"), JOB_DIRS)
def test_the_jobs_own_cgroup_directory(text: str, expected: str | None) -> None:
    assert job_cgroup_dir(text) == expected


@pytest.mark.parametrize(("cgroup_made", "processes_started", "expected"), [
    (100.0, 130.0, JobStart(100.0, "scheduler")),  # slurmd made the job's cgroup, its GPU processes came later
    (100.0, None, JobStart(100.0, "scheduler")),  # no process start known
    (100.0, 100.0 - START_SLACK_S, JobStart(100.0, "scheduler")),  # a process start read a second early
    (200.0, 130.0, JobStart(130.0, "processes")),  # later than its processes: not the creation (a new inode)
    (None, 130.0, JobStart(130.0, "processes")),  # no Slurm cgroup (proctrack/linuxproc, a mapping file's job)
    (None, None, None),
])
def test_a_jobs_start_is_the_schedulers_where_it_gives_it(cgroup_made: float | None, processes_started: float | None,
                                                          expected: JobStart | None) -> None:
    assert job_start(cgroup_made, processes_started) == expected


def test_a_jobs_cgroup_creation_from_a_cgroup_tree(tmp_path: Path) -> None:
    """The kernel's layouts as real directories under tmp: v2's job directory and v1's per hierarchy; a job's
    time is its directory's, found from the first of its processes whose cgroup file names it."""
    cgroup, proc = tmp_path / "cgroup", FakeProcTree(tmp_path / "proc")
    v2 = cgroup / "system.slice/slurmstepd.scope/job_123"
    v1 = cgroup / "memory/slurm/uid_1000/job_4711"
    for job_dir in (v2 / "step_0/user/task_0", v1 / "step_0/task_0"):
        job_dir.mkdir(parents=True)
    (cgroup / "system.slice/slurmstepd.scope/job_55").symlink_to(v2)  # a link is no cgroup
    texts = {4242: "0::/system.slice/slurmstepd.scope/job_123/step_0/user/task_0\n",
             4300: "11:memory:/slurm/uid_1000/job_4711/step_0/task_0\n",
             4400: "0::/system.slice/slurmstepd.scope/job_55/step_0\n",
             4500: "0::/system.slice/slurmstepd.scope/job_66/step_0\n",  # its directory is gone
             4600: "0::/system.slice/slurmstepd.scope/job_123/step_0\n"}  # says another job than its row
    for pid, text in texts.items():
        proc.add_process(pid, cmdline=["python3"])
        (proc.root / str(pid) / "cgroup").write_text(text)
    rows = (GpuProcess(9999, A, "gone", job_id="123"),  # no /proc entry: the next process of the job tells it
            GpuProcess(4242, A, "python3", job_id="123"), GpuProcess(4300, B, "python3", job_id="4711"),
            GpuProcess(4400, A, "python3", job_id="55"), GpuProcess(4500, A, "python3", job_id="66"),
            GpuProcess(4600, A, "python3", job_id="77"), GpuProcess(4700, A, "python3", job_id=None))
    made = cgroups_made(Procfs(proc.root), cgroup, rows)
    assert made == {"123": v2.stat().st_ctime, "4711": v1.stat().st_ctime}
    assert cgroup_made_unix(cgroup, "system.slice/../../etc") is None  # never above the cgroup root


MAPPINGS = [
    ("123\n", ("123",)),  # DCGM: one job id per line
    ("123\n456\n\n", ("123", "456")),
    ("# written by prolog\n77_3\n", ("77_3",)),  # an array job's id
    (json.dumps({"SLURM_JOB_ID": "742", "SLURM_JOB_USER": "alice", "SLURM_JOB_GPUS": "0,1",
                 "SLURM_SCRIPT_CONTEXT": "prolog_slurmd"}), ("742",)),  # device-metrics-exporter
    ('{"SLURM_JOB_ID": 9}', ("9",)),
    ('{"SLURM_JOB_USER": "alice"}', ()),
    ("{not json", ()),
    ("", ()),
    ("rm -rf /; echo\n", ()),
]


@pytest.mark.parametrize(("text", "expected"), MAPPINGS)
def test_a_mapping_file(text: str, expected: tuple[str, ...]) -> None:
    assert parse_mapping(text) == expected


def test_mapping_dirs_by_gpu_index_first_directory_wins(tmp_path: Path) -> None:
    dcgm, dme = tmp_path / "dcgm", tmp_path / "dme"
    dcgm.mkdir()
    dme.mkdir()
    (dcgm / "1").write_text("55\n")
    (dme / "0").write_text(json.dumps({"SLURM_JOB_ID": "742"}))
    (dme / "1").write_text(json.dumps({"SLURM_JOB_ID": "999"}))
    # the index is the GPU's place among the sorted slots, whatever order they come in
    assert read_mappings([dcgm, dme, tmp_path / "missing"], [B, A]) == {A: ("742",), B: ("55",)}


def test_attribution_fills_only_rows_without_a_cgroup_job_and_only_one_job_per_gpu() -> None:
    rows = (GpuProcess(1, A, "x"), GpuProcess(2, A, "y", job_id="8"), GpuProcess(3, B, "z"))
    got = attribute(rows, {A: ("742",), B: ("1", "2")})
    assert [r.job_id for r in got] == ["742", "8", None]


def test_the_monitor_reads_each_process_job_from_its_cgroup(tmp_path: Path) -> None:
    proc = FakeProcTree(tmp_path / "proc")
    for pid, cgroup in ((4242, "0::/system.slice/slurmstepd.scope/job_4711/step_0/user/task_0\n"),
                        (1800, "0::/user.slice/user-1000.slice/session-2.scope\n")):
        proc.add_process(pid, cmdline=["python3", "train.py"])
        proc.set_fd(pid, 7, RENDER_NODE, amdgpu_fdinfo(pid, A, vram_bytes=4096))
        (proc.root / str(pid) / "cgroup").write_text(cgroup)
    proc.add_process(1900, cmdline=["a.out"])  # no cgroup file (a kernel without cgroups): no job
    proc.set_fd(1900, 3, RENDER_NODE, amdgpu_fdinfo(1900, A))
    rows, _ = ProcessMonitor(Procfs(proc.root), None, 30.0).sample({}, now=0.0)
    assert {r.pid: r.job_id for r in rows} == {4242: "4711", 1800: None, 1900: None}


def test_status_processes_shows_a_job_column_only_on_a_schedulers_node() -> None:
    from gpuwatch.cli.process_table import render_processes

    row = {"pid": 7, "gpu_id": A, "command": "python3 train.py", "user": "alice", "trainer": None, "state": "S",
           "vram_bytes": 1024, "gtt_bytes": None, "engine_busy_ratio": 0.5, "kfd": False, "kfd_vram_bytes": None,
           "kfd_cu_occupancy_ratio": None, "sampled_unix": 1.0, "job_id": None}
    plain = render_processes({"processes": [row]})  # type: ignore[typeddict-item]
    assert "JOB" not in plain
    table = render_processes({"processes": [{**row, "job_id": "4711"}]})  # type: ignore[typeddict-item]
    header, line = table.splitlines()[:2]
    assert header.split()[-3:] == ["TRAINER", "JOB", "COMMAND"]
    assert line[header.index("JOB"):].split()[0] == "4711"


@pytest.mark.parametrize(("cgroup", "claimed", "expected"), [
    ("0::/system.slice/slurmstepd.scope/job_123/step_0/user/task_0\n", None, "123"),  # no SLURM_JOB_ID: the cgroup's
    ("11:memory:/slurm/uid_0/job_4711/step_0/task_0\n", "4711", "4711"),
    ("0::/system.slice/slurmstepd.scope/job_123/step_0/user/task_0\n", "99", "123"),  # a stale one: the kernel's wins
    ("0::/user.slice/user-0.slice/session-3.scope\n", "42", "42"),  # proctrack/linuxproc: the wrapper's word
    ("0::/user.slice/user-0.slice/session-3.scope\n", None, None),
    (None, "42", "42"),  # the run's pid gone between the check and this read
])
def test_an_attached_runs_job_is_its_cgroups_else_its_wrappers(tmp_path: Path, cgroup: str | None, claimed: str | None,
                                                                 expected: str | None) -> None:
    tree = FakeProcTree(tmp_path / "proc")
    tree.add_process(300, "python3", ("python3", "train.py"), ppid=200, uid=0)
    if cgroup is not None:
        (tmp_path / "proc/300/cgroup").write_text(cgroup)
    assert run_job(Procfs(tmp_path / "proc"), 300 if cgroup is not None else 301, claimed) == expected
