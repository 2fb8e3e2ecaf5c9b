"""Simulated amdgpu cards: a fake sysfs tree that heats, cools and obeys the fan like a real Navi 10.

``SimulatedGpus`` lays out N RX 5600 XT cards (gpuwatch/sim/navi10.py) with the kernel's topology
(gpuwatch/sim/tree.py) and, on every ``advance``, plays the kernel and the card: it reads what was
written to ``pwm1``/``pwm1_enable`` and ``power1_cap`` as the driver would (driver.py), applies the
configured faults (faults.py), steps the thermal model (gpuwatch/sim/physics.py) with that cap and
rewrites the sensor files. The daemon reads and writes the tree through the same AmdgpuSource and fan
code as a real card; ``SimulatedSource`` (start.py) only advances the model right before each sample.

The workload's heat comes from whether the supervised trainer is really running: ``observe`` takes
each published state (a daemon ``on_tick`` hook): a trainer RUNNING (or still PAUSING) on a GPU means
full load there, anything else idle. A simulator that supervises nothing (no trainer configured, no run
attached yet) runs at ``load_without_trainer`` (full load by default, so the fan curve still has something to
do in a demo without training); once a run has been listed, a card no run loads idles, also after the last
ended run is dropped: idle between attached runs means idle, not a card heating to crit with nothing running.
The trainers' processes also show in a fake /proc beside the tree (clients.py), and ``inject_reset`` resets a card
(resets.py): a devcoredump, a few seconds without answers, its processes hung.
"""

from __future__ import annotations

import logging
import queue
import random
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from gpuwatch.model import PublishedState, TrainerPhase, TrainerState
from gpuwatch.sim import navi10
from gpuwatch.sim.clients import SimulatedClients
from gpuwatch.sim.driver import SimCard, clock_ratio, fan_duty, power_cap_w, write_outputs
from gpuwatch.sim.faults import SimFaults, apply_faults, arm, schedule
from gpuwatch.sim.kernel import Board, KernelSysfs
from gpuwatch.sim.physics import ThermalInputs, ThermalParams, idle_state, step
from gpuwatch.sim.profiles import PROFILES
from gpuwatch.sim.resets import SimulatedResets
from gpuwatch.sim.tree import FakeSysfsTree

log = logging.getLogger("gpuwatch.simulator")

