"""The live page's per-tick summary (docs/page.md): a PublishedState -> a small JSON-ready dict (pure).

What one box's user watches: per GPU the temperatures against their limits, the fan against its curve,
the power against its cap and floor, the ladder's rung, its heat level, clocks, throttle reasons, PCIe link,
busy, VRAM and the processes on it; per run its phase, step rate, GPUs, energy and why it is paused; the box's
hostname and what gpuwatch is doing. Built from an allow-list of fields: it never carries a command line, a
log path or a dump path. The processes' program names and users are the one part the status document
redacts too (publish/redact.py's SENSITIVE): ``redacted`` takes them out, leaving their count, for the
readers /status redacts for. Numbers are rounded here, once, to the digits the page shows.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Callable, Iterable
from typing import Any, Literal, cast

from gpuwatch.config.cooling import FanConfig
from gpuwatch.limits import limits_by_sensor, over_limit
from gpuwatch.model import (
    ClockMode,
    FanMode,
    FanState,
    GpuProcess,
    GpuReading,
    GpuResetState,
    PowerMode,
    PowerState,
    PublishedState,
    TrainerPhase,
    TrainerState,
    at_crit,
)

# The escalation ladder, lowest first (docs/power.md): more air, a lower power cap, a clock ceiling, then the pause.
Rung = Literal["none", "fan", "cap", "clock", "pause"]
RUNGS: tuple[Rung, ...] = ("none", "fan", "cap", "clock", "pause")
HELD_PHASES = (TrainerPhase.PAUSING, TrainerPhase.PAUSED)
ABOVE_FLOOR_PERCENT = 0.5  # a fan target this far above the curve's lowest speed is the fan answering heat

Summary = dict[str, Any]

# How hot against the limits in force, lowest first (docs/page.md): within NEAR_C of the limit, at or over it,
# at or over the card's own critical temperature (the driver's temp*_crit: the hardware throttles there).
Level = Literal["ok", "near", "over", "critical"]
LEVELS: tuple[Level, ...] = ("ok", "near", "over", "critical")
NEAR_C = 5.0
# What gpuwatch is doing on the box, by the highest rung in use on any GPU (the tab's title says it).
DOING: dict[Rung, str] = {"none": "watching", "fan": "cooling", "cap": "capping", "clock": "clocking down",
                          "pause": "pausing"}


def temp_level(temp_c: float | None, limit_c: float | None, crit_c: float | None) -> Level | None:
    """One sensor's level; None when unreadable (the page says so in words, it never counts as cool)."""
    if temp_c is None:
        return None
    if at_crit(temp_c, crit_c):
        return "critical"
    if over_limit(temp_c, limit_c):
        return "over"
    return "near" if over_limit(temp_c, limit_c, margin_c=NEAR_C) else "ok"


def worst(levels: list[Level | None]) -> Level:
    """The highest of ``levels`` (an unreadable sensor, None, adds nothing); ok when none."""
    return max((level for level in levels if level is not None), key=LEVELS.index, default="ok")


def ladder_rung(fan: FanState | None, fan_floor_percent: float, power: PowerState | None,
                trainers_held: bool, clock_limited: bool = False) -> Rung:
    """The highest rung in use on one GPU: a held run (pause), a clock ceiling, a lowered cap, a fan
    driven above its lowest speed, else none."""
    if trainers_held:
        return "pause"
    if clock_limited:
        return "clock"
    if power is not None and power.mode in (PowerMode.GOVERNING, PowerMode.FLOOR):
        return "cap"
    if fan is not None and (fan.mode is FanMode.FAILSAFE or (
            fan.mode is FanMode.CURVE and fan.target_ratio is not None
            and fan.target_ratio * 100 > fan_floor_percent + ABOVE_FLOOR_PERCENT)):
        return "fan"
    return "none"


def rung_of(state: PublishedState, gpu_id: str, fan_config: FanConfig) -> Rung:
    """``ladder_rung`` of one GPU of ``state`` under its own fan settings (``fan_config``: already for_gpu):
    the live page and ``gpuwatch_ladder_rung`` (daemon/loop.py) alike."""
    return ladder_rungs(state, lambda _: fan_config, (gpu_id,))[0][1]


