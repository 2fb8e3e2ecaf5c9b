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

from collections.abc import Mapping

from gpuwatch.config.sections import HealthConfig
from gpuwatch.model import (
    FanMode,
    GpuReading,
    HealthFault,
    NodeHealth,
    PowerMode,
    PublishedState,
    TrainerPhase,
    at_crit,
)
from gpuwatch.publish.health_codes import (
    AER_FATAL,
    CODES,
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


def judge(state: PublishedState, settings: HealthConfig, since: Mapping[str, float], now: float) -> NodeHealth:
    """The verdict: every fault of a class that is on, in GPU order; ``since`` from ``over_crit_since``."""
    faults: list[HealthFault] = []
    fans = {fan.gpu_id: fan for fan in state.fans}
    resets = {reset.gpu_id: reset for reset in state.snapshot.resets}
    for gpu in state.snapshot.gpus:
        found: list[tuple[str, str]] = []
        if not gpu.up:
            found.append((GPU_DOWN, "not answering" if gpu.unresponsive else "gone"))
        fan = fans.get(gpu.gpu_id)
        over = _hottest_over_crit(gpu)
        temp = f"{over[0]} {over[1]:.0f}C>{over[2]:.0f}C " if over is not None else ""
        if fan is not None and fan.mode is FanMode.FAILSAFE:
            found.append((FAN_FAILSAFE, f"{temp}fan failsafe" + (f": {fan.failsafe_reason}" if fan.failsafe_reason
                                                                    and not temp else "")))
        if fan is not None and fan.mode is FanMode.UNCONTROLLED:
            found.append((FAN_UNCONTROLLED, "fan uncontrolled" + (f": {fan.message}" if fan.message else "")))
        if fan is not None and fan.stalled:
            found.append((FAN_STALLED, f"fan stalled at {fan.rpm or 0} rpm"))
        started = since.get(gpu.gpu_id)
        if over is not None and started is not None and _lasted(started, now, settings.over_crit_s):
            found.append((OVER_CRIT, f"{over[0]} {over[1]:.0f}C>={over[2]:.0f}C crit for {now - started:.0f}s"))
        reset = resets.get(gpu.gpu_id)
        if reset is not None and reset.stuck_pids:
            pids = ",".join(str(pid) for pid in reset.stuck_pids[:4])
            found.append((RESET_STUCK, f"reset, {len(reset.stuck_pids)} stuck process(es) {pids}"))
        elif reset is not None and reset.recovering:
            found.append((RESET_RECOVERING, f"reset #{reset.resets_total}, recovering"))
        found += _pcie(gpu)
        faults += [HealthFault(code, gpu.gpu_id, detail) for code, detail in found
                   if getattr(settings, CODES[code][0])]
    return NodeHealth(healthy=not faults, faults=tuple(faults), notes=_notes(state),
                      drain_after_checks=settings.drain_after_checks, resume_after_checks=settings.resume_after_checks)


def _lasted(since: float, now: float, minimum_s: float) -> bool:
    return now - since >= minimum_s


def _pcie(gpu: GpuReading) -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []
    width, most = gpu.pcie_slot_link_width, gpu.pcie_slot_max_link_width
    if gpu.up and width is not None and most is not None and width < most:
        found.append((PCIE_WIDTH, f"pcie x{width}<x{most}"))
    speed, top = gpu.pcie_slot_link_speed_gts, gpu.pcie_slot_max_link_speed_gts
    if gpu.up and speed is not None and top is not None and speed < top:
        found.append((PCIE_SPEED, f"pcie {speed:g}<{top:g}GT/s"))
    if gpu.pcie_aer_fatal_total:
        found.append((AER_FATAL, f"pcie aer fatal {gpu.pcie_aer_fatal_total}"))
    return found


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
