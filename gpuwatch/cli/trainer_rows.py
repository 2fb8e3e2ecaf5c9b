"""A supervised trainer's lines in `gpuwatch status` (pure): its run, ranks, use of each GPU and what it left stuck."""

from __future__ import annotations

import signal

from gpuwatch.cli.text import GREEN, NA, RED, YELLOW, Paint, duration, energy, pct, size
from gpuwatch.model import TrainerGpuUse, TrainerState

# No step for this many of its steps' time, and at least STALE_S (heartbeats are written about once a second): the
# rate shown is the one before (a pause, a resume not stepping yet), and said so.
STALE_STEPS = 10.0
STALE_S = 10.0
PHASE_COLOURS = {"running": GREEN, "paused": YELLOW, "pausing": YELLOW, "failed": RED, "backoff": YELLOW}


def trainer_line(t: TrainerState, now: float, paint: Paint) -> str:
    phase = t.phase.value if t.phase else NA  # None: an older or partial document
    colour = PHASE_COLOURS.get(phase)
    text = f"trainer {t.name}: {paint(phase, colour) if colour else phase}" + _origin(t)
    return text + _run(t, now) + _progress(t) + _ranks(t, phase) + (f"  ({t.reason})" if t.reason else "")


def _origin(t: TrainerState) -> str:
    """An attached run (`gpuwatch train` from a user's shell): who runs it and its Slurm job; a configured
    trainer's line stays as it was."""
    if t.origin != "attached":
        return ""
    who = ", ".join(part for part in ("attached", t.user, f"job {t.job_id}" if t.job_id else None)
                    if part)
    return f"  [{who}]"


def _run(t: TrainerState, now: float) -> str:
    """The process: pid, uptime, restarts, how the last run ended."""
    text = f"  pid {t.pid}" if t.pid else ""
    started_unix = t.started_unix
    if started_unix:
        text += f"  up {duration(now - started_unix)}"
    text += f"  restarts {t.restarts_total}"
    if t.last_exit_code is not None:
        text += f"  last exit {exit_text(t.last_exit_code)}"
    return text


def exit_text(code: int) -> str:
    """A run's exit as its user's shell says it: a negative code (Popen's killed by a signal) is the signal with
    the shell's 128+N beside it, so `stop`'s ``-15`` reads as `gpuwatch train`'s ``exited with 143``."""
    if code >= 0:
        return str(code)
    try:
        name = signal.Signals(-code).name
    except ValueError:
        name = f"signal {-code}"
    return f"{name} ({128 - code})"


def _progress(t: TrainerState) -> str:
    """The training's pace (from its heartbeat) and its energy."""
    text = ""
    rate, age = t.steps_per_s, t.last_step_age_s
    if rate and age is not None and age > max(STALE_S, STALE_STEPS / rate):
        # No step for many of its steps' time (a pause, a resume not stepping yet): the rate is the one before.
        text += f"  {rate:.2f} steps/s until its last step, {age:.0f}s ago"
    else:
        if rate is not None:
            text += f"  {rate:.2f} steps/s"
        if age is not None:
            text += f"  last step {age:.0f}s ago"
    text += energy(t.run_energy_j)
    if t.steps_per_kj is not None:
        text += f"  {t.steps_per_kj:.1f} steps/kJ"
    return text


def _ranks(t: TrainerState, phase: str) -> str:
    """A distributed job: its ranks on this machine (of the whole job's); how many hold while it pauses."""
    ranks = t.ranks
    if not ranks:
        return ""
    held = t.ranks_held or 0
    text = f"  {held}/{ranks} ranks held" if phase in ("pausing", "paused") or held else f"  {ranks} ranks"
    job = t.world_size
    return text + (f" (job: {job})" if job and job != ranks else "")


def trainer_gpu_lines(t: TrainerState, paint: Paint) -> list[str]:
    lines = [f"  on {use.gpu_id}: {_use(use)}" for use in t.gpu_use]
    if t.stuck_pids:
        pids = ", ".join(str(p) for p in t.stuck_pids)
        lines.append("  " + paint(f"pid {pids} left behind after SIGKILL (D state): the host may need a reboot", RED))
    if errors := t.heartbeat_read_errors_total:
        lines.append("  " + paint(f"heartbeat unreadable {errors} time{'s' if errors != 1 else ''} (not a regular "
                                  "file of at most 64 KiB: a FIFO, a link, too large); its progress is not seen",
                                  YELLOW))
    return lines


def _use(use: TrainerGpuUse) -> str:
    # Two sources, named, since they disagree by design: the DRM fdinfo engine time counts what is submitted
    # through the render node (graphics, Mesa compute), never ROCm's user-mode queues, whose load only KFD's CU
    # occupancy shows; a ROCm training run reads `drm engine 0%  kfd cu 100%`.
    text = f"vram {size(use.vram_bytes)}  gtt {size(use.gtt_bytes)}" \
           f"  drm engine {pct(use.engine_busy_ratio)}"
    if use.kfd_vram_bytes is not None:
        text += f"  rocm vram {size(use.kfd_vram_bytes)}  kfd cu {pct(use.kfd_cu_occupancy_ratio)}"
    return text + f"  ({use.processes} process{'es' if use.processes != 1 else ''})"
