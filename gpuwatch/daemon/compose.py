"""Composition root: config -> the parts the daemon runs. The one module that names the concrete classes.

``build`` makes the GPU sources (amdgpu, NVML), the fan controller (it drives the cards the amdgpu
source reads, through ``locate``), the training supervisor and, for ``--simulate``, the simulated
cards: their tree is laid out first and becomes the sysfs root, read by amdgpu alone exactly like a
real card, and the simulator steps right before each sample and follows the published trainer
phases. The loop (loop.py) sees only the Parts and their Protocols. The CLI reads sysfs once for
`gpuwatch status`/`sensors` with ``build_sources``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from gpuwatch.config import Config, ConfigError
from gpuwatch.gpus.amdgpu import AmdgpuSource
from gpuwatch.gpus.amdgpuinfo import AmdgpuInfo, WithAmdgpuInfo
from gpuwatch.gpus.nvml import NvmlSource, NvmlUnavailable
from gpuwatch.gpus.source import GpuSource
from gpuwatch.model import FanState, PublishedState, Snapshot, TrainerState
from gpuwatch.sim.cards import SimulatedGpus, SimulatedSource, start_simulator
from gpuwatch.sysfs import Sysfs

log = logging.getLogger("gpuwatch")
REAL_SYSFS = Path("/sys")  # /dev/dri, what pyamdgpuinfo reads, belongs to this tree only


class FanConsumer(Protocol):
    def tick(self, snapshot: Snapshot) -> tuple[FanState, ...]: ...
    def restore(self) -> None: ...


class TrainerConsumer(Protocol):
    def tick(self, snapshot: Snapshot, fans: tuple[FanState, ...]) -> tuple[TrainerState, ...]: ...
    def stop(self) -> None: ...


@dataclass
class Parts:
    """What the composition root built; tests may pass their own."""

    sources: list[GpuSource]
    fans: FanConsumer | None = None
    trainers: TrainerConsumer | None = None
    on_tick: list[Callable[[PublishedState], None]] = field(default_factory=list)
    simulator: SimulatedGpus | None = None  # the simulated cards, when simulating (tests step its clock)


def build(config: Config) -> tuple[Config, Parts]:
    """Every part ``config`` asks for, and the config to run with (simulating: the simulator's tree is
    the sysfs root and amdgpu the only source, so its cards are read like real ones, and only them)."""
    simulator = None
    if config.simulating:
        # The tree must exist before any part probes it.
        simulator = start_simulator(config)
    config = config.with_effective_sysfs()
    if simulator is not None:
        log.info("simulating %d RX 5600 XT card(s) in %s (time x%g)", config.simulate.gpus,
                 simulator.root, config.simulate.time_scale)
    amdgpu = amdgpu_source(config)
    parts = Parts(sources=build_sources(config, amdgpu=amdgpu), fans=build_fans(config, amdgpu),
                  trainers=build_supervisor(config))
    if simulator is not None:
        parts.sources = [SimulatedSource(simulator, source) for source in parts.sources]
        parts.on_tick.append(simulator.observe)
        parts.simulator = simulator
    return config, parts


def amdgpu_source(config: Config) -> AmdgpuSource | None:
    """The amdgpu reader when ``config.backend`` asks for one (it also locates cards for the fans)."""
    return AmdgpuSource(Sysfs(config.sysfs_root)) if config.backend in ("auto", "amdgpu") else None


def with_amdgpuinfo(config: Config, amdgpu: GpuSource, module: object | None = None) -> GpuSource:
    """``amdgpu`` with pyamdgpuinfo's readings merged in when they describe the same GPUs: the real /sys
    (not a simulated or test tree); ``module`` injects a stand-in for pyamdgpuinfo (tests)."""
    if config.amdgpuinfo.mode == "off" or (module is None and config.sysfs_root != REAL_SYSFS):
        return amdgpu
    return WithAmdgpuInfo(amdgpu, AmdgpuInfo(module, polls_per_second=config.amdgpuinfo.polls_per_second))


def build_sources(config: Config, nvml: object | None = None, amdgpu: AmdgpuSource | None = None) -> list[GpuSource]:
    """The GPU sources ``config.backend`` names; ``nvml`` injects a pynvml-like module (tests), ``amdgpu``
    a reader built with ``amdgpu_source`` (shared with the fan controller).

    auto never fails: NVML that is absent or cannot initialise is logged and skipped. An explicit
    ``backend = "nvml"`` without a working NVML is a configuration error (exit 2), said plainly.
    """
    sources: list[GpuSource] = []
    amdgpu = amdgpu or amdgpu_source(config)
    if amdgpu is not None:
        sources.append(with_amdgpuinfo(config, amdgpu))
    if config.backend in ("auto", "nvml"):
        try:
            sources.append(NvmlSource(nvml))
        except NvmlUnavailable as exc:
            if config.backend == "nvml":
                raise ConfigError(f"backend = \"nvml\": {exc}") from None
            log.debug("NVIDIA backend not used: %s", exc)
    return sources


def build_fans(config: Config, amdgpu: AmdgpuSource | None) -> FanConsumer | None:
    """The fan controller; it drives the amdgpu cards ``amdgpu`` reads (none without it)."""
    if config.fan.mode == "off":
        return None
    from gpuwatch.fan.controller import FanController

    return FanController(config.fan, Sysfs(config.sysfs_root), config.resolved_runtime_dir,
                         locate=amdgpu.locate if amdgpu is not None else _nowhere)


def _nowhere(gpu_id: str) -> None:
    return None


def build_supervisor(config: Config) -> TrainerConsumer | None:
    """The training supervisor for the configured `[[trainer]]`s, or None when there are none."""
    if not config.trainer:
        return None
    from gpuwatch.supervise.supervisor import Supervisor

    return Supervisor(list(config.trainer), config.thermal, config.resolved_runtime_dir / "trainers")
