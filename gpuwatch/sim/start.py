"""The simulator as the daemon runs it: built from ``[simulate]``, advanced right before each sample.

``start_simulator`` lays out the cards a config asks for; ``SimulatedSource`` wraps the real amdgpu
source so each read first catches the model up with the clock (cards.py plays the kernel and the card).
"""

from __future__ import annotations

import logging
from dataclasses import replace

from gpuwatch.config.file import Config
from gpuwatch.gpus.source import GpuSource
from gpuwatch.model import GpuReading, SourceName, UnsupportedCard
from gpuwatch.sim.cards import SimulatedGpus
from gpuwatch.sim.faults import SimFaults
from gpuwatch.sim.kernel import Board
from gpuwatch.sim.profiles import PROFILES

log = logging.getLogger("gpuwatch.simulator")


class SimulatedSource:
    """A GpuSource that advances the simulator, then reads the tree through the real amdgpu code."""

    name: SourceName = "amdgpu"

    def __init__(self, simulator: SimulatedGpus, inner: GpuSource) -> None:
        self.simulator = simulator
        self.inner = inner

    def read_all(self) -> tuple[list[GpuReading], list[UnsupportedCard]]:
        try:
            self.simulator.advance()
        except Exception:  # a broken simulator must look like a broken GPU, not stop the daemon
            log.exception("simulator step failed")
        return self.inner.read_all()


def start_simulator(config: Config) -> SimulatedGpus:
    """The simulator a config asks for, its tree freshly laid out at ``config.simulated_tree_dir``."""
    sim = config.simulate
    stuck = sim.faults.fan_stuck_percent
    return SimulatedGpus(
        root=config.simulated_tree_dir,
        count=sim.gpus,
        params=replace(PROFILES[sim.card].params, ambient_c=sim.ambient_c, cooling_scale=sim.cooling_scale),
        card=sim.card,
        faults=SimFaults(
            fan_stuck_ratio=None if stuck is None else stuck / 100.0,
            sensor_garbage=sim.faults.sensor_garbage,
            firmware_reset_every_s=sim.faults.firmware_reset_every_s,
            disappear_after_s=sim.faults.disappear_after_s,
            gpu_reset_at_s=tuple(sim.faults.gpu_reset_at_s),
            gpu_reset_outage_s=sim.faults.gpu_reset_outage_s,
            gpu_reset_stuck_s=sim.faults.gpu_reset_stuck_s,
            power_cap_readonly=sim.faults.power_cap_readonly,
            cards=tuple(sim.faults.cards),
        ),
        time_scale=sim.time_scale,
        load_without_trainer=sim.load_without_trainer,
        fan1_input=sim.fan1_input,
        desktop_client=sim.desktop_client,
        proc_root=config.simulated_proc_dir,
        board=Board(**sim.kernel.model_dump()),
    )
