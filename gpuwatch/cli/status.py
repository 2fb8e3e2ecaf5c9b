"""Renders a status document (publish/document.py) as gpustat/nvidia-smi style text, and its exit code.

Pure: takes the document, ``now`` and whether to colour; the CLI decides the colour (TTY only).

The process table (``--processes``) has one row per process and GPU. VRAM is the larger of what its
DRM clients hold and what KFD (ROCm) says it holds (the two may count the same buffers); ``-``: its
client is one another process (its parent, usually) already counts. BUSY is its drm-engine-* time
over wall time; ROCm compute goes through /dev/kfd and never shows there, so for a ROCm process whose
engines read 0 it is the compute units its waves occupy (``cu``), where the kernel reports that.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from gpuwatch.publish.schema import (
    FanControllerDoc,
    GpuDoc,
    PowerGovernorDoc,
    ProcessDoc,
    StatusDocument,
    TemperatureDoc,
    TrainerDoc,
    TrainerGpuUseDoc,
)

RED, YELLOW, GREEN, BOLD, DIM, RESET = "\033[31m", "\033[33m", "\033[32m", "\033[1m", "\033[2m", "\033[0m"
NA = "N/A"
PWM_MODES = {0: "full (none)", 1: "manual", 2: "auto"}
TABLE_ONLY_TEMPS = frozenset({"vrgfx", "vrsoc", "vrmem", "soc"})
EXIT_OK, EXIT_ALARM, EXIT_USAGE = 0, 1, 2
WARN_BELOW_LIMIT_C = 10.0

Paint = Callable[[str, "str | None"], str]  # text, colour (None: plain) -> text


def exit_code(doc: StatusDocument) -> int:
    """1 when a GPU is over a limit, down, its fan in failsafe or uncontrolled, recovering from a reset, a trainer
    failed or left a process stuck, or the daemon reports a failure."""
    daemon = doc.get("daemon")
    if daemon and daemon.get("failures"):
        return EXIT_ALARM
    for gpu in doc.get("gpus", []):
        fan = gpu.get("fan_controller")
        fan_bad = bool(fan and (fan.get("mode") in ("failsafe", "uncontrolled") or fan.get("stalled")))
        reset = gpu.get("reset")
        if gpu.get("over_limit") or not gpu.get("up", True) or fan_bad or (reset and reset.get("recovering")):
            return EXIT_ALARM
    if any(t.get("phase") == "failed" or t.get("stuck_pids") for t in doc.get("trainers", [])):
        return EXIT_ALARM
    return EXIT_OK


def render(doc: StatusDocument, now: float | None = None, color: bool = False, note: str | None = None) -> str:
    now = time.time() if now is None else now
    paint = _painter(color)
    lines = [_header(doc, now, paint)]
    if note:
        lines.append(paint(note, YELLOW))
    if not doc.get("gpus"):
        lines.append("no GPU found")
    for gpu in doc.get("gpus", []):
        lines.extend(_gpu_block(gpu, paint))
    for card in doc.get("unsupported", []):
        lines.append(paint(f"[{card.get('gpu_id') or '?'}] {card['card']}  driver {card.get('driver') or '?'}: not supported, not read", DIM))
    for trainer in doc.get("trainers", []):
        lines.append(_trainer_line(trainer, now, paint))
        lines.extend(_trainer_gpu_lines(trainer, paint))
    return "\n".join(lines) + "\n"


def _header(doc: StatusDocument, now: float, paint: Paint) -> str:
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(doc.get("taken_unix") or now))
    daemon = doc.get("daemon")
    if daemon:
        state = f"daemon running (pid {daemon['pid']}, up {_duration(now - daemon['started_unix'])}, every {daemon['interval_s']:g}s)"
        for failure in daemon.get("failures") or []:
            state += "  " + paint(f"FAILURE: {failure}", RED)
    else:
        state = f"read from {_sources(doc)}"
    return f"{paint('gpuwatch', BOLD)}  {stamp}  {state}"


def _sources(doc: StatusDocument) -> str:
    """What a direct reading came from: sysfs for amdgpu, NVML for NVIDIA GPUs."""
    names = {"nvml": "NVML"}
    found = dict.fromkeys(names.get(gpu.get("backend") or "", "sysfs") for gpu in doc.get("gpus", []))
    return " and ".join(found) or "sysfs"


def _gpu_block(gpu: GpuDoc, paint: Paint) -> list[str]:
    vendor = "NVIDIA GPU " if gpu.get("backend") == "nvml" else "AMD GPU "
    title = f"[{gpu['gpu_id']}] {gpu['card']}  {gpu.get('name') or vendor + (gpu.get('device_id') or '?')}"
    if gpu.get("unresponsive"):
        return [paint(title, BOLD) + "  " + paint("DOWN (unresponsive: its sysfs reads hang)", RED)]
    if not gpu.get("up", True):
        return [paint(title, BOLD) + "  " + paint("DOWN (gone from the bus or reset)", RED), *_reset_lines(gpu, paint)]
    if gpu.get("suspended"):
        return [paint(title, BOLD) + "  " + paint("suspended (runtime PM): not read, so it can sleep", DIM)]
    temperatures = gpu.get("temperatures", {})
    over = gpu.get("over_limit") or []
    # The gpu_metrics-only sensors (VR, SoC) stay in --json and /metrics: the line must fit 80 columns.
    temps = "  ".join(_temp(label, t, label in over, paint) for label, t in temperatures.items()
                      if label not in TABLE_ONLY_TEMPS) or NA
    lines = [
        paint(title, BOLD),
        f"  temp   {temps}",
        *_limits(temperatures),
        f"  busy   gpu {_pct(gpu.get('gpu_busy_ratio'))}  mem {_pct(gpu.get('mem_busy_ratio'))}",
        _memory_line(gpu),
        _power_line(gpu, paint),
        _fan_line(gpu),
        *_health_lines(gpu, paint),
    ]
    fan = gpu.get("fan_controller")
    if fan:
        lines.append("  ctrl   " + _controller(fan, paint))
    power = gpu.get("power_governor")
    if power and power.get("mode") == "unavailable":
        lines.append("  govern " + paint(f"power cap not governed: {power.get('reason') or NA}", YELLOW))
    if gpu.get("errors"):
        errs = ", ".join(f"{e['sensor']}: {e['error']}" for e in gpu["errors"][:4])
        more = f" (+{len(gpu['errors']) - 4} more)" if len(gpu["errors"]) > 4 else ""
        lines.append("  " + paint(f"errors {errs}{more}", YELLOW))
    return lines + _reset_lines(gpu, paint)


def _reset_lines(gpu: GpuDoc, paint: Paint) -> list[str]:
    reset = gpu.get("reset")
    if not reset or not reset.get("resets_total"):
        return []
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(reset.get("last_reset_unix") or 0))
    text = f"  reset  {reset['resets_total']} since start, last {when} ({reset.get('last_source') or '?'}): " \
           f"{reset.get('last_summary') or NA}"
    if reset.get("dump_path"):
        text += f"; dump {reset['dump_path']}"
    lines = [paint(text, YELLOW)]
    if reset.get("stuck_pids"):
        pids = ", ".join(str(p) for p in reset["stuck_pids"])
        lines.append("  " + paint(f"RECOVERING: held by pid {pids} in D state; the host may need a reboot", RED))
    elif reset.get("recovering"):
        lines.append("  " + paint("RECOVERING: not answering since its reset", RED))
    return lines


def _memory_line(gpu: GpuDoc) -> str:
    text = f"  vram   {_bytes(gpu.get('vram_used_bytes'))} / {_bytes(gpu.get('vram_total_bytes'))}"
    reserved = gpu.get("vram_reserved_bytes")
    if reserved is not None:  # NVML: the driver's own share, which nvidia-smi also shows apart from used
        return f"{text}   reserved by the driver {_bytes(reserved)}"
    return f"{text}   gtt {_bytes(gpu.get('gtt_used_bytes'))} / {_bytes(gpu.get('gtt_total_bytes'))}"


def _fan_line(gpu: GpuDoc) -> str:
    if gpu.get("backend") == "nvml":
        # NVML gives a duty percent only, and gpuwatch never drives NVIDIA fans.
        duty = gpu.get("fan_duty_ratio")
        return f"  fan    {'none (passive board)' if duty is None else 'duty ' + _pct(duty)}  control: unsupported (monitor only)"
    enable = gpu.get("pwm_enable")
    mode = NA if enable is None else PWM_MODES.get(enable, NA)
    source = (gpu.get("sources") or {}).get("fan_rpm")
    rpm = _num(gpu.get("fan_rpm"), "RPM") + (f" ({source})" if source else "")
    return f"  fan    {rpm}  pwm {_pct(gpu.get('pwm_ratio'))}  mode {mode}"


def _health_lines(gpu: GpuDoc, paint: Paint) -> list[str]:
    """Only what needs a look: the card throttling itself now, a slot link below its maximum, PCIe errors."""
    lines = []
    flags = gpu.get("throttle_flags")
    if flags:
        throttled = {reason: s for reason, s in (gpu.get("throttled_s") or {}).items() if s >= 1}
        total = "  throttled " + ", ".join(f"{r} {_duration(s)}" for r, s in throttled.items()) if throttled else ""
        reasons = ", ".join(gpu.get("throttle_reasons") or [])
        lines.append("  thrtl  " + paint(f"THROTTLING {reasons} ({' '.join(flags)})", YELLOW) + total)
    speed, width = gpu.get("pcie_slot_link_speed_gts"), gpu.get("pcie_slot_link_width")
    top_speed, top_width = gpu.get("pcie_slot_max_link_speed_gts"), gpu.get("pcie_slot_max_link_width")
    counts = [gpu.get("pcie_aer_correctable_total"), gpu.get("pcie_aer_nonfatal_total"), gpu.get("pcie_aer_fatal_total")]
    replays = gpu.get("pcie_replays_total")
    below = (speed or 0) < (top_speed or 0) or (width or 0) < (top_width or 0)
    if below or any(counts) or replays:
        link = f"{_num(speed, 'GT/s', 1)} x{width if width is not None else NA}"
        if below:
            link = paint(link, YELLOW) + f" (below max {_num(top_speed, 'GT/s', 1)} x{top_width})"
        aer = "" if all(c is None for c in counts) else "  aer cor/nonfatal/fatal " + "/".join(
            NA if c is None else str(c) for c in counts)
        lines.append(f"  pcie   {link}" + (paint(aer, RED) if any(counts[1:]) else aer)
                     + ("" if replays is None else f"  replays {replays}"))
    return lines


def _temp(label: str, t: TemperatureDoc, over: bool, paint: Paint) -> str:
    """``junction 101°C OVER LIMIT`` (red) when the document lists the sensor in over_limit (the one
    "at or above the pause limit" rule, limits.over_limit), yellow within 10 °C of the limit, green below."""
    value, limit = t.get("temp_c"), t.get("limit_c")
    text = f"{label} {_num(value, '°C', 0)}"
    if over:
        return paint(f"{text} OVER LIMIT", RED)
    if value is not None and limit is not None:
        if value >= limit - WARN_BELOW_LIMIT_C:
            return paint(text, YELLOW)
        return paint(text, GREEN)
    return text


def _limits(temperatures: dict[str, TemperatureDoc]) -> list[str]:
    """The line the temperatures are judged against: each sensor's pause limit, then the card's crits."""
    limits = "  ".join(f"{label} {t['limit_c']:.0f}°C" for label, t in temperatures.items() if t.get("limit_c") is not None)
    crit = [t.get("crit_c") for t in temperatures.values()]
    crits = "/".join("-" if c is None else f"{c:.0f}" for c in crit) if any(c is not None for c in crit) else ""
    if not limits and not crits:
        return []
    text = f"  limit  pause at {limits}" if limits else "  limit  no pause limit"
    return [text + (f"   crit {crits}°C" if crits else "")]


def _controller(fan: FanControllerDoc, paint: Paint) -> str:
    mode = fan.get("mode") or NA
    mode_text = paint(mode, RED if mode in ("failsafe", "uncontrolled") else YELLOW if mode in ("monitor-only", "dry-run") else GREEN)
    parts = [f"{mode_text} via {fan.get('backend') or NA}"]
    if fan.get("sensor"):
        parts.append(f"on {fan['sensor']} {_num(fan.get('sensor_temp_c'), '°C', 0)}")
    parts.append(f"target {_pct(fan.get('target_ratio'))}")
    if fan.get("stalled"):
        parts.append(paint("FAN STALLED", RED))
    if fan.get("message"):
        parts.append(f"({fan['message']})")
    return "  ".join(parts)


def _power_line(gpu: GpuDoc, paint: Paint) -> str:
    """Power, the cap, the clocks and the energy. While the governor acts on the cap, the memory clock (which
    the cap leaves alone: it is still in --json and /metrics) makes room for its part, so the line keeps
    within 80 columns: ``power  131 W / cap 131/150 W, governed   sclk 1690 MHz  energy 0.012 kWh``."""
    power: PowerGovernorDoc | None = gpu.get("power_governor")
    mode = power.get("mode") if power else None
    sclk = f"   sclk {_num(_mhz(gpu.get('sclk_hz')), 'MHz')}"
    if power is None or mode not in ("governing", "floor", "dry-run"):
        cap = _num(gpu.get("power_cap_w"), "W") + sclk + f"  mclk {_num(_mhz(gpu.get('mclk_hz')), 'MHz')}"
    elif mode == "dry-run":
        cap = f"{_num(power.get('cap_w'), 'W')}, would set {_num(power.get('target_cap_w'), 'W')}" + sclk
    else:
        held = power.get("cap_w")
        cap = (f"{NA if held is None else f'{held:.0f}'}/{_num(power.get('original_cap_w'), 'W')}, "
               + (paint("at floor", RED) if mode == "floor" else paint("governed", YELLOW)) + sclk)
    return f"  power  {_num(gpu.get('power_w'), 'W')} / cap {cap}" + _energy(gpu.get("energy_joules"))


def _trainer_line(t: TrainerDoc, now: float, paint: Paint) -> str:
    phase = t.get("phase") or NA
    colour = {"running": GREEN, "paused": YELLOW, "pausing": YELLOW, "failed": RED, "backoff": YELLOW}.get(phase)
    text = f"trainer {t['name']}: {paint(phase, colour) if colour else phase}"
    if t.get("pid"):
        text += f"  pid {t['pid']}"
    started_unix = t.get("started_unix")
    if started_unix:
        text += f"  up {_duration(now - started_unix)}"
    text += f"  restarts {t.get('restarts_total', 0)}"
    if t.get("last_exit_code") is not None:
        text += f"  last exit {t['last_exit_code']}"
    if t.get("steps_per_s") is not None:
        text += f"  {t['steps_per_s']:.2f} steps/s"
    if t.get("last_step_age_s") is not None:
        text += f"  last step {t['last_step_age_s']:.0f}s ago"
    text += _energy(t.get("run_energy_j"))
    if t.get("steps_per_kj") is not None:
        text += f"  {t['steps_per_kj']:.1f} steps/kJ"
    ranks = t.get("ranks")
    if ranks:  # a distributed job: its ranks on this machine (of the whole job's)
        held = t.get("ranks_held") or 0
        text += f"  {held}/{ranks} ranks held" if phase in ("pausing", "paused") or held else f"  {ranks} ranks"
        job = t.get("world_size")
        text += f" (job: {job})" if job and job != ranks else ""
    if t.get("reason"):
        text += f"  ({t['reason']})"
    return text


def _trainer_gpu_lines(t: TrainerDoc, paint: Paint) -> list[str]:
    lines = [f"  on {use['gpu_id']}: {_use(use)}" for use in t.get("gpu_use", [])]
    if t.get("stuck_pids"):
        pids = ", ".join(str(p) for p in t["stuck_pids"])
        lines.append("  " + paint(f"pid {pids} left behind after SIGKILL (D state): the host may need a reboot", RED))
    return lines


def _use(use: TrainerGpuUseDoc) -> str:
    text = f"vram {_bytes(use.get('vram_bytes'))}  gtt {_bytes(use.get('gtt_bytes'))}" \
           f"  engine {_pct(use.get('engine_busy_ratio'))}"
    if use.get("kfd_vram_bytes") is not None:
        text += f"  rocm vram {_bytes(use.get('kfd_vram_bytes'))}  cu {_pct(use.get('kfd_cu_occupancy_ratio'))}"
    return text + f"  ({use.get('processes', 0)} process{'es' if use.get('processes', 0) != 1 else ''})"


HEADER = ("PID", "USER", "GPU", "VRAM", "GTT", "BUSY", "STATE", "TRAINER", "COMMAND")


def render_processes(doc: StatusDocument, width: int = 160) -> str:
    """`status --processes`: one row per process and GPU, like nvidia-smi's table (see _PROCESSES_DOC)."""
    rows = sorted(doc.get("processes", []), key=lambda r: (r["gpu_id"], -_vram(r), r["pid"]))
    table = [HEADER] + [
        (str(r["pid"]), r.get("user") or NA, r["gpu_id"], _memory(_vram(r) if _held(r) else None),
         _memory(r.get("gtt_bytes")), _busy(r), r.get("state") or NA, r.get("trainer") or "-", r["command"])
        for r in rows
    ]
    widths = [max(len(row[i]) for row in table) for i in range(len(HEADER) - 1)]
    lines = []
    for row in table:
        line = "  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row[:-1])) + "  " + row[-1]
        lines.append(line[:width].rstrip())
    if not rows:
        lines.append("no process has a GPU open (that gpuwatch may see)")
    unreadable = doc.get("processes_unreadable", 0)
    if unreadable:
        lines.append(f"{unreadable} process(es) not readable (other users'): run as root to see them all")
    if any(r.get("kfd") for r in rows):
        lines.append("ROCm (KFD) compute is not in the kernel's engine time: BUSY shows 'cu' occupancy for it")
    return "\n".join(lines) + "\n"


