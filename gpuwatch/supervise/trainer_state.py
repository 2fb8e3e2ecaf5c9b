"""A run's published ``TrainerState`` (pure): what a configured trainer and an attached run publish alike.

trainer.py (``Trainer.published``) and attached_runs.py each add what is theirs (the process, the
restarts, the log, the origin) to what is built here once: the progress its job's ranks or its one
heartbeat report, the rate (0 while held: a held run makes no steps), the job's ranks, its energy and
GPU use, and the monotonic instants the supervisor keeps as Unix seconds (the published times are).
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from gpuwatch.heartbeat import Heartbeat
from gpuwatch.model import Snapshot, TrainerPhase, TrainerState
from gpuwatch.supervise.energy import RunEnergy
from gpuwatch.supervise.gpu_use import trainer_use
from gpuwatch.supervise.progress import RunningRate, published_rate
from gpuwatch.supervise.ranks import RankView, reported


def run_state(name: str, phase: TrainerPhase, *, live: bool, ranks: RankView | None, beat: Heartbeat | None,
              rate: RunningRate, run_energy: RunEnergy, used_gpus: Collection[str], paused_since: float | None,
              snapshot: Snapshot | None, now_mono: float, now_unix: float, **own: Any) -> TrainerState:
    """The fields every run publishes, and ``own``: the caller's (a configured trainer's, an attached run's), in
    the one construction (a ``dataclasses.replace`` after it cost as much again, every run, every tick).

    ``live``: a process of the run may still be there (only then is a rate published); ``beat``: its one
    heartbeat (what a run that is no distributed job reports); ``paused_since`` is monotonic."""
    progress = reported(ranks, beat)
    held = phase is TrainerPhase.PAUSED or (phase is TrainerPhase.PAUSING and progress.acknowledged)
    return TrainerState(
        name=name, phase=phase, steps_total=progress.steps_total,
        steps_per_s=published_rate(held, progress.steps_per_s, rate) if live else None,
        last_step_age_s=age_s(progress.last_step_unix, now_unix), epoch=beat.epoch if beat else None,
        paused_since_unix=since_unix(paused_since, now_mono, now_unix),
        run_energy_j=run_energy.used_j, energy_total_j=run_energy.total_j,
        steps_per_kj=run_energy.steps_per_kj(progress.steps_total), gpus_used=tuple(sorted(used_gpus)),
        gpu_use=trainer_use(snapshot.processes, name) if snapshot is not None else (),
        ranks=ranks.ranks if ranks else None, ranks_held=ranks.ranks_held if ranks else None,
        world_size=ranks.world_size if ranks else None, paused_by=ranks.paused_by if ranks else None, **own,
    )


def age_s(unix_s: float | None, now_unix: float) -> float | None:
    """How long ago ``unix_s`` was (never negative: the trainer's clock may run ahead of ours)."""
    return None if unix_s is None else max(0.0, now_unix - unix_s)


def since_unix(mono_s: float | None, now_mono: float, now_unix: float) -> float | None:
    """A past monotonic instant on the wall clock (the published times are Unix seconds)."""
    return None if mono_s is None else now_unix - (now_mono - mono_s)


def due_unix(mono_s: float | None, now_mono: float, now_unix: float) -> float | None:
    """A monotonic deadline on the wall clock; one already past is due now."""
    return None if mono_s is None else now_unix + max(0.0, mono_s - now_mono)