def ladder_rungs(state: PublishedState, fan_settings: Callable[[str], FanConfig],
                 gpu_ids: Iterable[str]) -> list[tuple[str, Rung]]:
    """``rung_of`` each of ``gpu_ids``, in their order, under ``fan_settings(gpu_id)`` (``FanConfig.for_gpu``):
    the state's runs, clocks, fans and caps gone through once for them all, each fan settings' floor made once
    (per GPU, ``rung_of`` went through each list again and made the curve again: 8 GPUs, 30 µs a tick)."""
    held = {gpu for t in state.trainers if t.phase in HELD_PHASES for gpu in (t.gpus or t.gpus_used)}
    clocked = {c.gpu_id for c in state.clocks if c.mode in (ClockMode.LIMITING, ClockMode.FLOOR)}
    fans: dict[str, FanState] = {}
    for fan in state.fans:
        fans.setdefault(fan.gpu_id, fan)  # the first, as a scan finds it
    powers: dict[str, PowerState] = {}
    for power in state.powers:
        powers.setdefault(power.gpu_id, power)
    # Each settings' floor by id, the settings kept beside it: a GPU's overrides are a new object each time, and
    # one freed could hand its id to the next.
    floors: dict[int, tuple[FanConfig, float]] = {}
    found: list[tuple[str, Rung]] = []
    for gpu_id in gpu_ids:
        settings = fan_settings(gpu_id)
        known = floors.get(id(settings))
        if known is None:
            curve = _curve(settings)
            known = floors[id(settings)] = (settings, max(settings.floor_percent, curve[0][1] if curve else 0.0))
        found.append((gpu_id, ladder_rung(fans.get(gpu_id), known[1], powers.get(gpu_id), gpu_id in held,
                                          gpu_id in clocked)))
    return found


def summary(state: PublishedState, fan_config: FanConfig, hostname: str = "") -> Summary:
    """The tick's summary; ``fan_config`` gives each GPU's curve (the tick's own configuration), ``hostname``
    the box's name (the header and the tab's title: two boxes in two tabs are told apart)."""
    fans = {f.gpu_id: f for f in state.fans}
    powers = {p.gpu_id: p for p in state.powers}
    resets = {r.gpu_id: r for r in state.snapshot.resets}
    # The rung of each GPU the tick computed already (daemon/loop.py, ``rung_of`` under the same fan settings);
    # a GPU without one (down, or a state built without them) gets ``rung_of`` here.
    rungs = cast(dict[str, Rung], dict(state.ladder_rungs))
    processes: dict[str, list[GpuProcess]] = {}
    for process in state.snapshot.processes:
        processes.setdefault(process.gpu_id, []).append(process)
    # Each GPU's fan settings' curve, made once per settings (the settings kept: a freed one's id can come again).
    curves: dict[int, tuple[FanConfig, list[list[float]]]] = {}
    limits = limits_by_sensor(state.limits_c)
    daemon = state.daemon
    gpus = []
    for gpu in state.snapshot.gpus:
        settings = fan_config.for_gpu(gpu.gpu_id)  # ``fan_config`` itself for a GPU without overrides
        made = curves.get(id(settings))
        if made is None:
            made = curves[id(settings)] = (settings, _curve(settings))
        curve = made[1]
        rung = rungs.get(gpu.gpu_id) or rung_of(state, gpu.gpu_id, settings)
        gpus.append(_gpu(limits, gpu, fans.get(gpu.gpu_id), powers.get(gpu.gpu_id), resets.get(gpu.gpu_id),
                         curve, rung, processes.get(gpu.gpu_id, [])))
    hottest = [t["temp_c"] for g in gpus for t in g["temps"] if t["temp_c"] is not None]
    return {
        "hostname": hostname,
        "level": worst([g["level"] for g in gpus]),
        "hottest_c": max(hottest) if hottest else None,
        "doing": DOING[max((g["rung"] for g in gpus), key=RUNGS.index, default="none")],
        **_when(state),
        "started_unix": daemon.started_unix if daemon else None,
        "failures": list(daemon.failures) if daemon else [],
        "gpus": gpus,
        "runs": [_run(t) for t in state.trainers],
    }


# What the history reads of a summary (publish/history.py: a point, the events): a GPU's keys, its fan's and
# its power's. ``history_part`` builds only these; the test holds it to ``summary`` cut down to them.
HISTORY_GPU_KEYS = ("id", "state", "temps", "fan", "power", "busy_pct", "resets_total")
HISTORY_FAN_KEYS = ("mode", "duty_pct", "message")
HISTORY_POWER_KEYS = ("w", "cap_w", "mode")


