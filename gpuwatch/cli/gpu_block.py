"""One GPU's block of `gpuwatch status` text (pure): its state, readings, controllers, read errors and resets."""

from __future__ import annotations

import time

from gpuwatch.cli.health_lines import health_lines
from gpuwatch.cli.text import BOLD, DIM, GREEN, NA, RED, YELLOW, Paint, energy, mhz, num, pct, size, state_text

TYPE_CHECKING = False  # the renderers read the light view (publish/light_view.py) or model's dataclasses (issue 52)
if TYPE_CHECKING:
    from gpuwatch.model import FanState, PowerState, PublishedGpu, PublishedTemp

PWM_MODES = {0: "full (none)", 1: "manual", 2: "auto"}
TABLE_ONLY_TEMPS = frozenset({"vrgfx", "vrsoc", "vrmem", "soc"})
WARN_BELOW_LIMIT_C = 10.0
ERRORS_SHOWN = 4


def gpu_block(gpu: PublishedGpu, paint: Paint) -> list[str]:
    title = _title(gpu)
    down = _not_read(gpu, title, paint)
    if down is not None:
        return down
    return [paint(title, BOLD), *_reading_lines(gpu, paint), *_control_lines(gpu, paint), *_error_lines(gpu, paint),
            *_reset_lines(gpu, paint), *_unmanaged_lines(gpu, paint)]


def _title(gpu: PublishedGpu) -> str:
    vendor = "NVIDIA GPU " if gpu.backend == "nvml" else "AMD GPU "
    return f"[{gpu.gpu_id}] {gpu.card}  {gpu.name or vendor + (gpu.device_id or '?')}"


def _not_read(gpu: PublishedGpu, title: str, paint: Paint) -> list[str] | None:
    """The whole block of a GPU with no readings (down or asleep), else None."""
    if gpu.unresponsive:
        return [paint(title, BOLD) + "  " + paint("DOWN (unresponsive: its sysfs reads hang)", RED)]
    if not gpu.up:
        return [paint(title, BOLD) + "  " + paint("DOWN (gone from the bus or reset)", RED), *_reset_lines(gpu, paint)]
    if gpu.suspended:
        return [paint(title, BOLD) + "  " + paint("suspended (runtime PM): not read, so it can sleep", DIM)]
    return None


def _reading_lines(gpu: PublishedGpu, paint: Paint) -> list[str]:
    temperatures = gpu.temperatures
    over = gpu.over_limit
    # The gpu_metrics-only sensors (VR, SoC) stay in --json and /metrics: the line must fit 80 columns.
    temps = "  ".join(_temp(label, t, label in over, paint) for label, t in temperatures.items()
                      if label not in TABLE_ONLY_TEMPS) or NA
    return [
        f"  temp   {temps}",
        *_limits(temperatures),
        f"  busy   gpu {pct(gpu.gpu_busy_ratio)}  mem {pct(gpu.mem_busy_ratio)}",
        _memory_line(gpu),
        _power_line(gpu, paint),
        _fan_line(gpu),
        *health_lines(gpu, paint),
    ]


def _control_lines(gpu: PublishedGpu, paint: Paint) -> list[str]:
    """What gpuwatch does with the GPU: the fan controller; the power governor only where it cannot act."""
    lines = []
    fan = gpu.fan_controller
    if fan:
        lines.append("  ctrl   " + _controller(fan, paint))
    power = gpu.power_governor
    if power and power.mode == "unavailable":
        lines.append("  govern " + paint(f"power cap not governed: {power.reason or NA}", YELLOW))
    clock = _clock_line(gpu, paint)
    if clock:
        lines.append(clock)
    return lines


