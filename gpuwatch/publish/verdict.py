"""The node's health verdict for a scheduler (pure): a PublishedState + the [health] settings -> NodeHealth.

Each check is a row of publish/health_codes.py's table with a stable code (docs/cluster.md) and, for a GPU's,
its predicate here (``PREDICATES``); a fault is one line, e.g.
``gpuwatch:G006 0000:03:00.0 junction 108C>105C fan failsafe``, so a drain reason or an NPD condition
can be matched by a regex. Normal operation is never a fault: a power cap governing (even at its floor)
and a paused trainer are what gpuwatch does to keep a hot card in its limits; they are ``notes``
(Nagios WARNING). Only "over crit" needs history (how long): ``over_crit_since`` carries it from tick
to tick, and ``judge`` is given it with ``now``.

The daemon's own checks (G001 stale, G002 no daemon, G014 unusable, G015 from the future) are found by the reader
of the state (`gpuwatch health`), not here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from gpuwatch.config.sections import HealthConfig
from gpuwatch.model import (
    FanMode,
    FanState,
    GpuReading,
    GpuResetState,
    HealthFault,
    NodeHealth,
    PowerMode,
    PublishedState,
    TrainerPhase,
    at_crit,
)
from gpuwatch.publish.health_codes import (
    AER_FATAL,
    AER_NONFATAL,
    CHECKS,
    FAN_FAILSAFE,
    FAN_STALLED,
    FAN_UNCONTROLLED,
    GPU_DOWN,
    OVER_CRIT,
    PCIE_SPEED,
    PCIE_WIDTH,
    RESET_RECOVERING,
    RESET_STUCK,
)


def over_crit_since(previous: Mapping[str, float], state: PublishedState, now: float) -> dict[str, float]:
    """Since when each GPU has had a sensor at or above its crit (``model.at_crit``); a GPU that is not is dropped."""
    since: dict[str, float] = {}
    for gpu in state.snapshot.gpus:
        if gpu.up and _hottest_over_crit(gpu) is not None:
            since[gpu.gpu_id] = previous.get(gpu.gpu_id, now)
    return since


@dataclass(frozen=True)
class Seen:
    """What a check sees of one GPU in one tick: its reading, fan, reset, and how long it has been over crit."""
    gpu: GpuReading
    fan: FanState | None
    reset: GpuResetState | None
    over: tuple[str, float, float] | None  # the hottest sensor at or above crit: (label, temp, crit)
    over_for_s: float | None  # how long it has been (None: not known to be over)
    counts_after_s: float  # [health] over_crit_s: how long before it counts


def _fan_failsafe(seen: Seen) -> str | None:
    fan, over = seen.fan, seen.over
    if fan is None or fan.mode is not FanMode.FAILSAFE:
        return None
    if over is not None:
        return f"{over[0]} {over[1]:.0f}C>{over[2]:.0f}C fan failsafe"
    return "fan failsafe" + (f": {fan.failsafe_reason}" if fan.failsafe_reason else "")


def _over_crit(seen: Seen) -> str | None:
    over, lasted_s = seen.over, seen.over_for_s
    if over is None or lasted_s is None or lasted_s < seen.counts_after_s:
        return None
    return f"{over[0]} {over[1]:.0f}C>={over[2]:.0f}C crit for {lasted_s:.0f}s"


def _below(now: float | None, most: float | None) -> bool:
    return now is not None and most is not None and now < most


# Each GPU check of publish/health_codes.py's CHECKS: its predicate, the fault's detail when it fails, else None.
# (The daemon's own checks, G001, G002, G014 and G015, are the state's reader's: cli/health.py.)
PREDICATES: dict[str, Callable[[Seen], str | None]] = {
    GPU_DOWN: lambda s: None if s.gpu.up else "not answering" if s.gpu.unresponsive else "gone",
    FAN_UNCONTROLLED: lambda s: ("fan uncontrolled" + (f": {s.fan.message}" if s.fan.message else "")
                                 if s.fan is not None and s.fan.mode is FanMode.UNCONTROLLED else None),
    FAN_FAILSAFE: _fan_failsafe,
    FAN_STALLED: lambda s: f"fan stalled at {s.fan.rpm or 0} rpm" if s.fan is not None and s.fan.stalled else None,
    OVER_CRIT: _over_crit,
    RESET_STUCK: lambda s: (f"reset, {len(s.reset.stuck_pids)} stuck process(es) "
                            + ",".join(str(pid) for pid in s.reset.stuck_pids[:4]) if s.reset and s.reset.stuck_pids
                            else None),
    # Stuck processes are G009's: the one fault of a reset.
    RESET_RECOVERING: lambda s: (f"reset #{s.reset.resets_total}, recovering"
                                 if s.reset and s.reset.recovering and not s.reset.stuck_pids else None),
    PCIE_WIDTH: lambda s: (f"pcie x{s.gpu.pcie_slot_link_width}<x{s.gpu.pcie_slot_max_link_width}"
                           if s.gpu.up and _below(s.gpu.pcie_slot_link_width, s.gpu.pcie_slot_max_link_width)
                           else None),
    PCIE_SPEED: lambda s: (f"pcie {s.gpu.pcie_slot_link_speed_gts:g}<{s.gpu.pcie_slot_max_link_speed_gts:g}GT/s"
                           if s.gpu.up and _below(s.gpu.pcie_slot_link_speed_gts, s.gpu.pcie_slot_max_link_speed_gts)
                           else None),
    AER_FATAL: lambda s: f"pcie aer fatal {s.gpu.pcie_aer_fatal_total}" if s.gpu.pcie_aer_fatal_total else None,
    AER_NONFATAL: lambda s: (f"pcie aer nonfatal {s.gpu.pcie_aer_nonfatal_total}" if s.gpu.pcie_aer_nonfatal_total
                             else None),
}
_GPU_CHECKS = tuple((code, name, PREDICATES[code]) for code, name, _, _, _ in CHECKS if code in PREDICATES)


def judge(state: PublishedState, settings: HealthConfig, since: Mapping[str, float], now: float) -> NodeHealth:
    """The verdict: every failed check that is on, in GPU order, then table order; ``since`` from
    ``over_crit_since``."""
    fans = {fan.gpu_id: fan for fan in state.fans}
    resets = {reset.gpu_id: reset for reset in state.snapshot.resets}
    checks = [(code, failed) for code, name, failed in _GPU_CHECKS if name is not None and settings.on(name)]
    faults: list[HealthFault] = []
    for gpu in state.snapshot.gpus:
        started = since.get(gpu.gpu_id)
        seen = Seen(gpu, fans.get(gpu.gpu_id), resets.get(gpu.gpu_id), _hottest_over_crit(gpu),
                    None if started is None else now - started, settings.over_crit_s)
        for code, failed in checks:
            detail = failed(seen)
            if detail is not None:
                faults.append(HealthFault(code, gpu.gpu_id, detail))
    return NodeHealth(healthy=not faults, faults=tuple(faults), notes=_notes(state),
                      drain_after_checks=settings.drain_after_checks, resume_after_checks=settings.resume_after_checks)


def _hottest_over_crit(gpu: GpuReading) -> tuple[str, float, float] | None:
    """(label, temp, crit) of the sensor furthest over its crit (the first of equals), of those that have both;
    None when none is at or over. One pass, no lists: asked twice a GPU a tick (``over_crit_since``, ``judge``),
    the lists and ``max``'s key were a third of the verdict's time."""
    hottest: tuple[str, float, float] | None = None
    most_over_c = 0.0
    for t in gpu.temps:
        temp_c, crit_c = t.temp_c, t.crit_c
        if temp_c is not None and crit_c is not None and at_crit(temp_c, crit_c):
            over_c = temp_c - crit_c
            if hottest is None or over_c > most_over_c:
                hottest, most_over_c = (t.label, temp_c, crit_c), over_c
    return hottest


def _notes(state: PublishedState) -> tuple[str, ...]:
    notes = [f"{p.gpu_id} power capped" + (" at the floor" if p.mode is PowerMode.FLOOR else "")
             for p in state.powers if p.mode in (PowerMode.GOVERNING, PowerMode.FLOOR)]
    notes += [f"trainer {t.name} paused" for t in state.trainers if t.phase in (TrainerPhase.PAUSING,
                                                                                   TrainerPhase.PAUSED)]
    return tuple(notes)
