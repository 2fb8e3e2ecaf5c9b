"""The training supervisor's state machine (pure): (state, inputs incl. now) -> (state, actions).

One frozen ``Machine`` per trainer. The effects layer (supervisor.py) observes the world into
``Inputs`` (thermal verdict from the tick's snapshot, process status, progress counters, a manual
command) and carries out the returned actions (both defined in actions.py). ``now`` is monotonic seconds; nothing here reads a clock.

Rules worth knowing:
* Restart delays grow only with crashes *without progress*; a run that advanced its step counter,
  touched its progress file or stayed up ``stable_after_s`` resets the count.
* Nothing is ever (re)started while a GPU it uses is over a pause limit: it would just pause again.
* A hot GPU pauses after ``debounce_s``; while its power governor still holds it above the floor cap,
  only after the governor's backstop (``Thermal.governed_backstop_s``). Crit and failsafe stop at once.
* A stop always goes CONT -> TERM -> (grace) -> KILL, at shutdown too, each trainer with its own grace;
  the effects layer does the CONT. A process still there ``stuck_after_s`` after KILL (D state) is
  abandoned: reported, no longer waited for.
* A reset of a GPU it uses ends the run (its GPU context is lost); it restarts from its checkpoint once
  its GPUs answer again, as a restart with reason ``gpu_reset``. Nothing (re)starts before that.
* A distributed job is paused only when every local rank holds; a job held at another node's request
  is PAUSED here too (mode ``remote``: never counted, bounded or resumed from here, never a hang).
* Only a SIGSTOP pause needs a bound (``pause_limit_s``): nothing is in flight in a cooperative hold.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from gpuwatch.config.trainer import TrainerConfig
from gpuwatch.model import TrainerPhase
from gpuwatch.supervise.actions import (
    Abandon,
    Action,
    AfterStop,
    CancelPause,
    CollectEvidence,
    Freeze,
    Inputs,
    Kill,
    PauseMode,
    RequestPause,
    Spawn,
    Terminate,
    Thaw,
    Thermal,
    pause_limit_s,
)


@dataclass(frozen=True)
class Machine:
    phase: TrainerPhase = TrainerPhase.STARTING
    since: float = 0.0
    run_started: float | None = None
    hot_since: float | None = None
    paused_since: float | None = None
    pause_mode: PauseMode | None = None
    manual_pause: bool = False
    stop_sent: float | None = None
    killed: bool = False
    after_stop: AfterStop | None = None  # why the current stop was asked for
    last_progress: float = 0.0
    run_progressed: bool = False
    heartbeat_seen: bool = False
    seen_steps: int | None = None
    seen_mtime: float | None = None
    seen_log_bytes: int = 0
    seen_job: str | None = None  # the job incarnation its ranks report (torchrun restarts change it)
    crashes: int = 0  # consecutive crashes without progress
    next_start: float | None = None
    restarts_total: int = 0
    restarts_by_reason: tuple[tuple[str, int], ...] = ()
    pauses_total: int = 0
    resumes_total: int = 0
    last_exit_code: int | None = None
    last_exit_reason: str | None = None
    reason: str | None = None
    events: tuple[str, ...] = field(default=(), compare=False)


LIVE = (TrainerPhase.RUNNING, TrainerPhase.PAUSING, TrainerPhase.PAUSED, TrainerPhase.STOPPING)


def backoff_delay_s(config: TrainerConfig, crashes: int, jitter: float) -> float:
    base = min(config.backoff.max_s, config.backoff.initial_s * 2.0 ** max(0, crashes - 1))
    return max(0.0, base * (1 + config.backoff.jitter_ratio * jitter))


def step(m: Machine, cfg: TrainerConfig, x: Inputs) -> tuple[Machine, list[Action]]:
    """Advance one trainer by one tick."""
    acts: list[Action] = []
    m = replace(m, events=())
    if m.phase in LIVE:
        m = _observe_progress(m, cfg, x)
    if x.shutdown:
        return _shutdown(m, cfg, x, acts)
    if m.phase in LIVE and not x.alive:
        return _exited(m, cfg, x, acts)
    if m.phase in (TrainerPhase.RUNNING, TrainerPhase.PAUSING, TrainerPhase.PAUSED) and x.gpu_reset:
        return _stop(m, x, acts, x.gpu_reset, "gpu_reset")
    if m.phase in (TrainerPhase.RUNNING, TrainerPhase.PAUSING, TrainerPhase.PAUSED) and x.thermal.critical:
        return _stop(m, x, acts, x.thermal.reason or "emergency", "emergency")
    if x.command == "restart":
        if m.phase in LIVE:
            if m.phase is TrainerPhase.STOPPING:
                return replace(m, after_stop="restart"), acts
            return _stop(m, x, acts, "manual restart", "restart")
        m = replace(m, crashes=0)
        return _spawn(m, x, acts, "manual", resume=m.phase is not TrainerPhase.FINISHED)
    handler = _HANDLERS.get(m.phase)
    return handler(m, cfg, x, acts) if handler else (m, acts)


def _starting(m: Machine, cfg: TrainerConfig, x: Inputs, acts: list[Action]) -> tuple[Machine, list[Action]]:
    if x.thermal.hot:
        return _note(replace(m, reason=f"waiting to start: {x.thermal.reason}")), acts
    if not x.gpus_ready:
        return replace(m, reason=f"waiting to start: {x.gpus_wait}"), acts
    acts.append(Spawn(resume=False))
    return _enter(m, TrainerPhase.RUNNING, x.now, "started", **_new_run(x.now)), acts


def _running(m: Machine, cfg: TrainerConfig, x: Inputs, acts: list[Action]) -> tuple[Machine, list[Action]]:
    m, paused = _own_pause(m, cfg, x, acts)
    if paused:
        return paused
    held_by = x.ranks.held_by if x.ranks else None
    if held_by is not None:
        return _enter(m, TrainerPhase.PAUSED, x.now, f"paused by {held_by}", pause_mode="remote",
                      paused_since=x.now), acts
    if cfg.hang_timeout_s is not None and x.now - m.last_progress >= cfg.hang_timeout_s:
        why = f"hang: no progress for {x.now - m.last_progress:.0f}s"
        acts.append(CollectEvidence(why))
        return _stop(m, x, acts, why, "hang")
    return m, acts


def _pausing(m: Machine, cfg: TrainerConfig, x: Inputs, acts: list[Action]) -> tuple[Machine, list[Action]]:
    if _should_resume(m, cfg, x):
        return _resume(m, x, acts)
    if x.heartbeat_paused:  # a distributed job: every local rank holds ("k/N ranks held" is in the status)
        return _enter(m, TrainerPhase.PAUSED, x.now, "paused at a step boundary"), acts
    limit = pause_limit_s(cfg.max_pause_s, m.pause_mode, m.heartbeat_seen, x.ranks)
    if limit is not None and _paused_for(m, x) >= limit:
        return _stop(m, x, acts, f"paused longer than {limit:g}s", "max-pause")
    if cfg.cooperative_pause == "auto" and x.now - m.since >= cfg.pause_ack_timeout_s:
        acts.append(Freeze())
        missing = f" from {x.ranks.ranks - x.ranks.ranks_held} of {x.ranks.ranks} ranks" if x.ranks else ""
        return _enter(m, TrainerPhase.PAUSED, x.now, f"no pause acknowledgement{missing}: SIGSTOP",
                      pause_mode="sigstop"), acts
    return m, acts


def _paused(m: Machine, cfg: TrainerConfig, x: Inputs, acts: list[Action]) -> tuple[Machine, list[Action]]:
    if m.pause_mode == "remote":
        return _held_remotely(m, cfg, x, acts)
    if _should_resume(m, cfg, x):
        return _resume(m, x, acts)
    limit = pause_limit_s(cfg.max_pause_s, m.pause_mode, m.heartbeat_seen, x.ranks)
    if limit is not None and _paused_for(m, x) >= limit:
        return _stop(m, x, acts, f"paused longer than {limit:g}s", "max-pause")
    return m, acts


def _stopping(m: Machine, cfg: TrainerConfig, x: Inputs, acts: list[Action]) -> tuple[Machine, list[Action]]:
    grace = cfg.gpu_reset_grace_s if m.after_stop == "gpu_reset" else cfg.grace_s  # no checkpoint without a GPU
    if not m.killed and m.stop_sent is not None and x.now - m.stop_sent >= grace:
        acts.append(Kill(f"still running {grace:g}s after SIGTERM"))
        return _note(replace(m, killed=True), f"SIGKILL after {grace:g}s grace"), acts
    if m.killed and m.stop_sent is not None and x.now - m.stop_sent >= grace + cfg.stuck_after_s:
        why = f"still there {cfg.stuck_after_s:g}s after SIGKILL (stuck in the kernel): left behind"
        acts.append(Abandon(why))
        return _exited(m, cfg, replace(x, alive=False, exit_code=None, exit_reason=why), acts)
    return m, acts


def _waiting(m: Machine, cfg: TrainerConfig, x: Inputs, acts: list[Action]) -> tuple[Machine, list[Action]]:
    """BACKOFF, or STOPPED after an emergency: start again when due and cool."""
    if m.phase is TrainerPhase.STOPPED and (m.after_stop != "emergency" or not cfg.restart_after_emergency):
        return m, acts
    if not x.gpus_ready:
        return replace(m, reason=f"waiting to restart: {x.gpus_wait}"), acts
    if x.thermal.hot or x.thermal.critical:
        return replace(m, reason=f"waiting to restart: {x.thermal.reason}"), acts
    if m.next_start is not None and x.now < m.next_start:
        return m, acts
    why = "emergency" if m.phase is TrainerPhase.STOPPED else (m.after_stop or "crash")
    return _spawn(m, x, acts, why, resume=True)


def _spawn(m: Machine, x: Inputs, acts: list[Action], why: str, resume: bool) -> tuple[Machine, list[Action]]:
    acts.append(Spawn(resume=resume))
    counts = dict(m.restarts_by_reason)
    counts[why] = counts.get(why, 0) + 1
    return _enter(
        m, TrainerPhase.RUNNING, x.now, f"restarted ({why})", **_new_run(x.now), next_start=None, after_stop=None,
        restarts_total=m.restarts_total + 1, restarts_by_reason=tuple(sorted(counts.items())), paused_since=None,
        pause_mode=None, manual_pause=False,
    ), acts


def _new_run(now: float) -> dict[str, Any]:
    """A new run starts its progress tracking afresh."""
    return dict(run_started=now, last_progress=now, run_progressed=False, seen_log_bytes=0, seen_steps=None,
                seen_mtime=None, hot_since=None, seen_job=None)


def _held_remotely(m: Machine, cfg: TrainerConfig, x: Inputs, acts: list[Action]) -> tuple[Machine, list[Action]]:
    """Held at another node's request: this node may ask too, but only that node releases its own request."""
    m, paused = _own_pause(m, cfg, x, acts)
    if paused:
        return paused
    held_by = x.ranks.held_by if x.ranks else None
    if held_by is None:
        return _enter(m, TrainerPhase.RUNNING, x.now, "running again: no node asks for the pause", paused_since=None,
                      pause_mode=None, last_progress=x.now), acts
    if x.command == "resume":
        return _note(m, f"not resumed: paused by {held_by} (resume it there)"), acts
    return replace(m, reason=f"paused by {held_by}", last_progress=x.now), acts