def _clock_line(gpu: PublishedGpu, paint: Paint) -> str | None:
    """The clock rung (issue 36) while it holds a ceiling (or would, in dry-run); why it cannot act only where
    it would have to (the cap at its floor): ``clock  ceiling 2300/2500 MHz, floor 1500 MHz``; a floor the card
    showed (it refused a lower ceiling) and a ceiling the card runs above are said there too."""
    clock = gpu.clock_ceiling
    if not clock:
        return None
    mode = clock.mode
    floor = f", floor {num(clock.floor_mhz, 'MHz')}"
    if clock.card_floor_mhz is not None:
        floor += " (card's own)"  # it refused a lower ceiling (EINVAL)
    if mode in ("limiting", "floor"):
        held = clock.ceiling_mhz
        text = f"ceiling {NA if held is None else f'{held:.0f}'}/{num(clock.original_mhz, 'MHz')}"
        if clock.not_in_force:
            text += " ignored by the card: pause allowed"
        elif mode == "floor":
            own = clock.card_floor_mhz is not None
            text += floor + (": pause allowed" if own else " (at its floor: pause allowed)")
        else:
            text += floor
        return "  clock  " + paint(text, YELLOW)
    if mode == "dry-run" and clock.target_ceiling_mhz is not None:
        return f"  clock  dry-run: would set {num(clock.target_ceiling_mhz, 'MHz')}{floor}"
    power = gpu.power_governor
    if mode == "unavailable" and power and power.mode == "floor":
        return "  clock  " + paint(f"clock ceiling not governed: {clock.reason or NA}", YELLOW)
    return None


def _error_lines(gpu: PublishedGpu, paint: Paint) -> list[str]:
    errors = gpu.errors
    if not errors:
        return []
    if gpu.reset and gpu.reset.recovering:  # the driver refuses reads while in reset: expected, not a fault
        return ["  " + paint(f"errors {len(errors)} sensor(s) unreadable while it recovers from its reset", YELLOW)]
    # The first few and a count: one line, however many sensors fail.
    errs = ", ".join(f"{e.sensor}: {e.error}" for e in errors[:ERRORS_SHOWN])
    more = f" (+{len(errors) - ERRORS_SHOWN} more)" if len(errors) > ERRORS_SHOWN else ""
    return ["  " + paint(f"errors {errs}{more}", YELLOW)]


def _reset_lines(gpu: PublishedGpu, paint: Paint) -> list[str]:
    reset = gpu.reset
    if not reset or not reset.resets_total:
        return []
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(reset.last_reset_unix or 0))
    text = f"  reset  {reset.resets_total} since start, last {when} ({reset.last_source or '?'}): " \
           f"{reset.last_summary or NA}"
    if reset.dump_path:
        text += f"; dump {reset.dump_path}"
    lines = [paint(text, YELLOW)]
    pids = ", ".join(str(p) for p in reset.stuck_pids)
    if reset.stuck_past_deadline:  # the recovery failed: a process in D past resets.recovery.STUCK_REPORT_S
        lines.append("  " + paint(f"RECOVERY FAILED: held by pid {pids} in D state since its reset; the GPU is "
                                  "not used while they hold it, the host may need a reboot", RED))
    elif reset.stuck_pids:  # every recovery has processes in D for a few seconds
        lines.append("  " + paint(f"recovering: waiting for pid {pids} to let go of it (D state)", YELLOW))
    elif reset.recovering:
        lines.append("  " + paint("recovering: not answering since its reset", YELLOW))
    return lines


def _unmanaged_lines(gpu: PublishedGpu, paint: Paint) -> list[str]:
    """Processes not run under gpuwatch the daemon holds SIGSTOPped past crit ([unmanaged] on_hot = "stop")."""
    unmanaged = gpu.unmanaged  # absent in an older daemon's document
    held = unmanaged.stopped_pids if unmanaged else ()
    if not unmanaged or not held:
        return []
    noun = "process" if len(held) == 1 else "processes"
    pids = ", ".join(str(p) for p in held[:8]) + (", ..." if len(held) > 8 else "")
    return ["  " + paint(f"stopped {len(held)} {noun} not run under gpuwatch (past crit)", RED)
            + f": pid {pids}; {unmanaged.reason or NA}"]


def _memory_line(gpu: PublishedGpu) -> str:
    text = f"  vram   {size(gpu.vram_used_bytes)} / {size(gpu.vram_total_bytes)}"
    reserved = gpu.vram_reserved_bytes
    if reserved is not None:  # NVML: the driver's own share, which nvidia-smi also shows apart from used
        return f"{text}   reserved by the driver {size(reserved)}"
    return f"{text}   gtt {size(gpu.gtt_used_bytes)} / {size(gpu.gtt_total_bytes)}"


