"""daemon/health.py's NodeWatch across ticks: over crit counts only after over_crit_s, a mapping file's job
reaches the processes and the receipts, and a reload's [health] applies from the next tick."""

from __future__ import annotations

from pathlib import Path

from gpuwatch.config.file import Config
from gpuwatch.config.sections import HealthConfig
from gpuwatch.daemon.health import NodeWatch
from gpuwatch.model import GpuProcess, GpuReading, PublishedState, Snapshot, TempReading

SLOT = "0000:03:00.0"


def tick(t: float, junction_c: float, energy_j: float = 0.0) -> PublishedState:
    gpu = GpuReading(gpu_id=SLOT, card="card0", backend="amdgpu", energy_joules=energy_j,
                     temps=(TempReading("junction", junction_c, crit_c=105.0),))
    return PublishedState(snapshot=Snapshot(taken_unix=1000 + t, taken_monotonic=t, gpus=(gpu,),
                                            processes=(GpuProcess(pid=7, gpu_id=SLOT, command="python3"),)))


def test_over_crit_counts_only_after_over_crit_s_and_a_reload_applies(tmp_path: Path) -> None:
    watch = NodeWatch()
    config = Config(health=HealthConfig(over_crit_s=5.0))
    verdicts = [watch.observe(tick(t, 108.0), config).health for t in (0.0, 2.0, 4.0, 6.0)]
    assert [v.healthy for v in verdicts if v is not None] == [True, True, True, False]
    off = Config(health=HealthConfig(over_crit=False))  # a reload: the next tick is judged with it
    health = watch.observe(tick(8.0, 108.0), off).health
    assert health is not None and health.healthy
    assert watch.observe(tick(10.0, 60.0), config).health.healthy  # type: ignore[union-attr]


def test_a_mapping_file_gives_the_processes_their_job_and_the_job_its_receipt(tmp_path: Path) -> None:
    (tmp_path / "0").write_text("4711\n")
    config = Config(health=HealthConfig(job_mapping_dirs=[tmp_path]))
    watch = NodeWatch()
    watch.observe(tick(0.0, 60.0, energy_j=100.0), config)
    state = watch.observe(tick(1.0, 70.0, energy_j=250.0), config)
    assert [p.job_id for p in state.snapshot.processes] == ["4711"]
    (job,) = state.jobs
    assert (job.job_id, job.gpus[0].energy_j, dict(job.gpus[0].max_temps_c)) == ("4711", 150.0, {"junction": 70.0})
    (tmp_path / "0").unlink()
    assert not watch.observe(tick(2.0, 70.0, energy_j=300.0), config).jobs[0].active