def _own_pause(m: Machine, cfg: TrainerConfig, x: Inputs,
               acts: list[Action]) -> tuple[Machine, tuple[Machine, list[Action]] | None]:
    """This node's own pause, when it asks for one: a manual pause, or a sensor hot for ``debounce_s`` (or the
    power governor's backstop)."""
    if x.command == "pause":
        return m, _pause(m, cfg, x, acts, manual=True)
    if not x.thermal.hot:
        return replace(m, hot_since=None), None
    hot_since = m.hot_since if m.hot_since is not None else x.now
    m = replace(m, hot_since=hot_since)
    # While the power governor still lowers the cap, the pause waits for its backstop (docs/power.md).
    if x.now - hot_since >= max(cfg.debounce_s, x.thermal.governed_backstop_s or 0.0):
        return m, _pause(replace(m, reason=x.thermal.reason), cfg, x, acts, manual=False)
    return m, None


def _pause(m: Machine, cfg: TrainerConfig, x: Inputs, acts: list[Action], manual: bool) -> tuple[Machine, list[Action]]:
    why = "manual pause" if manual else (x.thermal.reason or "hot")
    common = dict(paused_since=x.now, manual_pause=manual, pauses_total=m.pauses_total + 1, hot_since=None)
    cooperative = cfg.cooperative_pause == "always" or (cfg.cooperative_pause == "auto" and m.heartbeat_seen)
    if cooperative:
        acts.append(RequestPause(why))
        return _enter(m, TrainerPhase.PAUSING, x.now, f"pausing: {why}", pause_mode="cooperative", **common), acts
    acts.append(Freeze())
    return _enter(m, TrainerPhase.PAUSED, x.now, f"paused (SIGSTOP): {why}", pause_mode="sigstop", **common), acts


