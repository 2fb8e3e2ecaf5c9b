"""The node's health verdict for a scheduler (pure): a PublishedState + the [health] settings -> NodeHealth.

Each fault class has a stable code (publish/health_codes.py, docs/cluster.md) and one line, e.g.
``gpuwatch:G006 0000:03:00.0 junction 108C>105C fan failsafe``, so a drain reason or an NPD condition
can be matched by a regex. Normal operation is never a fault: a power cap governing (even at its floor)
and a paused trainer are what gpuwatch does to keep a hot card in its limits; they are ``notes``
(Nagios WARNING). Only "over crit" needs history (how long): ``over_crit_since`` carries it from tick
to tick, and ``judge`` is given it with ``now``.

G001 (stale state) and G002 (no daemon) are found by the reader of the state (`gpuwatch health`), not here.
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


def _gpu_down(seen: Seen) -> str | None:
    return None if seen.gpu.up else ("not answering" if seen.gpu.unresponsive else "gone")


def _fan_uncontrolled(seen: Seen) -> str | None:
    fan = seen.fan
    if fan is None or fan.mode is not FanMode.UNCONTROLLED:
        return None
    return "fan uncontrolled" + (f": {fan.message}" if fan.message else "")


def _fan_failsafe(seen: Seen) -> str | None:
    fan, over = seen.fan, seen.over
    if fan is None or fan.mode is not FanMode.FAILSAFE:
        return None
    if over is not None:
        return f"{over[0]} {over[1]:.0f}C>{over[2]:.0f}C fan failsafe"
    return "fan failsafe" + (f": {fan.failsafe_reason}" if fan.failsafe_reason else "")


def _fan_stalled(seen: Seen) -> str | None:
    return f"fan stalled at {seen.fan.rpm or 0} rpm" if seen.fan is not None and seen.fan.stalled else None


def _over_crit(seen: Seen) -> str | None:
    over, lasted_s = seen.over, seen.over_for_s
    if over is None or lasted_s is None or lasted_s < seen.counts_after_s:
        return None
    return f"{over[0]} {over[1]:.0f}C>={over[2]:.0f}C crit for {lasted_s:.0f}s"


def _reset_stuck(seen: Seen) -> str | None:
    reset = seen.reset
    if reset is None or not reset.stuck_pids:
        return None
    return f"reset, {len(reset.stuck_pids)} stuck process(es) {','.join(str(pid) for pid in reset.stuck_pids[:4])}"


def _reset_recovering(seen: Seen) -> str | None:
    reset = seen.reset  # stuck processes are G009's: the one fault of a reset
    return f"reset #{reset.resets_total}, recovering" if reset and reset.recovering and not reset.stuck_pids else None


def _pcie_width(seen: Seen) -> str | None:
    width, most = seen.gpu.pcie_slot_link_width, seen.gpu.pcie_slot_max_link_width
    return f"pcie x{width}<x{most}" if seen.gpu.up and width is not None and most is not None and width < most else None


def _pcie_speed(seen: Seen) -> str | None:
    speed, top = seen.gpu.pcie_slot_link_speed_gts, seen.gpu.pcie_slot_max_link_speed_gts
    if seen.gpu.up and speed is not None and top is not None and speed < top:
        return f"pcie {speed:g}<{top:g}GT/s"
    return None


def _aer_fatal(seen: Seen) -> str | None:
    return f"pcie aer fatal {seen.gpu.pcie_aer_fatal_total}" if seen.gpu.pcie_aer_fatal_total else None


def _aer_nonfatal(seen: Seen) -> str | None:
    return f"pcie aer nonfatal {seen.gpu.pcie_aer_nonfatal_total}" if seen.gpu.pcie_aer_nonfatal_total else None


# Each GPU check of publish/health_codes.py's CHECKS: its predicate, the fault's detail when it fails, else None.
# (The daemon's own checks, G001, G002, G014 and G015, are the state's reader's: cli/health.py.)
PREDICATES: dict[str, Callable[[Seen], str | None]] = {
    GPU_DOWN: _gpu_down, FAN_UNCONTROLLED: _fan_uncontrolled, FAN_FAILSAFE: _fan_failsafe, FAN_STALLED: _fan_stalled,
    OVER_CRIT: _over_crit, RESET_STUCK: _reset_stuck, RESET_RECOVERING: _reset_recovering, PCIE_WIDTH: _pcie_width,
    PCIE_SPEED: _pcie_speed, AER_FATAL: _aer_fatal, AER_NONFATAL: _aer_nonfatal,
}
_GPU_CHECKS = tuple((code, name, PREDICATES[code]) for code, name, _, _, _ in CHECKS if code in PREDICATES)


def judge(state: PublishedState, settings: HealthConfig, since: Mapping[str, float], now: float) -> NodeHealth:
    """The verdict: every failed check that is on, in GPU order, then table order; ``since`` from
    ``over_crit_since``."""
    fans = {fan.gpu_id: fan for fan in state.fans}
    resets = {reset.gpu_id: reset for reset in state.snapshot.resets}
    faults: list[HealthFault] = []
    for gpu in state.snapshot.gpus:
        started = since.get(gpu.gpu_id)
        seen = Seen(gpu, fans.get(gpu.gpu_id), resets.get(gpu.gpu_id), _hottest_over_crit(gpu),
                    None if started is None else now - started, settings.over_crit_s)
        for code, name, failed in _GPU_CHECKS:
            detail = failed(seen) if name is not None and settings.on(name) else None
            if detail is not None:
                faults.append(HealthFault(code, gpu.gpu_id, detail))
    return NodeHealth(healthy=not faults, faults=tuple(faults), notes=_notes(state),
                      drain_after_checks=settings.drain_after_checks, resume_after_checks=settings.resume_after_checks)


def _sensors(gpu: GpuReading) -> list[tuple[str, float, float]]:
    """(label, temp, crit) of each sensor that has both."""
    return [(t.label, t.temp_c, t.crit_c) for t in gpu.temps if t.temp_c is not None and t.crit_c is not None]


def _hottest_over_crit(gpu: GpuReading) -> tuple[str, float, float] | None:
    over = [sensor for sensor in _sensors(gpu) if at_crit(sensor[1], sensor[2])]
    return max(over, key=lambda s: s[1] - s[2], default=None)


def _notes(state: PublishedState) -> tuple[str, ...]:
    notes = [f"{p.gpu_id} power capped" + (" at the floor" if p.mode is PowerMode.FLOOR else "")
             for p in state.powers if p.mode in (PowerMode.GOVERNING, PowerMode.FLOOR)]
    notes += [f"trainer {t.name} paused" for t in state.trainers if t.phase in (TrainerPhase.PAUSING,
                                                                                   TrainerPhase.PAUSED)]
    return tuple(notes)
