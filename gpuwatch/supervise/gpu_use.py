"""Per trainer, from a tick's snapshot (pure): the GPUs its process tree uses, what it holds on them, and
what their resets mean for it.

A trainer is judged (thermal limits, resets) on its configured ``gpus``; without them, on the GPUs its
tree was seen using (``gpus_used``); before it was seen using any, on every GPU.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import TypeVar

from gpuwatch.model import GpuProcess, Snapshot, TrainerGpuUse

N = TypeVar("N", int, float)


@dataclass(frozen=True)
class GpuVerdict:
    reset: str | None = None  # one of its GPUs was reset since the last tick
    ready: bool = True  # all of its GPUs answer and no stuck process holds one
    wait: str | None = None  # why not


def judged_gpus(configured: Iterable[str], used: Collection[str]) -> tuple[str, ...]:
    """The GPUs a trainer's limits and resets apply to; empty: all of them."""
    return tuple(configured) or tuple(sorted(used))


def gpu_verdict(snapshot: Snapshot, gpus: tuple[str, ...], seen: Mapping[str, int]) -> GpuVerdict:
    """``seen``: each GPU's reset count at the previous tick (a GPU not in it counts as seen)."""
    mine = [r for r in snapshot.resets if not gpus or r.gpu_id in gpus]
    new = [r for r in mine if r.resets_total > seen.get(r.gpu_id, r.resets_total)]
    reset = None
    if new:
        reset = "GPU reset: " + "; ".join(f"{r.gpu_id} ({r.last_summary or r.last_source})" for r in new)
    waits = []
    for r in mine:
        if r.stuck_pids:
            pids = ", ".join(str(p) for p in r.stuck_pids)
            # A few seconds in D are every recovery's; only past the deadline is the reboot worth naming.
            reboot = " (past its deadline: the host may need a reboot)" if r.stuck_past_deadline else ""
            waits.append(f"GPU {r.gpu_id} held by pid {pids} in D state since its reset{reboot}")
        elif r.recovering:
            waits.append(f"GPU {r.gpu_id} not answering since its reset")
    return GpuVerdict(reset=reset, ready=not waits, wait="; ".join(waits) or None)


def trainer_use(processes: Iterable[GpuProcess], trainer: str) -> tuple[TrainerGpuUse, ...]:
    """The trainer's GpuProcess rows summed per GPU (a value unknown in every row stays None)."""
    rows: dict[str, list[GpuProcess]] = {}
    for row in processes:
        if row.trainer == trainer:
            rows.setdefault(row.gpu_id, []).append(row)
    return tuple(
        TrainerGpuUse(  # one process on the GPU (the common case): its values as they are, the sums of one
            gpu_id=gpu_id, processes=1, vram_bytes=group[0].vram_bytes, gtt_bytes=group[0].gtt_bytes,
            engine_busy_ratio=group[0].engine_busy_ratio, kfd_vram_bytes=group[0].kfd_vram_bytes,
            kfd_cu_occupancy_ratio=group[0].kfd_cu_occupancy_ratio,
        ) if len(group) == 1 else TrainerGpuUse(
            gpu_id=gpu_id, processes=len(group), vram_bytes=_sum(r.vram_bytes for r in group),
            gtt_bytes=_sum(r.gtt_bytes for r in group), engine_busy_ratio=_sum(r.engine_busy_ratio for r in group),
            kfd_vram_bytes=_sum(r.kfd_vram_bytes for r in group),
            kfd_cu_occupancy_ratio=_sum(r.kfd_cu_occupancy_ratio for r in group),
        )
        for gpu_id, group in sorted(rows.items())
    )


def _sum(values: Iterable[N | None]) -> N | None:
    known = [v for v in values if v is not None]
    if not known:
        return None
    total = known[0]
    for value in known[1:]:
        total += value
    return total