def _should_resume(m: Machine, cfg: TrainerConfig, x: Inputs) -> bool:
    if x.command == "resume":
        return True
    return not m.manual_pause and x.thermal.cool and not x.thermal.hot and _paused_for(m, x) >= cfg.min_pause_s


def _paused_for(m: Machine, x: Inputs) -> float:
    return x.now - (m.paused_since if m.paused_since is not None else m.since)


def _resume(m: Machine, x: Inputs, acts: list[Action]) -> tuple[Machine, list[Action]]:
    acts.append(CancelPause())
    acts.append(Thaw())
    return _enter(m, TrainerPhase.RUNNING, x.now, "resumed", paused_since=None, pause_mode=None, manual_pause=False,
                  last_progress=x.now, resumes_total=m.resumes_total + 1, hot_since=None), acts


def _stop(m: Machine, x: Inputs, acts: list[Action], why: str, after: str) -> tuple[Machine, list[Action]]:
    acts.append(CancelPause())
    acts.append(Terminate(why))
    return _enter(m, TrainerPhase.STOPPING, x.now, f"stopping: {why}", stop_sent=x.now, killed=False,
                  after_stop=after), acts


def _shutdown(m: Machine, cfg: TrainerConfig, x: Inputs, acts: list[Action]) -> tuple[Machine, list[Action]]:
    if m.phase in LIVE and x.alive:
        if m.phase is TrainerPhase.STOPPING:
            # Each trainer's own grace holds at shutdown too, counted from the TERM it already got, for the
            # stop it is in (gpu_reset_grace_s for a reset's); the supervisor's deadline (largest grace +
            # 10 s) is only the backstop. It ends STOPPED "daemon stopping" below once it is gone.
            return _stopping(m, cfg, x, acts)
        return _stop(m, x, acts, "daemon stopping", "shutdown")
    if m.phase in LIVE:
        m = replace(m, last_exit_code=x.exit_code, last_exit_reason=x.exit_reason)
    if m.phase is TrainerPhase.STOPPED and m.after_stop == "shutdown":
        return m, acts
    return _enter(m, TrainerPhase.STOPPED, x.now, "stopped: daemon stopping", after_stop="shutdown"), acts