def _held(row: ProcessDoc) -> bool:
    return row.get("vram_bytes") is not None or row.get("kfd_vram_bytes") is not None


def _vram(row: ProcessDoc) -> int:
    return max(row.get("vram_bytes") or 0, row.get("kfd_vram_bytes") or 0)


def _memory(value: int | None) -> str:
    return "-" if value is None else _bytes(value)


def _busy(row: ProcessDoc) -> str:
    engine, cu = row.get("engine_busy_ratio"), row.get("kfd_cu_occupancy_ratio")
    if row.get("kfd") and cu is not None and not engine:
        return f"cu {cu * 100:.0f}%"
    return NA if engine is None else f"{engine * 100:.0f}%"


def _painter(color: bool) -> Paint:
    def paint(text: str, code: str | None) -> str:
        return f"{code}{text}{RESET}" if color and code else text

    return paint


def _pct(ratio: float | None) -> str:
    return NA if ratio is None else f"{ratio * 100:.0f}%"


def _num(value: float | None, unit: str, digits: int = 0) -> str:
    return NA if value is None else f"{value:.{digits}f} {unit}".replace(" °C", "°C")


def _energy(joules: float | None) -> str:
    if joules is None:
        return ""
    kwh = joules / 3.6e6
    return f"  energy {'<0.001' if 0 < kwh < 0.001 else f'{kwh:.3f}'} kWh"


def _mhz(hz: float | None) -> float | None:
    return None if hz is None else hz / 1e6


def _bytes(value: int | None) -> str:
    if value is None:
        return NA
    if value >= 1 << 30:
        return f"{value / (1 << 30):.1f} GiB"
    return f"{value / (1 << 20):.0f} MiB"


def _duration(seconds: float) -> str:
    seconds = max(0, int(seconds))
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d{hours:02d}h"
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{secs:02d}s"
