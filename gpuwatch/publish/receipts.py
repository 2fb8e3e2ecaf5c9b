"""Per-job accounting across ticks (pure): each scheduler job's thermal and energy receipt.

A job is "on" a GPU at a tick when one of its processes (``GpuProcess.job_id``) uses it. What the GPU's
counters grew by since the previous tick is the job's: energy (the same counter as
``gpuwatch_gpu_energy_joules_total``), seconds throttled per reason (``gpuwatch_gpu_throttled_seconds_total``),
seconds with a cap below the original (``gpuwatch_power_capped_seconds_total``) and resets; so a receipt
equals the PromQL ``increase()`` of those series over the job's ticks. Two jobs on one GPU both get the
GPU's whole increase: the counters are the GPU's, not a process's. The daemon keeps the last
``[health] jobs_kept`` receipts in the published state (the state file, /status): an epilog that runs
after the job's processes ended still finds its receipt (`gpuwatch receipt JOBID`). A daemon restart takes them
back and says the time no daemon ran on each (publish/receipt_resume.py); its first tick has no ``previous``.
"""

from __future__ import annotations

from dataclasses import replace

from gpuwatch.model import JobGpuReceipt, JobReceipt, PublishedState, TrainerPhase

_PAUSED = (TrainerPhase.PAUSING, TrainerPhase.PAUSED)


def step(receipts: tuple[JobReceipt, ...], previous: PublishedState | None, state: PublishedState,
         kept: int) -> tuple[JobReceipt, ...]:
    """This tick's receipts: the jobs on a GPU now updated with the increase since ``previous``, the others
    inactive; the newest ``kept`` (by last seen), active first."""
    snap = state.snapshot
    on: dict[str, set[str]] = {}
    users: dict[str, str | None] = {}
    trainers: dict[str, set[str]] = {}
    for row in snap.processes:
        if row.job_id is not None:
            on.setdefault(row.job_id, set()).add(row.gpu_id)
            users.setdefault(row.job_id, row.user)
            if row.trainer:
                trainers.setdefault(row.job_id, set()).add(row.trainer)
    paused = {t.name for t in state.trainers if t.phase in _PAUSED}
    dt = 0.0 if previous is None else max(0.0, snap.taken_unix - previous.snapshot.taken_unix)
    by_id = {r.job_id: replace(r, active=False) for r in receipts}
    for job_id, gpus in on.items():
        receipt = by_id.get(job_id) or JobReceipt(job_id=job_id, user=users[job_id], first_seen_unix=snap.taken_unix)
        held = dt if trainers.get(job_id, set()) & paused else 0.0
        per_gpu = {g.gpu_id: g for g in receipt.gpus}
        for gpu_id in gpus:
            per_gpu[gpu_id] = _gpu_step(per_gpu.get(gpu_id) or JobGpuReceipt(gpu_id), previous, state, gpu_id)
        by_id[job_id] = replace(receipt, active=True, last_seen_unix=snap.taken_unix, paused_s=receipt.paused_s + held,
                                gpus=tuple(per_gpu[g] for g in sorted(per_gpu)))
    ordered = sorted(by_id.values(), key=lambda r: (not r.active, -r.last_seen_unix, r.job_id))
    return tuple(ordered[:kept])


def find(receipts: tuple[JobReceipt, ...], job_id: str) -> JobReceipt | None:
    return next((r for r in receipts if r.job_id == job_id), None)


def _gpu_step(receipt: JobGpuReceipt, previous: PublishedState | None, state: PublishedState,
              gpu_id: str) -> JobGpuReceipt:
    now = state.snapshot.gpu(gpu_id)
    if now is None or not now.up:
        return receipt
    temps = dict(receipt.max_temps_c)
    for t in now.temps:
        if t.temp_c is not None:
            temps[t.label] = max(t.temp_c, temps.get(t.label, t.temp_c))
    receipt = replace(receipt, max_temps_c=tuple(sorted(temps.items())))
    before = previous.snapshot.gpu(gpu_id) if previous is not None else None
    if previous is None or before is None or not before.up:
        return receipt  # the first tick: no increase to count yet
    throttled = dict(receipt.throttled_s)
    was = dict(before.throttled_s)
    for reason, seconds in now.throttled_s:
        throttled[reason] = throttled.get(reason, 0.0) + _increase(was.get(reason), seconds)
    return replace(
        receipt,
        energy_j=receipt.energy_j + _increase(before.energy_joules, now.energy_joules),
        throttled_s=tuple(sorted(throttled.items())),
        governed_s=receipt.governed_s + _increase(_capped(previous, gpu_id), _capped(state, gpu_id)),
        resets=receipt.resets + int(_increase(_resets(previous, gpu_id), _resets(state, gpu_id))),
    )


def _increase(before: float | None, now: float | None) -> float:
    """A counter's increase; a counter that went back counts from 0, as PromQL's does."""
    if now is None:
        return 0.0
    if before is None or now < before:
        return now if before is not None else 0.0
    return now - before


def _capped(state: PublishedState, gpu_id: str) -> float | None:
    return next((p.capped_seconds_total for p in state.powers if p.gpu_id == gpu_id), None)


def _resets(state: PublishedState, gpu_id: str) -> float | None:
    return next((float(r.resets_total) for r in state.snapshot.resets if r.gpu_id == gpu_id), None)

