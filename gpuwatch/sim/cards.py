"""Simulated amdgpu cards: a fake sysfs tree that heats, cools and obeys the fan like a real Navi 10.

``SimulatedGpus`` lays out N RX 5600 XT cards (gpuwatch/sim/navi10.py) with the kernel's topology
(gpuwatch/sim/tree.py) and, on every ``advance``, plays the kernel and the card: it reads what was
written to ``pwm1``/``pwm1_enable`` (SYSFS_FACTS.md §4.4: 1 manual, 2 auto = the firmware's own modest
curve, 0 = no control = full speed on SMU11) and to ``power1_cap`` (microwatts, truncated to whole
watts, out of range or garbage reverted: what a read after a refused write shows), applies the
configured faults, steps the thermal model (gpuwatch/sim/physics.py) with that cap and rewrites
temp*_input, power1_*, fan1_input, gpu_busy_percent, the clock the cap leaves...
The daemon reads and writes the tree through the same AmdgpuSource and fan code as a real card;
``SimulatedSource`` (start.py) only advances the model right before each sample.

The workload's heat comes from whether the supervised trainer is really running: ``observe`` takes
each published state (a daemon ``on_tick`` hook): a trainer RUNNING (or still PAUSING) on a GPU means
full load there, anything else idle. With no trainer at all, ``load_without_trainer`` applies (full
load by default, so the fan curve still has something to do in a demo without training). The trainers'
processes also show in a fake /proc beside the tree (clients.py), and ``inject_reset`` resets a card
(resets.py): a devcoredump, a few seconds without answers, its processes hung.
"""

from __future__ import annotations

import logging
import queue
import random
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from gpuwatch.fan.curve import interpolate
from gpuwatch.model import PublishedState, TrainerPhase
from gpuwatch.sim import navi10
from gpuwatch.sim.clients import SimulatedClients
from gpuwatch.sim.physics import ThermalInputs, ThermalParams, ThermalState, idle_state, speed_ratio, step
from gpuwatch.sim.resets import SimulatedResets
from gpuwatch.sim.tree import FakeSysfsTree

log = logging.getLogger("gpuwatch.simulator")

MARKER = ".gpuwatch-simulator"
MAX_STEP_S = 0.5
GPU_OPEN_AFTER_S = 0.5
_LOADED_PHASES = {TrainerPhase.RUNNING, TrainerPhase.PAUSING}
# Firmware auto curve (junction °C, duty): the stock Navi 10 behaviour people complain about,
# ~33 % until it is already hot.
FIRMWARE_CURVE: tuple[tuple[float, float], ...] = ((50.0, 0.25), (55.0, 0.33), (92.0, 0.33), (110.0, 1.0))


@dataclass(frozen=True)
class SimFaults:
    """Hardware misbehaviour to inject; times are simulated seconds since start."""

    fan_stuck_ratio: float | None = None
    sensor_garbage: bool = False
    firmware_reset_every_s: float | None = None
    disappear_after_s: float | None = None
    gpu_reset_at_s: tuple[float, ...] = ()
    gpu_reset_outage_s: float = 5.0
    gpu_reset_stuck_s: float | None = None
    power_cap_readonly: bool = False  # power1_cap 0444 and every write reverted (a firmware ignoring it)
    cards: tuple[int, ...] = ()  # card indexes the faults hit; empty: every card

    def hits(self, index: int) -> bool:
        return not self.cards or index in self.cards


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