MARKER = ".gpuwatch-simulator"
MAX_STEP_S = 0.5
GPU_OPEN_AFTER_S = 0.5
_LOADED_PHASES = {TrainerPhase.RUNNING, TrainerPhase.PAUSING}


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
    runs_seen: bool = False  # a trainer or an attached run has been listed: load_without_trainer no longer applies
    card: str = "rx5600xt"  # the profile (sim/profiles.py): the RX 5600 XT or the Navi 31-like card
    board: Board = field(default_factory=Board)  # what its OD firmware does unprinted (sim/kernel.py)

    def __post_init__(self) -> None:
        self.root = Path(self.root)
        self.proc_root = Path(self.proc_root or self.root.with_name(self.root.name + "-proc"))
        _prepare_dir(self.root)
        _prepare_dir(self.proc_root)
        tree = FakeSysfsTree(self.root)
        profile = PROFILES[self.card]
        # The kernel's side of the clock files (sim/kernel.py): the clock rung writes through it.
        self.kernel = KernelSysfs(self.root)
        for index in range(self.count):
            slot = f"0000:{0x28 + index * 3:02x}:00.0"
            placed = tree.add_card(profile.files(self.fan1_input), card=f"card{index}", pci_slot=slot,
                                   hwmon=f"hwmon{index + 1}", source_hwmon=navi10.HWMON)
            assert placed.hwmon_dir is not None
            next_reset_s, gpu_resets_at_s = schedule(self.faults, index)
            self.cards.append(SimCard(
                index=index, gpu_id=slot, card=placed.card, device_dir=placed.device_dir,
                hwmon_dir=placed.hwmon_dir, state=idle_state(self.params), load_ratio=self.load_without_trainer,
                next_reset_s=next_reset_s, gpu_resets_at_s=gpu_resets_at_s, profile=profile,
                power_cap_uw=profile.cap_uw,
            ))
            if profile.clock_files:
                self.kernel.board(placed.device_dir, self.board)
        self._random = random.Random(self.seed)
        self._requested: queue.SimpleQueue[str | None] = queue.SimpleQueue()
        self._last_clock = self.clock()
        slots = [card.gpu_id for card in self.cards]
        self.clients = SimulatedClients(self.proc_root, self.root, slots, self.clock)
        self.resets = SimulatedResets(self.root, [c.device_dir for c in self.cards], [c.card for c in self.cards])
        if self.desktop_client:
            self.clients.desktop(0)
        for card in self.cards:
            arm(self.root, card, self.faults)
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
            if card.gone or not apply_faults(self.root, card, self.faults, self.sim_time_s, self.inject_reset):
                continue
            card.duty_ratio = fan_duty(self.root, card, self.faults.stuck_ratio(card.index))
            card.clock_ratio = clock_ratio(self.kernel, card)
            inputs = ThermalInputs(fan_duty_ratio=card.duty_ratio, load_ratio=card.load_ratio,
                                   power_cap_w=power_cap_w(self.root, card, self.faults.cap_readonly(card.index)),
                                   clock_ratio=card.clock_ratio)
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

    # -- GPU resets ----------------------------------------------------------------------------

    def inject_reset(self, gpu_id: str | None = None) -> list[str]:
        """Reset a card (the first by default) as amdgpu's recovery would; the devcoredumps' names."""
        made = []
        for card in [c for c in self.cards if c.gpu_id == gpu_id or (gpu_id is None and c.index == 0)]:
            pid, task = self.clients.guilty(card.index)
            made.append(self.resets.inject(card.index, self.sim_time_s, self.faults.gpu_reset_outage_s, pid, task))
            self.kernel.reset(card.device_dir)  # the firmware's clock table and DPM back, as a real reset
            stuck, outage = self.faults.gpu_reset_stuck_s, self.faults.gpu_reset_outage_s
            self.clients.hang(card.index, None if stuck is None else self.sim_time_s + stuck, self.sim_time_s + outage)
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

    # -- following the trainers ----------------------------------------------------------------

    def observe(self, state: PublishedState) -> None:
        """Daemon on_tick hook: the next step's load follows what the supervisor says is running."""
        running: list[tuple[int, int, float]] = []
        self.runs_seen = self.runs_seen or bool(state.trainers)
        for card in self.cards:
            loaded, pids = _trainers_on(card, state.trainers, time.time())
            running += [(pid, card.index, 1.0 if loaded else 0.0) for pid in pids]
            card.load_ratio = 1.0 if loaded else 0.0 if self.runs_seen else self.load_without_trainer
        self.clients.follow(running)

    def _write_outputs(self, card: SimCard) -> None:
        # During a reset the driver refuses the reads (amdgpu_pm: -EPERM while in reset): unreadable here.
        resetting = not self.resets.answering(card.index, self.sim_time_s)
        write_outputs(self.root, card, self.params,
                      noise_c=lambda: self._random.uniform(-self.sensor_noise_c, self.sensor_noise_c),
                      garbage=self.faults.garbage(card.index) or resetting, resetting=resetting,
                      fan1_input=self.fan1_input, sim_time_s=self.sim_time_s)


def _trainers_on(card: SimCard, trainers: Sequence[TrainerState], now_unix: float) -> tuple[bool, list[int]]:
    """Whether a trainer on ``card`` loads it (RUNNING or PAUSING), and the pids of those that have opened it."""
    on_card = [t for t in trainers if _uses(t, card)]
    loaded = any(t.phase in _LOADED_PHASES for t in on_card)
    # A trainer opens the GPU a moment after it starts (imports, init): one that dies at once never does.
    pids = [t.pid for t in on_card if t.pid is not None
            and t.started_unix is not None and now_unix - t.started_unix >= GPU_OPEN_AFTER_S]
    return loaded, pids


def _uses(trainer: TrainerState, card: SimCard) -> bool:
    """A trainer names its GPUs by slot, card or index; one that names none uses every card."""
    names = trainer.gpus
    return not names or card.gpu_id in names or card.card in names or str(card.index) in names


def _prepare_dir(root: Path) -> None:
    """Start from an empty tree; only ever delete a directory this simulator created."""
    if root.exists() and any(root.iterdir()):
        if not (root / MARKER).exists():
            raise ValueError(f"{root} is not empty and was not made by the simulator; refusing to use it")
        shutil.rmtree(root)
    root.mkdir(parents=True, exist_ok=True)
    (root / MARKER).write_text("a simulated sysfs tree made by `gpuwatch run --simulate`; safe to delete\n")
