"""Per-job accounting (publish/receipts.py): the increases of the GPU's counters while the job is on it."""

from __future__ import annotations

from gpuwatch.model import (
    GpuProcess,
    GpuReading,
    GpuResetState,
    JobReceipt,
    PowerMode,
    PowerState,
    PublishedState,
    Snapshot,
    TempReading,
    TrainerPhase,
    TrainerState,
)
from gpuwatch.publish.receipts import find, step

A, B = "0000:03:00.0", "0000:0c:00.0"


def tick(t: float, energy_j: float, jobs: dict[str, str | None], temp_c: float = 60.0, capped_s: float = 0.0,
         throttled_s: float = 0.0, resets: int = 0, paused: bool = False) -> PublishedState:
    """One tick of GPU A: its counters at ``t``, the processes (pid -> job) on it."""
    reading = GpuReading(gpu_id=A, card="card0", backend="amdgpu", temps=(TempReading("junction", temp_c),),
                         energy_joules=energy_j, energy_source="accumulator", throttled_s=(("thermal", throttled_s),))
    rows = tuple(GpuProcess(pid=int(pid), gpu_id=A, command="python3", user="alice", trainer="resnet", job_id=job)
                 for pid, job in jobs.items())
    snap = Snapshot(taken_unix=t, taken_monotonic=t, gpus=(reading,), processes=rows,
                    resets=(GpuResetState(A, resets_total=resets),))
    return PublishedState(snapshot=snap, powers=(PowerState(A, PowerMode.GOVERNING, capped_seconds_total=capped_s),),
                          trainers=(TrainerState("resnet", TrainerPhase.PAUSED if paused else TrainerPhase.RUNNING),))


def run(ticks: list[PublishedState], kept: int = 8) -> tuple[PublishedState | None, tuple[JobReceipt, ...]]:
    receipts: tuple[JobReceipt, ...] = ()
    previous: PublishedState | None = None
    for state in ticks:
        receipts = step(receipts, previous, state, kept)
        previous = state
    return previous, receipts


def test_a_job_gets_the_increase_of_every_counter_while_it_runs() -> None:
    _, receipts = run([
        tick(0, 1000.0, {}),  # before the job: not counted
        tick(1, 1100.0, {"7": "42"}, temp_c=70.0),  # its first tick: counted from the previous one
        tick(2, 1300.0, {"7": "42"}, temp_c=88.0, capped_s=1.0, throttled_s=0.5, paused=True),
        tick(3, 1450.0, {"7": "42"}, temp_c=80.0, capped_s=2.0, throttled_s=1.5, resets=1),
        tick(4, 1600.0, {}),  # the job ended: nothing more counted
    ])
    receipt = find(receipts, "42")
    assert receipt is not None and not receipt.active and receipt.user == "alice"
    assert (receipt.first_seen_unix, receipt.last_seen_unix, receipt.paused_s) == (1, 3, 1.0)
    (gpu,) = receipt.gpus
    assert gpu.energy_j == 450.0  # 1000 -> 1450: what increase(gpuwatch_gpu_energy_joules_total) says
    assert dict(gpu.max_temps_c) == {"junction": 88.0}
    assert (gpu.governed_s, dict(gpu.throttled_s), gpu.resets) == (2.0, {"thermal": 1.5}, 1)


def test_a_counter_that_went_back_counts_from_zero_as_promql_does() -> None:
    _, receipts = run([tick(0, 5000.0, {"7": "42"}), tick(1, 30.0, {"7": "42"}), tick(2, 80.0, {"7": "42"})])
    assert receipts[0].gpus[0].energy_j == 80.0


def test_only_the_newest_jobs_are_kept_active_first() -> None:
    ticks = [tick(t, 100.0 * t, {"1": str(t)}) for t in range(5)]
    _, receipts = run(ticks, kept=3)
    assert [r.job_id for r in receipts] == ["4", "3", "2"] and receipts[0].active and not receipts[1].active


def test_processes_without_a_job_make_no_receipt() -> None:
    assert run([tick(0, 1.0, {"7": None}), tick(1, 2.0, {"7": None})])[1] == ()
