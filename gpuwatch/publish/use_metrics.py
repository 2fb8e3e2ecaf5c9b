"""The metric families of GPU resets and of who uses which GPU (from the PublishedState only; no I/O).

Process-level series are aggregated per GPU (supervised or not) and per trainer: a pid label would make
a new series for every restart. docs/metrics.md is the reference.
"""

from __future__ import annotations

from gpuwatch.model import PublishedState
from gpuwatch.publish.families import Family, counter, gauge


def reset_families(state: PublishedState) -> list[Family]:
    resets = counter("gpu_resets", "GPU resets seen since the daemon started (a devcoredump or a WEDGED uevent "
                     "naming the GPU; a burst within 10 s counts once).")
    last = gauge("gpu_last_reset_time_seconds", "When the GPU's last reset was seen (Unix seconds).", ["gpu"])
    recovering = gauge("gpu_reset_recovering", "1 from a reset until the GPU answers again and no stuck process "
                       "holds it; supervised training waits for it.", ["gpu"])
    stuck = gauge("gpu_stuck_processes", "Processes in uninterruptible sleep (D) holding the GPU since its reset: "
                  "a few seconds in every recovery; held for minutes, the host may need a reboot.", ["gpu"])
    for reset in state.snapshot.resets:  # straight into the rows, label values as a tuple (issue 52)
        labels = (reset.gpu_id,)
        resets.rows.append((labels, reset.resets_total))
        if reset.last_reset_unix is not None:
            last.rows.append((labels, reset.last_reset_unix))
        recovering.rows.append((labels, 1 if reset.recovering else 0))
        stuck.rows.append((labels, len(reset.stuck_pids)))
    return [resets, last, recovering, stuck]


def process_families(state: PublishedState) -> list[Family]:
    snap = state.snapshot
    count = gauge("gpu_processes", "Processes with the GPU open (DRM or KFD), supervised (in a trainer's tree) "
                  "or not, by scheduler job (\"\": none).", ["gpu", "scope", "job_id"])
    vram = gauge("gpu_processes_vram_bytes", "VRAM their DRM clients hold (resident; each client once).",
                 ["gpu", "scope", "job_id"])
    pids: dict[tuple[str, str, str], set[int]] = {}
    held: dict[tuple[str, str, str], int] = {}
    for row in snap.processes:
        key = (row.gpu_id, "supervised" if row.trainer else "unsupervised", row.job_id or "")
        pids.setdefault(key, set()).add(row.pid)
        held[key] = held.get(key, 0) + (row.vram_bytes or 0)
    for key in sorted(pids):
        count.add_metric(list(key), len(pids[key]))
        vram.add_metric(list(key), held[key])
    unreadable = gauge("processes_unreadable", "Processes whose open files gpuwatch may not read (another user's, "
                       "without CAP_SYS_PTRACE): their GPU use is unknown.", [])
    if state.daemon is not None:
        unreadable.add_metric([], snap.processes_unreadable)
    families: list[Family] = [count, vram, unreadable]
    t = ["trainer", "gpu"]
    fields = (
        ("trainer_gpu_processes", "Processes of the trainer's tree with the GPU open.", "processes"),
        ("trainer_gpu_vram_bytes", "VRAM the trainer's DRM clients hold on the GPU (resident).", "vram_bytes"),
        ("trainer_gpu_gtt_bytes", "GTT (system memory mapped for the GPU) the trainer's DRM clients hold.",
         "gtt_bytes"),
        ("trainer_gpu_engine_busy_ratio", "drm-engine-* time of the trainer's clients over wall time (ROCm compute "
         "through /dev/kfd is not counted there: see the kfd series).", "engine_busy_ratio"),
        ("trainer_gpu_kfd_vram_bytes", "VRAM the trainer holds through KFD (ROCm), from amdkfd's per-process files.",
         "kfd_vram_bytes"),
        ("trainer_gpu_kfd_cu_occupancy_ratio", "Compute units running the trainer's ROCm waves, 0-1.",
         "kfd_cu_occupancy_ratio"),
    )
    for suffix, doc, attr in fields:
        family = gauge(suffix, doc, t)
        for trainer in state.trainers:
            for use in trainer.gpu_use:
                value = getattr(use, attr)
                if value is not None:
                    family.add_metric([trainer.name, use.gpu_id], value)
        families.append(family)
    stuck = gauge("trainer_stuck_processes", "Processes of the trainer left behind after SIGKILL (D state).",
                  ["trainer"])
    for trainer in state.trainers:
        stuck.add_metric([trainer.name], len(trainer.stuck_pids))
    return [*families, stuck]