def _fan_line(gpu: PublishedGpu) -> str:
    if gpu.backend == "nvml":
        # NVML gives a duty percent only, and gpuwatch never drives NVIDIA fans.
        duty = gpu.fan_duty_ratio
        return (f"  fan    {'none (passive board)' if duty is None else 'duty ' + pct(duty)}"
                "  control: unsupported (monitor only)")
    enable = gpu.pwm_enable
    mode = NA if enable is None else PWM_MODES.get(enable, NA)
    source = dict(gpu.sources).get("fan_rpm")
    rpm = num(gpu.fan_rpm, "RPM") + (f" ({source})" if source else "")
    return f"  fan    {rpm}  pwm {pct(gpu.pwm_ratio)}  mode {mode}"


def _temp(label: str, t: PublishedTemp, over: bool, paint: Paint) -> str:
    """``junction 101°C OVER LIMIT`` (red) when the document lists the sensor in over_limit (the one
    "at or above the pause limit" rule, limits.over_limit), yellow within 10 °C of the limit, green below."""
    value, limit = t.temp_c, t.limit_c
    text = f"{label} {num(value, '°C', 0)}"
    if over:
        return paint(f"{text} OVER LIMIT", RED)
    if value is not None and limit is not None:
        if value >= limit - WARN_BELOW_LIMIT_C:
            return paint(text, YELLOW)
        return paint(text, GREEN)
    return text


def _limits(temperatures: dict[str, PublishedTemp]) -> list[str]:
    """The lines the temperatures are judged against: each sensor's pause limit, then the card's own crit of each
    sensor, named (``crit   edge 100°C  junction 110°C  mem 105°C``; a sensor without a crit is left out, never a
    bare ``-`` whose sensor the reader has to guess)."""
    limits = "  ".join(f"{label} {t.limit_c:.0f}°C"
                       for label, t in temperatures.items() if t.limit_c is not None)
    crits = "  ".join(f"{label} {crit:.0f}°C"
                      for label, t in temperatures.items() if (crit := t.crit_c) is not None)
    if not limits and not crits:
        return []
    return [f"  limit  pause at {limits}" if limits else "  limit  no pause limit",
            *([f"  crit   {crits}"] if crits else [])]


def _controller(fan: FanState, paint: Paint) -> str:
    mode = state_text(fan.mode)
    backend: str | None = fan.backend
    mode_text = paint(mode, RED if mode in ("failsafe", "uncontrolled")
                      else YELLOW if mode in ("monitor-only", "dry-run") else GREEN)
    parts = [f"{mode_text} via {backend or NA}"]
    if fan.sensor:
        parts.append(f"on {fan.sensor} {num(fan.sensor_temp_c, '°C', 0)}")
    parts.append(f"target {pct(fan.target_ratio)}")
    if fan.stalled:
        parts.append(paint("FAN STALLED", RED))
    if fan.message:
        parts.append(f"({fan.message})")
    return "  ".join(parts)


def _power_line(gpu: PublishedGpu, paint: Paint) -> str:
    """Power, the cap, the clocks and the energy. While the governor acts on the cap, the memory clock (which
    the cap leaves alone: it is still in --json and /metrics) makes room for its part, so the line keeps
    within 80 columns: ``power  131 W / cap 131/150 W, governed   sclk 1690 MHz  energy 0.012 kWh``."""
    power: PowerState | None = gpu.power_governor
    mode = power.mode if power else None
    sclk = f"   sclk {num(mhz(gpu.sclk_hz), 'MHz')}"
    if power is None or mode not in ("governing", "floor", "dry-run"):
        cap = num(gpu.power_cap_w, "W") + sclk + f"  mclk {num(mhz(gpu.mclk_hz), 'MHz')}"
    elif mode == "dry-run":
        cap = f"{num(power.cap_w, 'W')}, would set {num(power.target_cap_w, 'W')}" + sclk
    else:
        held = power.cap_w
        cap = (f"{NA if held is None else f'{held:.0f}'}/{num(power.original_cap_w, 'W')}, "
               + (paint("at floor", RED) if mode == "floor" else paint("governed", YELLOW)) + sclk)
    return f"  power  {num(gpu.power_w, 'W')} / cap {cap}" + energy(gpu.energy_joules)
