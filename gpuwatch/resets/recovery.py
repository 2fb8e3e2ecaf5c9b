"""One GPU's resets and its way back to usable (pure): (state, this tick's events and observations, now)
-> (state, log lines).

* Reset events within ``MERGE_S`` of the counted one are the same incident: the dump comes before the
  reset, ``WEDGED=none`` after it, and ring resets come in bursts (one per ring) -- counted once, the
  dump's details kept.
* After a reset the GPU is *recovering* until it answers (``answers``: read, with a temperature) for
  ``answer_ticks`` ticks in a row and no process holding it sits in D state. A process in D after a
  reset may never leave it (the driver waits on a fence of the dead context); it is reported once it
  has held the GPU ``STUCK_REPORT_S``, and the GPU stays unusable while it holds it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from gpuwatch.model import GpuReading, GpuResetState

MERGE_S = 10.0
STUCK_REPORT_S = 10.0
Log = tuple[str, str]  # (level name, message)


@dataclass(frozen=True)
class ResetEvent:
    gpu_id: str
    source: str  # "devcoredump" or "wedged uevent"
    summary: str
    dump_path: str | None = None


@dataclass(frozen=True)
class Recovery:
    gpu_id: str
    resets_total: int = 0
    counted_at: float | None = None  # monotonic
    last_unix: float | None = None
    last_source: str | None = None
    last_summary: str | None = None
    dump_path: str | None = None
    recovering: bool = False
    answered_ticks: int = 0
    stuck_pids: tuple[int, ...] = ()
    stuck_since: float | None = None
    stuck_reported: bool = False

    def published(self) -> GpuResetState:
        return GpuResetState(gpu_id=self.gpu_id, resets_total=self.resets_total, last_reset_unix=self.last_unix,
                             last_source=self.last_source, last_summary=self.last_summary,
                             dump_path=self.dump_path, recovering=self.recovering, stuck_pids=self.stuck_pids,
                             stuck_past_deadline=self.stuck_reported)


def answers(reading: GpuReading | None) -> bool:
    """The GPU is readable again: present, up, and some temperature read. (The seam for a bounded,
    per-GPU reader: a GPU that misses its read deadline does not answer.)"""
    return reading is not None and reading.up and any(t.temp_c is not None for t in reading.temps)


def step(r: Recovery, events: list[ResetEvent], reading: GpuReading | None, d_holders: tuple[int, ...],
         now: float, now_unix: float, answer_ticks: int) -> tuple[Recovery, list[Log]]:
    logs: list[Log] = []
    for event in events:
        where = f"; dump kept at {event.dump_path}" if event.dump_path else ""
        if r.counted_at is None or now - r.counted_at > MERGE_S:
            r = replace(r, resets_total=r.resets_total + 1, counted_at=now, last_unix=now_unix,
                        last_source=event.source, last_summary=event.summary, dump_path=event.dump_path)
            logs.append(("warning", f"GPU {r.gpu_id} was reset ({event.source}): {event.summary}{where}"))
        elif event.dump_path and not r.dump_path:  # the dump of the incident a uevent announced
            r = replace(r, last_summary=event.summary, dump_path=event.dump_path)
            logs.append(("info", f"GPU {r.gpu_id} reset: {event.summary}{where}"))
        r = replace(r, recovering=True, answered_ticks=0)
    if not r.recovering:
        return r, logs
    answered = r.answered_ticks + 1 if answers(reading) else 0
    since = (r.stuck_since if r.stuck_since is not None else now) if d_holders else None
    r = replace(r, answered_ticks=answered, stuck_pids=d_holders, stuck_since=since,
                stuck_reported=r.stuck_reported and bool(d_holders))
    if since is not None and now - since >= STUCK_REPORT_S and not r.stuck_reported:
        pids = ", ".join(str(p) for p in d_holders)
        logs.append(("error", f"GPU {r.gpu_id}: pid {pids} stuck in uninterruptible sleep (D) since its reset; the "
                              "GPU is not used again while they hold it. The host may need a reboot."))
        r = replace(r, stuck_reported=True)
    if answered >= answer_ticks and not d_holders:
        took = "" if r.counted_at is None else f" {now - r.counted_at:.0f}s after its reset"
        logs.append(("info", f"GPU {r.gpu_id} answers again{took}"))
        r = replace(r, recovering=False, answered_ticks=0, stuck_pids=(), stuck_since=None, stuck_reported=False)
    return r, logs