def history_part(state: PublishedState) -> Summary:
    """``summary`` cut down to what the history reads (the tick, its time and interval, the version, per GPU
    ``HISTORY_GPU_KEYS`` with a sensor's ``temp_c`` only, every run whole), each value made by the same helper.
    What the live feed keeps while no page is open (publish/live_feed.py): a third of the summary's cost, the
    whole one made only for a page (issue 52: 110 -> 40 µs a tick at 8 GPUs)."""
    fans = {f.gpu_id: f for f in state.fans}
    powers = {p.gpu_id: p for p in state.powers}
    resets = {r.gpu_id: r for r in state.snapshot.resets}
    gpus = []
    for gpu in state.snapshot.gpus:
        fan, power, reset = fans.get(gpu.gpu_id), powers.get(gpu.gpu_id), resets.get(gpu.gpu_id)
        gpus.append({
            "id": gpu.gpu_id,
            "state": _gpu_state(gpu, reset),
            "temps": [{"temp_c": _r(t.temp_c, 0)} for t in gpu.temps],
            "fan": {"mode": _fan_mode(fan), "duty_pct": _pct(gpu.fan_duty), "message": _fan_message(fan)},
            "power": {"w": _r(gpu.power_w, 0), "cap_w": _cap_w(gpu, power), "mode": _power_mode(power)},
            "busy_pct": _pct(gpu.gpu_busy_ratio),
            "resets_total": _resets_total(reset),
        })
    return {**_when(state), "gpus": gpus, "runs": [_run(t) for t in state.trainers]}


def _when(state: PublishedState) -> Summary:
    daemon = state.daemon
    return {
        "tick": daemon.ticks_total if daemon else 0,
        "taken_unix": round(state.snapshot.taken_unix, 3),
        "interval_s": daemon.interval_s if daemon else None,
        "version": daemon.version if daemon else None,
    }


def redacted(tick: Summary) -> Summary:
    """``tick`` for a reader /status redacts for (publish/redact.py's ``sees_sensitive``): the processes'
    names and users (SENSITIVE's ``processes.command`` and ``processes.user``) out, their count kept."""
    out = copy.copy(tick)
    out["gpus"] = [gpu | {"processes": []} for gpu in tick["gpus"]]
    out["redacted"] = True
    return out


def _curve(fan_config: FanConfig) -> list[list[float]]:
    return [[float(t), float(s)] for t, s in fan_config.curve]


def _gpu(limits: dict[tuple[str, str], float], gpu: GpuReading, fan: FanState | None, power: PowerState | None,
         reset: GpuResetState | None, curve: list[list[float]], rung: Rung, processes: list[GpuProcess]) -> Summary:
    temps: list[Summary] = []
    levels: list[Level | None] = []
    for t in gpu.temps:
        temp_c, limit_c, crit_c = _r(t.temp_c, 0), _r(limits.get((gpu.gpu_id, t.label)), 0), _r(t.crit_c, 0)
        levels.append(temp_level(temp_c, limit_c, crit_c))
        temps.append({"label": t.label, "temp_c": temp_c, "limit_c": limit_c, "crit_c": crit_c, "level": levels[-1]})
    return {
        "id": gpu.gpu_id,
        "name": gpu.name or gpu.device_id or gpu.card,
        "state": _gpu_state(gpu, reset),
        "level": worst(levels),
        "temps": temps,
        "fan": _fan(gpu, fan, curve),  # one list for the GPUs of the same settings: summaries are never changed
        "power": _power(gpu, power),
        "rung": rung,
        "busy_pct": _pct(gpu.gpu_busy_ratio),
        "vram_used_bytes": gpu.vram_used_bytes,
        "vram_total_bytes": gpu.vram_total_bytes,
        "resets_total": _resets_total(reset),
        "clocks": _clocks(gpu),
        "pcie": _pcie(gpu),
        "process_count": len(processes),
        "processes": [_process(p) for p in processes],
    }


def _clocks(gpu: GpuReading) -> Summary:
    return {
        "sclk_mhz": _mhz(gpu.sclk_hz if gpu.sclk_hz is not None else gpu.sclk_average_hz),
        "mclk_mhz": _mhz(gpu.mclk_hz if gpu.mclk_hz is not None else gpu.mclk_average_hz),
        "throttle": list(gpu.throttle_reasons) if gpu.throttle_reasons is not None else None,
    }


def _pcie(gpu: GpuReading) -> Summary:
    return {
        "gts": gpu.pcie_link_speed_gts, "width": gpu.pcie_link_width,
        "max_gts": gpu.pcie_max_link_speed_gts, "max_width": gpu.pcie_max_link_width,
    }


def _process(process: GpuProcess) -> Summary:
    """One process on a GPU as nvtop lists it, without its arguments (a command line can carry a secret):
    the program's name, its user, the run it belongs to, its VRAM and its share of the GPU."""
    argv0 = process.command.split(" ", 1)[0]
    busy = process.engine_busy_ratio if process.engine_busy_ratio else process.kfd_cu_occupancy_ratio
    return {
        "name": argv0 if argv0.startswith("[") else os.path.basename(argv0),
        "user": process.user,
        "run": process.trainer,
        "vram_bytes": process.kfd_vram_bytes if process.kfd_vram_bytes is not None else process.vram_bytes,
        "busy_pct": _pct(busy),
    }


