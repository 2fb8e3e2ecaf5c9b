"""What counts as a run's progress (pure): the step counter, the progress file, the log, a stable run.

Restart delays grow only with crashes *without progress*. Real progress (the step counter advanced,
the progress file was touched, or the run stayed up ``stable_after_s``) resets the crash count. Log
output (``log_is_progress``) is only a sign of life: it holds off the hang timeout, never resets the
count (a crashing program prints too). A distributed job whose agent restarted its workers is still the
same run: that is counted as a restart (reason ``torchrun``), not as a crash.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from gpuwatch.config.trainer import TrainerConfig
from gpuwatch.supervise.actions import Inputs
from gpuwatch.supervise.machine import Machine, count_restart, note


def observe_progress(machine: Machine, config: TrainerConfig, inputs: Inputs) -> Machine:
    """The run's progress tracking after this tick's observation (called in the live phases only)."""
    steps, mtime = inputs.steps_total, inputs.progress_mtime
    progressed = real = False
    if steps is not None and steps != machine.seen_steps:
        # A run's first count is progress only past 0: a fresh run reports 0 before its first step.
        progressed = real = machine.seen_steps is not None or steps > 0
    if mtime is not None and mtime != machine.seen_mtime:
        progressed = real = True
    if config.log_is_progress and inputs.log_bytes > machine.seen_log_bytes:
        progressed = True
    if machine.run_started is not None and inputs.now - machine.run_started >= config.stable_after_s:
        real = True
    machine = replace(machine, heartbeat_seen=machine.heartbeat_seen or steps is not None,
                      seen_steps=steps if steps is not None else machine.seen_steps,
                      seen_mtime=mtime if mtime is not None else machine.seen_mtime,
                      seen_log_bytes=inputs.log_bytes)
    machine = _follow_job(machine, inputs)
    if progressed:
        machine = replace(machine, last_progress=inputs.now)
    if real and not machine.run_progressed:
        machine = replace(machine, run_progressed=True, crashes=0)
    return machine


def _follow_job(machine: Machine, inputs: Inputs) -> Machine:
    """The job incarnation its ranks report; a new one within the run means the agent restarted its workers
    (torchrun ``--max-restarts``): one more restart, and the run goes on."""
    job = inputs.ranks.job if inputs.ranks else None
    if job is None or job == machine.seen_job:
        return machine
    if machine.seen_job is not None:
        machine = note(count_restart(machine, "torchrun"), "workers restarted by torchrun")
    return replace(machine, seen_job=job)


@dataclass(frozen=True)
class RunningRate:
    """Steps per second over the current running span (pure): a pause ends the span, so paused time never
    counts; the next span starts when the run steps again. The supervisor's own rate, for a trainer whose
    heartbeat reports steps but no rate."""

    start: tuple[float, int] | None = None  # (monotonic seconds, steps) where the span began
    last: tuple[float, int] | None = None  # the latest sample of the span

    def steps_per_s(self) -> float | None:
        if self.start is None or self.last is None or self.last[0] <= self.start[0]:
            return None
        return (self.last[1] - self.start[1]) / (self.last[0] - self.start[0])


def running_rate(prev: RunningRate, running: bool, now: float, steps: int | None) -> RunningRate:
    """``prev`` after one more look: ``running`` is False while held (paused, frozen, stopped) or between runs."""
    if not running or steps is None:
        return RunningRate()
    if prev.start is None or prev.last is None or steps < prev.last[1]:
        return RunningRate(start=(now, steps), last=(now, steps))  # a new span (or a new run counting afresh)
    return replace(prev, last=(now, steps))


def published_rate(phase_paused: bool, reported_s: float | None, own: RunningRate) -> float | None:
    """The rate to publish: 0 while held (a held run makes no steps, whatever its last heartbeat said),
    else the trainer's own figure, else the supervisor's over the running span."""
    if phase_paused:
        return 0.0
    return reported_s if reported_s is not None else own.steps_per_s()
