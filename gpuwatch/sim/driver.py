"""amdgpu's driver for one simulated card: its state, the fan and cap writes as the kernel keeps them, its sensors."""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from gpuwatch.fan.curve import interpolate
from gpuwatch.sim import navi10
from gpuwatch.sim.kernel import SCLK, KernelSysfs
from gpuwatch.sim.physics import ThermalParams, ThermalState, running_clock_mhz, speed_ratio
from gpuwatch.sim.profiles import PROFILES, CardProfile

# Firmware auto curve (junction °C, duty): the stock Navi 10 behaviour people complain about,
# ~33 % until it is already hot.
FIRMWARE_CURVE: tuple[tuple[float, float], ...] = ((50.0, 0.25), (55.0, 0.33), (92.0, 0.33), (110.0, 1.0))
UNREADABLE = "\x7f\x7f\xff"  # what a garbage or refused sensor read gives: not a number


@dataclass
class SimCard:
    """One simulated card: where it lives in the tree and its thermal state."""

    index: int
    gpu_id: str
    card: str
    device_dir: str
    hwmon_dir: str
    state: ThermalState
    load_ratio: float
    duty_ratio: float = 0.33
    power_cap_uw: int = navi10.POWER_CAP_UW
    gone: bool = False
    next_reset_s: float | None = None
    gpu_resets_at_s: list[float] = field(default_factory=list)
    profile: CardProfile = PROFILES["rx5600xt"]
    clock_ratio: float = 1.0  # the shader clock's ceiling in force, share of the card's maximum


def fan_duty(root: Path, card: SimCard, stuck_ratio: float | None) -> float:
    """The duty the fan runs at, from ``pwm1_enable`` (SYSFS_FACTS.md §4.4) and ``pwm1``; ``stuck_ratio``: a fan
    that ignores them all (the files still read as the driver keeps them)."""
    hw = root / card.hwmon_dir
    mode = read_int(hw / "pwm1_enable")
    if mode == 1:
        pwm = read_int(hw / "pwm1")
        duty = card.duty_ratio if pwm is None else min(1.0, max(0.0, pwm / navi10.PWM_MAX))
    elif mode == 0:
        duty = 1.0  # no control = full speed on SMU11 (K-FANNONE)
    else:
        duty = interpolate(FIRMWARE_CURVE, card.state.junction_c)
    if mode != 1:
        # In auto/none mode the driver reports the firmware's duty, not what was written.
        write(hw / "pwm1", str(round(duty * navi10.PWM_MAX)))
    write(hw / "fan1_enable", "0" if mode not in (0, 1) else "1")
    if stuck_ratio is not None:
        return stuck_ratio
    return duty


def power_cap_w(root: Path, card: SimCard, readonly: bool) -> float:
    """power1_cap as the kernel keeps it: a valid write (within cap_min..cap_max) truncated to whole
    watts, anything else (or any write, when ``readonly``) reverted to the last valid one."""
    path = root / card.hwmon_dir / "power1_cap"
    written = read_int(path)
    low, high = card.profile.cap_min_uw, card.profile.cap_max_uw
    if written is not None and low <= written <= high and not readonly:
        card.power_cap_uw = written // 1_000_000 * 1_000_000
    if written != card.power_cap_uw:
        write(path, str(card.power_cap_uw))
    return card.power_cap_uw / 1e6


def clock_ratio(kernel: KernelSysfs, card: SimCard) -> float:
    """The shader clock's ceiling in force as the SMU keeps it, share of the card's maximum: the committed
    overdrive maximum, or, while the performance level is manual, the highest level of the mask."""
    if not card.profile.clock_files:
        return 1.0
    top = card.profile.sclk_max_mhz
    ceiling = kernel.od_max_mhz(card.device_dir) or top
    mask = kernel.masks.get(card.device_dir)
    if mask:
        levels = [int(m) for m in re.findall(r"^\d+: (\d+)Mhz", kernel.read(f"{card.device_dir}/{SCLK}") or "",
                                              re.MULTILINE)]
        chosen = [levels[index] for index in mask if index < len(levels)]
        ceiling = min(ceiling, max(chosen)) if chosen else ceiling
    return min(1.0, max(0.0, ceiling / top))


def write_outputs(root: Path, card: SimCard, params: ThermalParams, *, noise_c: Callable[[], float], garbage: bool,
                  resetting: bool, fan1_input: bool, sim_time_s: float) -> None:
    """Every file the driver reports from the card's state: temperatures (``noise_c`` added to each, in the
    order edge, junction, mem), power, fan speed, busy, VRAM, clock, voltage and the gpu_metrics table.
    ``garbage``: the temperatures unreadable; ``resetting``: busy and gpu_metrics too (amdgpu_pm refuses
    the reads with -EPERM while the GPU resets)."""
    hw = root / card.hwmon_dir
    dev = root / card.device_dir
    s = card.state
    for label, temp_c in (("edge", s.edge_c), ("junction", s.junction_c), ("mem", s.mem_c)):
        noisy_c = temp_c + noise_c()
        write(hw / f"temp{navi10.TEMP_INDEX[label]}_input", UNREADABLE if garbage else str(round(noisy_c) * 1000))
    power_uw = str(round(s.power_w * 1e6))
    write(hw / "power1_average", power_uw)
    write(hw / "power1_input", power_uw)
    if fan1_input:
        write(hw / "fan1_input", str(round(s.fan_rpm)))
        write(hw / "fan1_target", str(round(s.fan_rpm)))
    # A capped card is still 100 % busy, only slower: busy follows the load, the clock the power (a power-limited
    # card runs below its maximum, and under a ceiling at most at the ceiling: physics.running_clock_mhz).
    busy = min(1.0, max(0.0, card.load_ratio))
    cap_w = card.power_cap_uw / 1e6
    speed = speed_ratio(params, card.load_ratio, cap_w, card.clock_ratio)
    write(dev / "gpu_busy_percent", UNREADABLE if resetting else str(round(busy * 100)))
    write(dev / "mem_busy_percent", str(round(busy * 60)))
    vram_used = 300 * 1024**2 + card.load_ratio * 4 * 1024**3
    write(dev / "mem_info_vram_used", str(int(vram_used)))
    sclk_mhz = running_clock_mhz(params, busy, cap_w, card.clock_ratio, card.profile.sclk_max_mhz, navi10.SCLK_IDLE_MHZ)
    vddgfx_mv = 775 + busy * speed * 300
    write(hw / "freq1_input", str(round(sclk_mhz * 1e6)))
    write(hw / "in0_input", str(round(vddgfx_mv)))
    (dev / "gpu_metrics").write_bytes(b"\xff\xff" if resetting else navi10.gpu_metrics(
        s.edge_c, s.junction_c, s.mem_c, s.power_w, busy, sclk_mhz, vddgfx_mv, s.fan_rpm, round(sim_time_s * 1e9)))


def remove(root: Path, card: SimCard) -> None:
    """The card falls off the bus: its device directory and class links vanish."""
    card.gone = True
    shutil.rmtree(root / card.device_dir, ignore_errors=True)
    for link in (f"class/drm/{card.card}", f"class/hwmon/{Path(card.hwmon_dir).name}"):
        (root / link).unlink(missing_ok=True)


def read_int(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def write(path: Path, value: str) -> None:
    # Values end with a newline, as sysfs attributes do.
    path.write_text(value + "\n")