def _exited(m: Machine, cfg: TrainerConfig, x: Inputs, acts: list[Action]) -> tuple[Machine, list[Action]]:
    code = x.exit_code
    m = replace(m, last_exit_code=code, last_exit_reason=x.exit_reason or _describe(code),
                paused_since=None, pause_mode=None, manual_pause=False, stop_sent=None, killed=False)
    acts.append(CancelPause())
    after = m.after_stop if m.phase is TrainerPhase.STOPPING else None
    if x.spawn_failed:
        # A missing program, cwd or user does not come back by retrying: one clear failure, no loop.
        return _enter(m, TrainerPhase.FAILED, x.now, f"{x.exit_reason}; fix the [[trainer]] "
                      f"and run `gpuwatch restart {cfg.name}`"), acts
    if after is None and code == 0:
        return _enter(m, TrainerPhase.FINISHED, x.now, "finished (exit 0)"), acts
    if after == "emergency":
        return _enter(m, TrainerPhase.STOPPED, x.now, "emergency stop; restarts when cool"
                      if cfg.restart_after_emergency else "emergency stop"), acts
    if after in ("restart", "max-pause"):
        return _enter(m, TrainerPhase.BACKOFF, x.now, "restarting", next_start=x.now, crashes=0
                      if m.run_progressed else m.crashes), acts
    crashes = 1 if m.run_progressed else m.crashes + 1
    what = {"hang": "hang", "gpu_reset": "GPU reset"}.get(after or "", f"crash ({m.last_exit_reason})")
    if crashes >= cfg.give_up_after_crashes:
        return _enter(m, TrainerPhase.FAILED, x.now,
                      f"failed: {crashes} crash(es) without progress, last {what}", crashes=crashes), acts
    if after == "gpu_reset":  # no backoff: it waits for its GPUs to answer again
        return _enter(m, TrainerPhase.BACKOFF, x.now, "GPU reset; restart once its GPUs answer", next_start=x.now,
                      crashes=crashes), acts
    delay = backoff_delay_s(cfg, crashes, x.jitter)
    m = replace(m, after_stop="hang" if after == "hang" else "crash")
    return _enter(m, TrainerPhase.BACKOFF, x.now, f"{what}; restart in {delay:.1f}s", next_start=x.now + delay,
                  crashes=crashes), acts


