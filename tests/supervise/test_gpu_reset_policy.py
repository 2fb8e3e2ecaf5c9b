"""A GPU reset under a trainer (pure): the run ends, the restart waits for the GPU and is counted as
gpu_reset; a process that survives SIGKILL is left behind; and the per-trainer GPU view from a snapshot."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpuwatch.config.trainer import TrainerConfig
from gpuwatch.model import GpuProcess, GpuResetState, Snapshot
from gpuwatch.model import TrainerPhase as P
from gpuwatch.supervise.actions import Abandon, CancelPause, Inputs, Kill, Spawn, Terminate
from gpuwatch.supervise.gpu_use import GpuVerdict, gpu_verdict, judged_gpus, trainer_use
from gpuwatch.supervise.machine import Machine
from gpuwatch.supervise.policy import step

CFG = TrainerConfig(name="t", command=["x"], grace_s=120, gpu_reset_grace_s=5, stuck_after_s=30,
                    give_up_after_crashes=3, hang_timeout_s=1800, stable_after_s=1000)
RESET = "GPU reset: 0000:28:00.0 (ring gfx_0.0.0 timed out)"
WAIT = "GPU 0000:28:00.0 not answering since its reset"


def running(**kw: object) -> Machine:
    return replace(Machine(phase=P.RUNNING, since=0, run_started=0, last_progress=0), **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize("phase", [P.RUNNING, P.PAUSING, P.PAUSED])
def test_a_reset_of_its_gpu_ends_the_run(phase: P) -> None:
    m, acts = step(running(phase=phase, paused_since=0), CFG, Inputs(now=10, alive=True, gpu_reset=RESET))
    assert m.phase is P.STOPPING and m.after_stop == "gpu_reset" and acts == [CancelPause(), Terminate(RESET)]


def test_reset_stop_kills_after_the_short_grace_and_restarts_once_the_gpu_answers() -> None:
    m, _ = step(running(run_progressed=True), CFG, Inputs(now=10, alive=True, gpu_reset=RESET))
    m, acts = step(m, CFG, Inputs(now=14, alive=True))
    assert acts == []
    m, acts = step(m, CFG, Inputs(now=15, alive=True))
    assert acts == [Kill("still running 5s after SIGTERM")] and m.killed
    m, acts = step(m, CFG, Inputs(now=16, alive=False, exit_code=-9, gpus_ready=False, gpus_wait=WAIT))
    assert m.phase is P.BACKOFF and m.next_start == 16 and m.crashes == 1 and acts == [CancelPause()]
    m, acts = step(m, CFG, Inputs(now=17, gpus_ready=False, gpus_wait=WAIT))
    assert m.phase is P.BACKOFF and acts == [] and m.reason == f"waiting to restart: {WAIT}"
    m, acts = step(m, CFG, Inputs(now=18))
    assert m.phase is P.RUNNING and acts == [Spawn(resume=True)]
    assert dict(m.restarts_by_reason) == {"gpu_reset": 1} and m.restarts_total == 1


def test_a_process_that_survives_sigkill_is_left_behind_not_waited_for() -> None:
    m, _ = step(running(run_progressed=True), CFG, Inputs(now=0, alive=True, gpu_reset=RESET))
    m, _ = step(m, CFG, Inputs(now=5, alive=True))
    m, acts = step(m, CFG, Inputs(now=34, alive=True))
    assert m.phase is P.STOPPING and acts == []
    m, acts = step(m, CFG, Inputs(now=35, alive=True, gpus_ready=False, gpus_wait=WAIT))
    why = "still there 30s after SIGKILL (stuck in the kernel): left behind"
    assert acts == [Abandon(why), CancelPause()]
    assert m.phase is P.BACKOFF and m.last_exit_reason == why and m.last_exit_code is None


def test_shutdown_during_a_reset_stop_keeps_the_reset_grace_and_gives_up_on_a_stuck_process() -> None:
    m, _ = step(running(), CFG, Inputs(now=0, alive=True, gpu_reset=RESET))
    m, acts = step(m, CFG, Inputs(now=4, alive=True, shutdown=True))
    assert acts == [] and m.phase is P.STOPPING and m.after_stop == "gpu_reset"
    m, acts = step(m, CFG, Inputs(now=5, alive=True, shutdown=True))
    assert acts == [Kill("still running 5s after SIGTERM")]  # gpu_reset_grace_s, not grace_s = 120
    m, acts = step(m, CFG, Inputs(now=35, alive=True, shutdown=True))
    assert isinstance(acts[0], Abandon) and m.phase is not P.STOPPING
    m, acts = step(m, CFG, Inputs(now=36, shutdown=True))
    assert m.phase is P.STOPPED and m.after_stop == "shutdown" and acts == []


def test_any_stop_gives_up_on_a_process_that_survives_sigkill() -> None:
    m, _ = step(running(), CFG, Inputs(now=0, alive=True, command="restart"))
    m, acts = step(m, CFG, Inputs(now=120, alive=True))
    assert acts == [Kill("still running 120s after SIGTERM")]
    m, acts = step(m, CFG, Inputs(now=150, alive=True))
    assert isinstance(acts[0], Abandon) and m.phase is P.BACKOFF and m.after_stop == "restart"


def test_resets_without_progress_give_up_like_crashes() -> None:
    m = running()
    for attempt in range(1, 4):
        m, _ = step(m, CFG, Inputs(now=attempt * 100, alive=True, gpu_reset=RESET))
        m, _ = step(m, CFG, Inputs(now=attempt * 100 + 1, alive=False, exit_code=-15))
        if attempt < 3:
            assert m.phase is P.BACKOFF
            m, _ = step(m, CFG, Inputs(now=attempt * 100 + 2))
    assert m.phase is P.FAILED and m.reason == "failed: 3 crash(es) without progress, last GPU reset"


def test_nothing_starts_on_a_gpu_that_is_not_back() -> None:
    m, acts = step(Machine(), CFG, Inputs(now=0, gpus_ready=False, gpus_wait=WAIT))
    assert m.phase is P.STARTING and acts == [] and m.reason == f"waiting to start: {WAIT}"
    backoff = Machine(phase=P.BACKOFF, next_start=0, after_stop="crash")
    m, acts = step(backoff, CFG, Inputs(now=5, gpus_ready=False, gpus_wait=WAIT, gpu_reset=RESET))
    assert m.phase is P.BACKOFF and acts == []


A, B = "0000:28:00.0", "0000:2b:00.0"


def snapshot(*resets: GpuResetState, processes: tuple[GpuProcess, ...] = ()) -> Snapshot:
    return Snapshot(0.0, 0.0, (), resets=resets, processes=processes)


def test_the_verdict_names_new_resets_and_what_the_trainer_waits_for() -> None:
    calm = snapshot(GpuResetState(A), GpuResetState(B))
    assert gpu_verdict(calm, (), {}) == GpuVerdict()
    hit = snapshot(GpuResetState(A, resets_total=1, last_summary="ring gfx_0.0.0 timed out", recovering=True),
                   GpuResetState(B))
    assert gpu_verdict(hit, (A,), {A: 0, B: 0}) == GpuVerdict(
        reset="GPU reset: 0000:28:00.0 (ring gfx_0.0.0 timed out)", ready=False, wait=WAIT)
    assert gpu_verdict(hit, (B,), {A: 0, B: 0}) == GpuVerdict()  # another GPU's reset
    assert gpu_verdict(hit, (), {A: 0}).reset is not None  # no GPUs known: judged on all
    assert gpu_verdict(hit, (A,), {A: 1}).reset is None  # already seen
    assert gpu_verdict(hit, (A,), {}).reset is None  # a GPU first seen with resets behind it
    stuck = snapshot(GpuResetState(A, resets_total=1, recovering=True, stuck_pids=(7, 9)))
    assert gpu_verdict(stuck, (A,), {A: 1}).wait == "GPU 0000:28:00.0 held by pid 7, 9 in D state since its reset"
    failed = snapshot(GpuResetState(A, resets_total=1, recovering=True, stuck_pids=(7, 9), stuck_past_deadline=True))
    assert gpu_verdict(failed, (A,), {A: 1}).wait == (
        "GPU 0000:28:00.0 held by pid 7, 9 in D state since its reset (past its deadline: the host may need a reboot)")


def test_judged_gpus_configured_else_used_else_all() -> None:
    assert judged_gpus([B], {A}) == (B,)
    assert judged_gpus([], {B, A}) == (A, B)
    assert judged_gpus([], set()) == ()


def test_trainer_use_sums_its_rows_per_gpu() -> None:
    rows = (
        GpuProcess(pid=1, gpu_id=A, command="x", trainer="t", vram_bytes=100, gtt_bytes=10, engine_busy_ratio=0.5,
                   kfd_vram_bytes=1000, kfd_cu_occupancy_ratio=0.25),
        GpuProcess(pid=2, gpu_id=A, command="x", trainer="t", engine_busy_ratio=0.25),  # a shared client
        GpuProcess(pid=1, gpu_id=B, command="x", trainer="t", vram_bytes=7, kfd_cu_occupancy_ratio=0.0),
        GpuProcess(pid=3, gpu_id=A, command="y", vram_bytes=5),  # not its tree
    )
    a, b = trainer_use(rows, "t")
    assert (a.gpu_id, a.processes, a.vram_bytes, a.gtt_bytes, a.engine_busy_ratio, a.kfd_vram_bytes) == (
        A, 2, 100, 10, 0.75, 1000)
    assert (b.gpu_id, b.processes, b.vram_bytes, b.gtt_bytes, b.engine_busy_ratio, b.kfd_vram_bytes,
            b.kfd_cu_occupancy_ratio) == (B, 1, 7, None, None, None, 0.0)  # one row: its values, a 0 kept
    assert trainer_use(rows, "other") == ()