def _gpu_state(gpu: GpuReading, reset: GpuResetState | None) -> str:
    if reset is not None and reset.recovering:
        return "recovering"
    if gpu.unresponsive:
        return "unresponsive"
    if not gpu.up:
        return "down"
    return "asleep" if gpu.suspended else "up"


def _fan(gpu: GpuReading, fan: FanState | None, curve: list[list[float]]) -> Summary:
    return {
        "mode": _fan_mode(fan),
        "duty_pct": _pct(gpu.fan_duty),
        "target_pct": _pct(fan.target_ratio) if fan else None,
        "rpm": fan.rpm if fan and fan.rpm is not None else gpu.fan_rpm,
        "sensor": fan.sensor if fan else None,
        "sensor_temp_c": _r(fan.sensor_temp_c, 1) if fan else None,
        "stalled": fan.stalled if fan else False,
        "message": _fan_message(fan),
        "curve": curve if fan is not None and fan.backend != "none" else [],
    }


def _power(gpu: GpuReading, power: PowerState | None) -> Summary:
    return {
        "w": _r(gpu.power_w, 0),
        "cap_w": _cap_w(gpu, power),
        "original_cap_w": _r(power.original_cap_w, 0) if power else None,
        "floor_cap_w": _r(power.floor_cap_w, 0) if power else None,
        "mode": _power_mode(power),
        "reason": power.reason if power else None,
    }


def _resets_total(reset: GpuResetState | None) -> int:
    return reset.resets_total if reset else 0


def _fan_mode(fan: FanState | None) -> str:
    return fan.mode.value if fan else "none"


def _fan_message(fan: FanState | None) -> str | None:
    return fan.failsafe_reason or fan.message if fan else None


def _cap_w(gpu: GpuReading, power: PowerState | None) -> float | None:
    return _r(power.cap_w if power and power.cap_w is not None else gpu.power_cap_w, 0)


def _power_mode(power: PowerState | None) -> str:
    return power.mode.value if power else "none"


def _run(trainer: TrainerState) -> Summary:
    # attached runs (branch attachd) come through the same TrainerState list with an ``origin``.
    origin = str(getattr(trainer, "origin", "configured"))
    why = None
    if trainer.phase in HELD_PHASES or trainer.phase is TrainerPhase.STARTING:
        why = trainer.paused_by or trainer.reason  # thermal verdicts and "paused by NODE": no path in them
        why = pause_cause(why) if why else None
    elif trainer.phase in (TrainerPhase.BACKOFF, TrainerPhase.FAILED):
        why = _exit(trainer.last_exit_code)  # not the exit reason: a failed spawn's names the program's path
    return {
        "name": trainer.name,
        "origin": origin,
        "phase": trainer.phase.value,
        "steps_per_s": _r(trainer.steps_per_s, 2),
        "steps_total": trainer.steps_total,
        "gpus": list(trainer.gpus or trainer.gpus_used),
        "run_energy_kj": _r(None if trainer.run_energy_j is None else trainer.run_energy_j / 1000, 1),
        "energy_total_kj": _r(trainer.energy_total_j / 1000, 1),
        "steps_per_kj": _r(trainer.steps_per_kj, 1),
        "why": why,
        "paused_since_unix": trainer.paused_since_unix,
        "restarts_total": trainer.restarts_total,
        "pauses_total": trainer.pauses_total,
    }


# The words before a pause's cause in a trainer's reason (supervise/pause.py, policy.py, attached.py write them:
# "pausing: manual pause", "restarted (exit code 1), still paused: paused (SIGSTOP): hot: ...", "re-attached holding
# its pause: ..."): the page shows the phase in a column of its own and its events say "paused" themselves.
PAUSE_MARKERS = ("pausing: ", "paused (SIGSTOP): ", "holding its pause: ")


def pause_cause(reason: str) -> str:
    """Why a run is held, without the phase words around it: ``manual pause``, ``hot: junction 99°C ...``,
    ``by node-b: hot ...`` (a pause another node asked for)."""
    for marker in PAUSE_MARKERS:
        head, found, cause = reason.rpartition(marker)
        if found:
            return cause
    return reason.removeprefix("paused ")  # "paused by NODE": "by NODE"


def _exit(code: int | None) -> str:
    if code is None:
        return "ended without an exit code (see gpuwatch status on the box)"
    return f"killed by signal {-code}" if code < 0 else f"exit code {code}"


def _r(value: float | None, digits: int) -> float | None:
    """Rounded here to the digits the page shows, once: a page that rounded a rounded value again could show
    149.49 W as 150 W."""
    return None if value is None else round(value, digits)


def _mhz(hz: float | None) -> float | None:
    return None if hz is None else round(hz / 1e6)


def _pct(ratio: float | None) -> float | None:
    return None if ratio is None else round(ratio * 100)
