"""A supervised trainer's lines in `gpuwatch status` (pure): its run, ranks, use of each GPU and what it left stuck,
each fitted to the terminal's ``width`` (None: as wide as they are) by leaving out its least important fields first
(``cli/fit.py``; the ``DROP_*`` ranks below, the highest first)."""

from __future__ import annotations

from gpuwatch.cli.fit import Field, fit
from gpuwatch.cli.text import GREEN, RED, YELLOW, Paint, duration, energy, pct, size, state_text

TYPE_CHECKING = False  # the renderers read the light view (publish/light_view.py) or model's dataclasses (issue 52)
if TYPE_CHECKING:
    from gpuwatch.model import TrainerGpuUse, TrainerState

# No step for this many of its steps' time, and at least STALE_S (heartbeats are written about once a second): the
# rate shown is the one before (a pause, a resume not stepping yet), and said so.
STALE_STEPS = 10.0
STALE_S = 10.0
PHASE_COLOURS = {"running": GREEN, "paused": YELLOW, "pausing": YELLOW, "failed": RED, "backoff": YELLOW}


# What goes first from a trainer's line too wide for the terminal (the highest first): the why of a pause and the
# pace stay longest; the name and phase always.
DROP_STEPS_PER_KJ, DROP_ENERGY, DROP_RESTARTS, DROP_UPTIME, DROP_PID, DROP_LAST_EXIT = 10, 9, 8, 7, 6, 5
DROP_ORIGIN, DROP_RANKS, DROP_PACE, DROP_REASON = 4, 3, 2, 1


def trainer_line(t: TrainerState, now: float, paint: Paint, width: int | None = None) -> str:
    phase = state_text(t.phase)
    return fit([Field(f"trainer {t.name}: "), Field(phase, colour=PHASE_COLOURS.get(phase)), _origin(t),
                *_run(t, now), *_progress(t), _ranks(t, phase),
                Field(f"  ({t.reason})" if t.reason else "", DROP_REASON)], width, paint)


def _origin(t: TrainerState) -> Field:
    """An attached run (`gpuwatch train` from a user's shell): who runs it and its Slurm job; a configured
    trainer's line stays as it was."""
    if t.origin != "attached":
        return Field("")
    who = ", ".join(part for part in ("attached", t.user, f"job {t.job_id}" if t.job_id else None)
                    if part)
    return Field(f"  [{who}]", DROP_ORIGIN)


def _run(t: TrainerState, now: float) -> list[Field]:
    """The process: pid, uptime, restarts, how the last run ended."""
    started_unix = t.started_unix
    return [Field(f"  pid {t.pid}" if t.pid else "", DROP_PID),
            Field(f"  up {duration(now - started_unix)}" if started_unix else "", DROP_UPTIME),
            Field(f"  restarts {t.restarts_total}", DROP_RESTARTS),
            Field(f"  last exit {exit_text(t.last_exit_code)}" if t.last_exit_code is not None else "",
                  DROP_LAST_EXIT)]


def exit_text(code: int) -> str:
    """A run's exit as its user's shell says it: a negative code (Popen's killed by a signal) is the signal with
    the shell's 128+N beside it, so `stop`'s ``-15`` reads as `gpuwatch train`'s ``exited with 143``."""
    if code >= 0:
        return str(code)
    import signal  # here: enum under it (issue 52), for a run killed by a signal

    try:
        name = signal.Signals(-code).name
    except ValueError:
        name = f"signal {-code}"
    return f"{name} ({128 - code})"


def _progress(t: TrainerState) -> list[Field]:
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
    return [Field(text, DROP_PACE), Field(energy(t.run_energy_j), DROP_ENERGY),
            Field(f"  {t.steps_per_kj:.1f} steps/kJ" if t.steps_per_kj is not None else "", DROP_STEPS_PER_KJ)]


def _ranks(t: TrainerState, phase: str) -> Field:
    """A distributed job: its ranks on this machine (of the whole job's); how many hold while it pauses."""
    ranks = t.ranks
    if not ranks:
        return Field("")
    held = t.ranks_held or 0
    text = f"  {held}/{ranks} ranks held" if phase in ("pausing", "paused") or held else f"  {ranks} ranks"
    job = t.world_size
    return Field(text + (f" (job: {job})" if job and job != ranks else ""), DROP_RANKS)


def trainer_gpu_lines(t: TrainerState, paint: Paint, width: int | None = None) -> list[str]:
    lines = [fit([Field(f"  on {use.gpu_id}:"), *_use(use)], width, paint) for use in t.gpu_use]
    if t.stuck_pids:
        pids = ", ".join(str(p) for p in t.stuck_pids)
        lines.append(fit([Field(f"  pid {pids} left behind after SIGKILL (D state)", colour=RED),
                          Field(": the host may need a reboot", 1, RED)], width, paint))
    if errors := t.heartbeat_read_errors_total:
        lines.append(fit([Field(f"  heartbeat unreadable {errors} time{'s' if errors != 1 else ''}", colour=YELLOW),
                          Field(" (not a regular file of at most 64 KiB: a FIFO, a link, too large)", 2, YELLOW),
                          Field("; its progress is not seen", 1, YELLOW)], width, paint))
    return lines


def trainer_log_line(t: TrainerState, logs: str, width: int | None = None) -> str:
    """Where to look when it failed: its log file and the command that prints it (``logs``, as it must be typed)."""
    return fit([Field(f"  log    {t.log_path}"), Field(f"  ({logs} {t.name})", 1)], width, lambda text, _: text)


def _use(use: TrainerGpuUse) -> list[Field]:
    # Two sources, named, since they disagree by design: the DRM fdinfo engine time counts what is submitted
    # through the render node (graphics, Mesa compute), never ROCm's user-mode queues, whose load only KFD's CU
    # occupancy shows; a ROCm training run reads `drm engine 0%  kfd cu 100%`.
    fields = [Field(f" vram {size(use.vram_bytes)}", 2), Field(f"  gtt {size(use.gtt_bytes)}", 5),
              Field(f"  drm engine {pct(use.engine_busy_ratio)}", 4)]
    if use.kfd_vram_bytes is not None:
        fields += [Field(f"  rocm vram {size(use.kfd_vram_bytes)}", 3),
                   Field(f"  kfd cu {pct(use.kfd_cu_occupancy_ratio)}", 1)]
    return fields + [Field(f"  ({use.processes} process{'es' if use.processes != 1 else ''})", 6)]
