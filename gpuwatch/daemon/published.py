"""What one tick publishes, and what the daemon says of the GPUs it found: the ``PublishedState`` built
from every part's state (with the thermal limits in force and the read errors counted across ticks) and
the start-up log of the GPUs, the unsupported cards and the configured slots that name nothing."""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import replace

from gpuwatch.config.file import Config
from gpuwatch.limits import limits_in_force
from gpuwatch.model import ClockState, DaemonInfo, FanState, PowerState, PublishedState, Snapshot, TrainerState
from gpuwatch.publish.live import rung_of

log = logging.getLogger("gpuwatch")


def published_state(snapshot: Snapshot, daemon: DaemonInfo, fans: tuple[FanState, ...],
                    powers: tuple[PowerState, ...], trainers: tuple[TrainerState, ...],
                    read_errors: Counter[tuple[str, str]], config: Config,
                    clocks: tuple[ClockState, ...] = ()) -> PublishedState:
    """The tick's state as /metrics, /status and the state file read it; the limits from ``config`` (the
    tick's own configuration: a reload shows from the next tick on)."""
    state = PublishedState(
        snapshot=snapshot, daemon=daemon, fans=fans, trainers=trainers, powers=powers,
        read_errors_total=tuple((gpu, sensor, n) for (gpu, sensor), n in sorted(read_errors.items())),
        limits_c=limits_in_force(snapshot, config.thermal), clocks=clocks,
    )
    return replace(state, ladder_rungs=tuple((gpu.gpu_id, rung_of(state, gpu.gpu_id, config.fan.for_gpu(gpu.gpu_id)))
                                             for gpu in snapshot.gpus if gpu.up))


def count_read_errors(totals: Counter[tuple[str, str]], snapshot: Snapshot) -> None:
    """Cumulative per-sensor read failures for the exporter's counter; a GPU that is gone counts as down, not
    as errors."""
    for gpu in snapshot.gpus:
        if gpu.up:
            totals.update((gpu.gpu_id, error.sensor) for error in gpu.errors)


def log_discovery(config: Config, snapshot: Snapshot) -> None:
    """The first sample, for the journal: each GPU, each card not read, each slot the config names that is not here."""
    for gpu in snapshot.gpus:
        log.info("GPU %s (%s, %s): %s", gpu.gpu_id, gpu.card, gpu.backend, gpu.name or gpu.device_id)
    for card in snapshot.unsupported:
        log.info("card %s uses driver %s: not supported, not read", card.card, card.driver)
    for line in config.slots_not_present({gpu.gpu_id for gpu in snapshot.gpus}):
        log.warning("%s", line)
    if not snapshot.gpus:
        log.warning(
            "no GPU found (backend %s; amdgpu under %s/class/drm). Point gpuwatch at another sysfs tree with "
            "--sysfs-root DIR (or sysfs_root in the config), or run the simulator: gpuwatch run --simulate",
            config.backend,
            config.sysfs_root,
        )
