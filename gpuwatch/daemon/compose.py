"""Composition root: config -> the parts the daemon runs. It names the concrete classes (sense.py those it reads).

``build`` makes the GPU sources (amdgpu, NVML), the fan controller (it drives the cards the amdgpu
source reads, through ``locate``), the power-cap governor (the same way, plus NVML's limit), the process
monitor and reset watch (sense.py, with the sources), the training supervisor and, for ``--simulate``, the simulated
cards: their trees are laid out first and become the sysfs and proc roots, read exactly like a real
card's; the simulator's uevents stand in for the kernel's, and it steps right before each sample and
follows the published trainer phases. The loop (loop.py) sees only the Parts and their Protocols. The
CLI reads the GPUs itself through sense.py.

Every actuator (gpuwatch.actuation) is registered in ``actuator_kinds``: the controllers give their own
records back at shutdown through the same kinds, and ``restore_all`` (`gpuwatch restore`, systemd's
ExecStopPost) gives back every record any of them left, and continues the processes not run under gpuwatch a
killed daemon left SIGSTOPped (``[unmanaged] on_hot = "stop"``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from gpuwatch.actuation.actuator import Actuator, ActuatorKind, Handback
from gpuwatch.clock import restore as clock_restore
from gpuwatch.config.file import Config
from gpuwatch.daemon.control import Handler
from gpuwatch.daemon.lock import lock_cards
from gpuwatch.daemon.sense import GpuUseWatch, amdgpu_source, build_gpu_use, build_sources
from gpuwatch.fan import restore as fan_restore
from gpuwatch.gpus.amdgpu_source import AmdgpuSource
from gpuwatch.gpus.nvml import NvmlSource
from gpuwatch.gpus.source import GpuSource
from gpuwatch.model import (
    Acted,
    ClockState,
    FanState,
    PowerState,
    PublishedState,
    Snapshot,
    TrainerState,
    UnmanagedState,
)
from gpuwatch.power import restore as power_restore
from gpuwatch.procfs import Procfs
from gpuwatch.sim.cards import SimulatedGpus
from gpuwatch.sim.kernel import KernelSysfs
from gpuwatch.sim.profiles import PROFILES
from gpuwatch.sim.start import SimulatedSource, start_simulator
from gpuwatch.supervise.unmanaged_stops import UnmanagedProcesses, resume_recorded
from gpuwatch.sysfs import Sysfs

log = logging.getLogger("gpuwatch")


# Every part's tick takes the live configuration: a reload swaps the loop's one Config, and each part
# reads what it uses from the tick's, so no part keeps a copy that a reload must remember to update.


class FanConsumer(Protocol):
    def tick(self, snapshot: Snapshot, config: Config) -> tuple[FanState, ...]: ...
    def restore(self) -> None: ...


class PowerConsumer(Protocol):
    def tick(self, snapshot: Snapshot, below: Acted, config: Config) -> tuple[PowerState, ...]: ...
    def restore(self) -> None: ...


class ClockConsumer(Protocol):
    def tick(self, snapshot: Snapshot, below: Acted, config: Config) -> tuple[ClockState, ...]: ...
    def restore(self) -> None: ...


class TrainerConsumer(Protocol):
    def start(self) -> None: ...  # once, on the daemon's main thread, before the first tick
    def tick(self, snapshot: Snapshot, below: Acted, config: Config) -> tuple[TrainerState, ...]: ...
    def command(self, verb: str, name: str | None) -> tuple[bool, str]: ...  # the control socket's commands
    def trees(self) -> dict[str, list[int]]: ...  # each trainer's process tree (the process scan's input)
    def stop(self) -> None: ...


class UnmanagedConsumer(Protocol):  # GPU processes not run under gpuwatch: SIGSTOP past crit, SIGCONT when cool
    def tick(self, snapshot: Snapshot, below: Acted, config: Config) -> tuple[UnmanagedState, ...]: ...
    def stop(self) -> None: ...  # every process it stopped continued


@dataclass
class Parts:
    """What the composition root built; tests may pass their own."""

    sources: list[GpuSource]
    fans: FanConsumer | None = None
    power: PowerConsumer | None = None
    trainers: TrainerConsumer | None = None
    on_tick: list[Callable[[PublishedState], None]] = field(default_factory=list)
    simulator: SimulatedGpus | None = None  # the simulated cards, when simulating (tests step its clock)
    gpu_use: GpuUseWatch | None = None  # processes per GPU and resets, added to each tick's snapshot
    control: Handler | None = None  # the control socket's commands (default: the supervisor's)
    unmanaged: UnmanagedConsumer | None = None  # [unmanaged]: processes not run under gpuwatch, past crit
    clock: ClockConsumer | None = None  # the clock ceiling, the rung between the cap's floor and the pause


def build(config: Config) -> tuple[Config, Parts]:
    """Every part ``config`` asks for, and the config to run with (simulating: the simulator's tree is
    the sysfs root and amdgpu the only source, so its cards are read like real ones, and only them)."""
    simulator = None
    if config.simulating:
        # The tree must exist before any part probes it.
        simulator = start_simulator(config)
    config = config.with_effective_sysfs()
    # One daemon per card across runtime directories, before any part probes (or records) a card.
    lock_cards(Sysfs(config.sysfs_root))
    if simulator is not None:
        log.info("simulating %d %s card(s) in %s (time x%g)", config.simulate.gpus,
                 PROFILES[config.simulate.card].name, simulator.root, config.simulate.time_scale)
    amdgpu = amdgpu_source(config)
    sources = build_sources(config, amdgpu=amdgpu)
    parts = Parts(sources=sources, fans=build_fans(config, amdgpu), trainers=build_supervisor(config),
                  gpu_use=build_gpu_use(config, simulator.take_uevents if simulator is not None else None,
                                        amdgpu.rediscover if amdgpu is not None else None),
                  power=build_power(config, amdgpu, sources, simulator),
                  unmanaged=UnmanagedProcesses(Procfs(config.proc_root), config.resolved_runtime_dir),
                  clock=build_clock(config, amdgpu, sources, simulator))
    if simulator is not None:
        parts.sources = [SimulatedSource(simulator, source) for source in parts.sources]
        parts.on_tick.append(simulator.observe)
        parts.simulator = simulator
        parts.control = simulator_control(simulator, parts.trainers)
    return config, parts


def simulator_control(simulator: SimulatedGpus, trainers: TrainerConsumer | None) -> Handler:
    """`gpuwatch simulate-reset [GPU]` for the simulator; every other command for the supervisor."""
    def handle(verb: str, name: str | None) -> tuple[bool, str]:
        if verb == "simulate-reset":
            return simulator.request_reset(name)
        return trainers.command(verb, name) if trainers is not None else (False, "no [[trainer]] is configured")

    return handle


def build_fans(config: Config, amdgpu: AmdgpuSource | None) -> FanConsumer | None:
    """The fan controller; it drives the amdgpu cards ``amdgpu`` reads (none without it), and is
    rebound with them when one comes back at a new place."""
    if config.fan.mode == "off":
        return None
    from gpuwatch.fan.controller import FanController

    fans = FanController(Sysfs(config.sysfs_root), config.resolved_runtime_dir,
                         locate=amdgpu.locate if amdgpu is not None else _nowhere, deadline_s=config.sysfs_deadline_s)
    if amdgpu is not None:
        # The one rebind point: every part that keeps a GPU's paths subscribes here (gpus/binding.py).
        amdgpu.bindings.subscribe(fans.rebind)
    return fans


def _nowhere(gpu_id: str) -> None:
    return None


def build_power(config: Config, amdgpu: AmdgpuSource | None, sources: list[GpuSource],
                simulator: SimulatedGpus | None = None) -> PowerConsumer:
    """The power-cap governor for every GPU the sources read (amdgpu through ``locate``, NVIDIA through the
    NVML source's module). Built with ``power.mode = "off"`` too: it publishes that, and gives back a cap
    a killed daemon left lowered. Simulating, its clock is the simulated one: the law's time constants
    belong to the card's thermal physics, which the simulator may run faster than the wall clock."""
    from gpuwatch.power.controller import PowerController

    nvml = next((source.nvml for source in sources if isinstance(source, NvmlSource)), None)
    clock = (lambda: simulator.sim_time_s) if simulator is not None else time.monotonic
    return PowerController(Sysfs(config.sysfs_root), config.resolved_runtime_dir,
                           locate=amdgpu.locate if amdgpu is not None else _nowhere, nvml=nvml, clock=clock,
                           deadline_s=config.sysfs_deadline_s)


def build_clock(config: Config, amdgpu: AmdgpuSource | None, sources: list[GpuSource],
                simulator: SimulatedGpus | None = None) -> ClockConsumer:
    """The clock-ceiling rung for every GPU the sources read, built like the governor (``power.clock = "off"``
    too: it publishes that, and gives back a ceiling a killed daemon left); simulating, on the simulated clock."""
    from gpuwatch.clock.controller import ClockController

    nvml = next((source.nvml for source in sources if isinstance(source, NvmlSource)), None)
    clock = (lambda: simulator.sim_time_s) if simulator is not None else time.monotonic
    # Simulating, the clock files are written through the simulated kernel (sim/kernel.py: the OD edit and
    # commit, the mask), which a plain file cannot play.
    sysfs = simulator.kernel if simulator is not None else Sysfs(config.sysfs_root)
    return ClockController(sysfs, config.resolved_runtime_dir,
                           locate=amdgpu.locate if amdgpu is not None else _nowhere, nvml=nvml, clock=clock,
                           deadline_s=config.sysfs_deadline_s)


def build_supervisor(config: Config) -> TrainerConsumer:
    """The training supervisor for the configured `[[trainer]]`s; built with none too, so that a reload
    adding the first `[[trainer]]` starts it (reload.LIVE_KEYS) and a start finds an earlier daemon's
    leftover runs even when the new file declares no trainer."""
    from gpuwatch.supervise.supervisor import Supervisor

    return Supervisor(list(config.trainer), config.resolved_runtime_dir / "trainers")


def actuator_kinds(config: Config) -> tuple[ActuatorKind[Any], ...]:
    """Every actuator gpuwatch drives, as `gpuwatch restore` knows it: adding an actuator is one line here
    (and its module: its records, ``kind`` and the controller that holds an Actuator of it)."""
    sysfs = Sysfs(config.sysfs_root)
    # A simulated tree's clock files are played by the simulated kernel (the OD edit and commit).
    clock_sysfs = KernelSysfs(config.sysfs_root) if config.simulating else sysfs
    return (
        fan_restore.kind(sysfs),
        power_restore.kind(sysfs, _load_nvml),
        clock_restore.kind(clock_sysfs, _load_nvml),
    )


def restore_all(config: Config) -> Handback:
    """Every record any actuator left in ``config``'s runtime directory given back (`gpuwatch restore`,
    systemd's ExecStopPost, so after a SIGKILL or a watchdog kill too): each GPU on its own worker
    within ``sysfs_deadline_s``, in the order of ``actuator_kinds`` (fans, caps, clocks, as at shutdown)."""
    result = Handback()
    for kind in actuator_kinds(config):
        part = Actuator(kind, config.resolved_runtime_dir, config.sysfs_deadline_s).restore_all(without_records=True)
        result.done += part.done
        result.problems += part.problems
    # Processes not run under gpuwatch that a killed daemon left SIGSTOPped (supervise/unmanaged_stops.py).
    done, problems = resume_recorded(Procfs(config.proc_root), config.resolved_runtime_dir)
    result.done += done
    result.problems += problems
    return result


def _load_nvml() -> object:
    """NVML for a record of an NVIDIA limit (raises when there is none: that record is then a problem)."""
    return NvmlSource().nvml