@dataclass
class SimulatedGpus:
    """N simulated cards below ``root``; call ``advance`` (real clock, scaled) or ``advance_by``."""

    root: Path
    count: int = 1
    params: ThermalParams = field(default_factory=ThermalParams)
    faults: SimFaults = field(default_factory=SimFaults)
    time_scale: float = 1.0
    load_without_trainer: float = 1.0
    clock: Callable[[], float] = time.monotonic
    # Real sensors flicker: SMU11 reports whole degrees, and a reading a bit noisy around the model's
    # value keeps a settled card from looking like a frozen sensor (the fan's frozen-temp failsafe).
    sensor_noise_c: float = 0.6
    seed: int = 7
    fan1_input: bool = True  # False: the RPM is in gpu_metrics only (navi10.card_files)
    desktop_client: bool = False
    proc_root: Path | None = None  # the fake /proc; default: beside the tree, "<root>-proc"
    cards: list[SimCard] = field(default_factory=list)
    sim_time_s: float = 0.0

    def __post_init__(self) -> None:
        self.root = Path(self.root)
        self.proc_root = Path(self.proc_root or self.root.with_name(self.root.name + "-proc"))
        _prepare_dir(self.root)
        _prepare_dir(self.proc_root)
        tree = FakeSysfsTree(self.root)
        for index in range(self.count):
            slot = f"0000:{0x28 + index * 3:02x}:00.0"
            placed = tree.add_card(navi10.card_files(self.fan1_input), card=f"card{index}", pci_slot=slot,
                                   hwmon=f"hwmon{index + 1}", source_hwmon=navi10.HWMON)
            assert placed.hwmon_dir is not None
            self.cards.append(SimCard(
                index=index, gpu_id=slot, card=placed.card, device_dir=placed.device_dir,
                hwmon_dir=placed.hwmon_dir, state=idle_state(self.params), load_ratio=self.load_without_trainer,
                next_reset_s=self.faults.firmware_reset_every_s if self.faults.hits(index) else None,
                gpu_resets_at_s=sorted(self.faults.gpu_reset_at_s) if self.faults.hits(index) else [],
            ))
        self._random = random.Random(self.seed)
        self._requested: queue.SimpleQueue[str | None] = queue.SimpleQueue()
        self._last_clock = self.clock()
        slots = [card.gpu_id for card in self.cards]
        self.clients = SimulatedClients(self.proc_root, self.root, slots, self.clock)
        self.resets = SimulatedResets(self.root, [c.device_dir for c in self.cards], [c.card for c in self.cards])
        if self.desktop_client:
            self.clients.desktop(0)
        for card in self.cards:
            if self.faults.power_cap_readonly and self.faults.hits(card.index):
                (self.root / card.hwmon_dir / "power1_cap").chmod(0o444)
            self._write_outputs(card)

    # -- driving the model -------------------------------------------------------------------

    def advance(self) -> None:
        """Catch the model up with the (scaled) clock; called right before each daemon sample."""
        now = self.clock()
        elapsed_s, self._last_clock = max(0.0, now - self._last_clock), now
        self.advance_by(elapsed_s * self.time_scale)

    def advance_by(self, dt_s: float) -> None:
        """Step every card ``dt_s`` simulated seconds, reading the fan inputs once (as a tick would)."""
        self.sim_time_s += dt_s
        while not self._requested.empty():
            self.inject_reset(self._requested.get_nowait())
        self.resets.advance(self.sim_time_s)
        self.clients.advance(self.sim_time_s, lambda index: self.resets.answering(index, self.sim_time_s))
        for card in self.cards:
            if card.gone or not self._apply_faults(card, self.sim_time_s):
                continue
            card.duty_ratio = self._fan_duty(card)
            inputs = ThermalInputs(fan_duty_ratio=card.duty_ratio, load_ratio=card.load_ratio,
                                   power_cap_w=self._power_cap_w(card))
            remaining = dt_s
            while remaining > 1e-9:
                chunk = min(MAX_STEP_S, remaining)
                card.state = step(self.params, card.state, inputs, chunk)
                remaining -= chunk
            self._write_outputs(card)

    def set_load(self, load_ratio: float, gpu_id: str | None = None) -> None:
        for card in self.cards:
            if gpu_id is None or card.gpu_id == gpu_id:
                card.load_ratio = load_ratio

    def inject_reset(self, gpu_id: str | None = None) -> list[str]:
        """Reset a card (the first by default) as amdgpu's recovery would; the devcoredumps' names."""
        made = []
        for card in [c for c in self.cards if c.gpu_id == gpu_id or (gpu_id is None and c.index == 0)]:
            pid, task = self.clients.guilty(card.index)
            made.append(self.resets.inject(card.index, self.sim_time_s, self.faults.gpu_reset_outage_s, pid, task))
            stuck = self.faults.gpu_reset_stuck_s
            self.clients.hang(card.index, None if stuck is None else self.sim_time_s + stuck)
            log.warning("simulated GPU reset of %s (%s)", card.gpu_id, made[-1])
        return made

    def request_reset(self, gpu_id: str | None) -> tuple[bool, str]:
        """From another thread (`gpuwatch simulate-reset`): reset at the next step."""
        if gpu_id is not None and gpu_id not in [c.gpu_id for c in self.cards]:
            return False, f"no simulated GPU {gpu_id} (they are {', '.join(c.gpu_id for c in self.cards)})"
        self._requested.put(gpu_id)
        return True, f"reset of simulated GPU {gpu_id or self.cards[0].gpu_id} requested"

    def take_uevents(self) -> list[bytes]:
        """The kernel uevents of the simulated cards since the last call (the daemon's uevent feed)."""
        return self.resets.take_uevents()

    def observe(self, state: PublishedState) -> None:
        """Daemon on_tick hook: the next step's load follows what the supervisor says is running."""
        running: list[tuple[int, int, float]] = []
        for card in self.cards:
            on_card = [t for t in state.trainers if not t.gpus or card.gpu_id in t.gpus or card.card in t.gpus
                       or str(card.index) in t.gpus]
            loaded = any(t.phase in _LOADED_PHASES for t in on_card)
            # A trainer opens the GPU a moment after it starts (imports, init): one that dies at once never does.
            now_unix = time.time()
            running += [(t.pid, card.index, 1.0 if loaded else 0.0) for t in on_card if t.pid is not None
                        and t.started_unix is not None and now_unix - t.started_unix >= GPU_OPEN_AFTER_S]
            card.load_ratio = 1.0 if loaded else 0.0 if state.trainers else self.load_without_trainer
        self.clients.follow(running)

    # -- the "kernel" side ---------------------------------------------------------------------

    def _fan_duty(self, card: SimCard) -> float:
        hw = self.root / card.hwmon_dir
        mode = _read_int(hw / "pwm1_enable")
        if mode == 1:
            pwm = _read_int(hw / "pwm1")
            duty = card.duty_ratio if pwm is None else min(1.0, max(0.0, pwm / navi10.PWM_MAX))
        elif mode == 0:
            duty = 1.0  # no control = full speed on SMU11 (K-FANNONE)
        else:
            duty = interpolate(FIRMWARE_CURVE, card.state.junction_c)
        if mode != 1:
            # In auto/none mode the driver reports the firmware's duty, not what was written.
            _write(hw / "pwm1", str(round(duty * navi10.PWM_MAX)))
        _write(hw / "fan1_enable", "0" if mode not in (0, 1) else "1")
        if self.faults.fan_stuck_ratio is not None and self.faults.hits(card.index):
            return self.faults.fan_stuck_ratio
        return duty

    def _power_cap_w(self, card: SimCard) -> float:
        """power1_cap as the kernel keeps it: a valid write (within cap_min..cap_max) truncated to whole
        watts, anything else (or any write, with ``power_cap_readonly``) reverted to the last valid one."""
        path = self.root / card.hwmon_dir / "power1_cap"
        written = _read_int(path)
        readonly = self.faults.power_cap_readonly and self.faults.hits(card.index)
        if written is not None and navi10.POWER_CAP_MIN_UW <= written <= navi10.POWER_CAP_MAX_UW and not readonly:
            card.power_cap_uw = written // 1_000_000 * 1_000_000
        if written != card.power_cap_uw:
            _write(path, str(card.power_cap_uw))
        return card.power_cap_uw / 1e6

    def _apply_faults(self, card: SimCard, sim_now_s: float) -> bool:
        """Inject the configured faults; False when the card fell off the bus."""
        faults = self.faults
        if not faults.hits(card.index):
            return True
        if card.next_reset_s is not None and faults.firmware_reset_every_s and sim_now_s >= card.next_reset_s:
            # The firmware took the fan back (a GPU reset, a resume from suspend, RDNA3's snap-back).
            _write(self.root / card.hwmon_dir / "pwm1_enable", "2")
            card.next_reset_s += faults.firmware_reset_every_s
            log.info("simulated firmware reset of %s: pwm1_enable back to 2", card.gpu_id)
        while card.gpu_resets_at_s and sim_now_s >= card.gpu_resets_at_s[0]:
            card.gpu_resets_at_s.pop(0)
            self.inject_reset(card.gpu_id)
        if faults.disappear_after_s is not None and sim_now_s >= faults.disappear_after_s:
            self._remove(card)
            return False
        return True

    def _remove(self, card: SimCard) -> None:
        """The card falls off the bus: its device directory and class links vanish."""
        card.gone = True
        shutil.rmtree(self.root / card.device_dir, ignore_errors=True)
        for link in (f"class/drm/{card.card}", f"class/hwmon/{Path(card.hwmon_dir).name}"):
            (self.root / link).unlink(missing_ok=True)
        log.warning("simulated card %s fell off the bus", card.gpu_id)

    def _write_outputs(self, card: SimCard) -> None:
        hw = self.root / card.hwmon_dir
        dev = self.root / card.device_dir
        s = card.state
        # During a reset the driver refuses the reads (amdgpu_pm: -EPERM while in reset): unreadable here.
        resetting = not self.resets.answering(card.index, self.sim_time_s)
        garbage = (self.faults.sensor_garbage and self.faults.hits(card.index)) or resetting
        for label, temp_c in (("edge", s.edge_c), ("junction", s.junction_c), ("mem", s.mem_c)):
            index = navi10.TEMP_INDEX[label]
            noisy_c = temp_c + self._random.uniform(-self.sensor_noise_c, self.sensor_noise_c)
            _write(hw / f"temp{index}_input", "\x7f\x7f\xff" if garbage else str(round(noisy_c) * 1000))
        power_uw = str(round(s.power_w * 1e6))
        _write(hw / "power1_average", power_uw)
        _write(hw / "power1_input", power_uw)
        if self.fan1_input:
            _write(hw / "fan1_input", str(round(s.fan_rpm)))
            _write(hw / "fan1_target", str(round(s.fan_rpm)))
        # A capped card is still 100 % busy, only slower: busy follows the load, the clock the power.
        busy = min(1.0, max(0.0, card.load_ratio))
        speed = speed_ratio(self.params, card.load_ratio, card.power_cap_uw / 1e6)
        _write(dev / "gpu_busy_percent", "\x7f\x7f\xff" if resetting else str(round(busy * 100)))
        _write(dev / "mem_busy_percent", str(round(busy * 60)))
        vram_used = 300 * 1024**2 + card.load_ratio * 4 * 1024**3
        _write(dev / "mem_info_vram_used", str(int(vram_used)))
        sclk_mhz = navi10.SCLK_IDLE_MHZ + busy * speed * (navi10.SCLK_MAX_MHZ - navi10.SCLK_IDLE_MHZ)
        vddgfx_mv = 775 + busy * speed * 300
        _write(hw / "freq1_input", str(round(sclk_mhz * 1e6)))
        _write(hw / "in0_input", str(round(vddgfx_mv)))
        (dev / "gpu_metrics").write_bytes(b"\xff\xff" if resetting else navi10.gpu_metrics(
            s.edge_c, s.junction_c, s.mem_c, s.power_w, busy, sclk_mhz, vddgfx_mv, s.fan_rpm,
            round(self.sim_time_s * 1e9)))


def _prepare_dir(root: Path) -> None:
    """Start from an empty tree; only ever delete a directory this simulator created."""
    if root.exists() and any(root.iterdir()):
        if not (root / MARKER).exists():
            raise ValueError(f"{root} is not empty and was not made by the simulator; refusing to use it")
        shutil.rmtree(root)
    root.mkdir(parents=True, exist_ok=True)
    (root / MARKER).write_text("a simulated sysfs tree made by `gpuwatch run --simulate`; safe to delete\n")


def _read_int(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def _write(path: Path, value: str) -> None:
    # Values end with a newline, as sysfs attributes do.
    path.write_text(value + "\n")