def _observe_progress(m: Machine, cfg: TrainerConfig, x: Inputs) -> Machine:
    progressed = real = False
    seen = m.heartbeat_seen or x.steps_total is not None
    if x.steps_total is not None and x.steps_total != m.seen_steps:
        progressed = real = m.seen_steps is not None or x.steps_total > 0
    if x.progress_mtime is not None and x.progress_mtime != m.seen_mtime:
        progressed = real = True
    if cfg.log_is_progress and x.log_bytes > m.seen_log_bytes:
        progressed = True
    if m.run_started is not None and x.now - m.run_started >= cfg.stable_after_s:
        real = True
    m = replace(m, heartbeat_seen=seen, seen_steps=x.steps_total if x.steps_total is not None else m.seen_steps,
                seen_mtime=x.progress_mtime if x.progress_mtime is not None else m.seen_mtime,
                seen_log_bytes=x.log_bytes)
    job = x.ranks.job if x.ranks else None
    if job is not None and job != m.seen_job:
        if m.seen_job is not None:  # the agent restarted its workers (--max-restarts): the run goes on
            counts = dict(m.restarts_by_reason)
            counts["torchrun"] = counts.get("torchrun", 0) + 1
            m = _note(replace(m, restarts_total=m.restarts_total + 1, restarts_by_reason=tuple(sorted(counts.items()))),
                      "workers restarted by torchrun")
        m = replace(m, seen_job=job)
    if progressed:
        m = replace(m, last_progress=x.now)
    if real and not m.run_progressed:
        m = replace(m, run_progressed=True, crashes=0)
    return m


def _describe(code: int | None) -> str:
    if code is None:
        return "unknown exit"
    if code < 0:
        return f"killed by signal {-code}"
    return f"exit {code}"


def _enter(m: Machine, phase: TrainerPhase, now: float, reason: str, **changes: Any) -> Machine:
    return _note(replace(m, phase=phase, since=now, reason=reason, **changes), reason)


def _note(m: Machine, event: str | None = None) -> Machine:
    return replace(m, events=m.events + (event or m.reason or "",))


_HANDLERS = {
    TrainerPhase.STARTING: _starting,
    TrainerPhase.RUNNING: _running,
    TrainerPhase.PAUSING: _pausing,
    TrainerPhase.PAUSED: _paused,
    TrainerPhase.STOPPING: _stopping,
    TrainerPhase.BACKOFF: _waiting,
    TrainerPhase.STOPPED: _waiting,
}
