"""One test per transition of the supervisor state machine (pure: no processes, no clock)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpuwatch.config.cooling import PowerConfig, ThermalConfig
from gpuwatch.config.trainer import TrainerConfig
from gpuwatch.model import FanMode, FanState, GpuReading, PowerMode, PowerState, Snapshot, TempReading
from gpuwatch.model import TrainerPhase as P
from gpuwatch.supervise.actions import (
    CancelPause,
    CollectEvidence,
    Freeze,
    Heat,
    Inputs,
    Kill,
    RequestPause,
    Spawn,
    Terminate,
    Thaw,
    Thermal,
    combined_verdict,
    pause_limit_s,
    thermal_verdict,
)
from gpuwatch.supervise.exits import backoff_delay_s
from gpuwatch.supervise.machine import Machine
from gpuwatch.supervise.policy import step
from gpuwatch.supervise.ranks import RankView

CFG = TrainerConfig(name="t", command=["x"], debounce_s=2, max_pause_s=100, min_pause_s=0, grace_s=10,
                    pause_ack_timeout_s=5, hang_timeout_s=50, give_up_after_crashes=3, stable_after_s=1000,
                    backoff={"initial_s": 1, "max_s": 8, "jitter_ratio": 0.5})
HOT = Thermal(hot=True, cool=False, reason="hot: junction")
WARM = Thermal(hot=False, cool=False)
CRIT = Thermal(hot=True, cool=False, critical=True, reason="emergency: crit")
BACKSTOP_S = PowerConfig().pause_backstop_s  # its one default, in the config


def running(**kw: object) -> Machine:
    base = Machine(phase=P.RUNNING, since=0, run_started=0, last_progress=0)
    return replace(base, **kw)  # type: ignore[arg-type]


def test_starting_spawns() -> None:
    m, acts = step(Machine(), CFG, Inputs(now=0))
    assert m.phase is P.RUNNING and acts == [Spawn(resume=False)]


def test_starting_waits_while_hot() -> None:
    m, acts = step(Machine(), CFG, Inputs(now=0, thermal=HOT))
    assert m.phase is P.STARTING and acts == []


def test_hot_is_debounced_then_sigstop_without_heartbeat() -> None:
    m, acts = step(running(), CFG, Inputs(now=1, alive=True, thermal=HOT))
    assert m.phase is P.RUNNING and acts == [] and m.hot_since == 1
    m, acts = step(m, CFG, Inputs(now=3, alive=True, thermal=HOT))
    assert m.phase is P.PAUSED and acts == [Freeze()] and m.pause_mode == "sigstop" and m.pauses_total == 1


def test_short_spike_does_not_pause() -> None:
    m, _ = step(running(), CFG, Inputs(now=1, alive=True, thermal=HOT))
    m, _ = step(m, CFG, Inputs(now=2, alive=True))
    m, acts = step(m, CFG, Inputs(now=3.5, alive=True, thermal=HOT))
    assert m.phase is P.RUNNING and acts == []


def test_hot_with_heartbeat_pauses_cooperatively_then_ack() -> None:
    m = running(heartbeat_seen=True, hot_since=0)
    m, acts = step(m, CFG, Inputs(now=3, alive=True, thermal=HOT, steps_total=5))
    assert m.phase is P.PAUSING and acts == [RequestPause("hot: junction")]
    m, acts = step(m, CFG, Inputs(now=4, alive=True, thermal=HOT, steps_total=6, heartbeat_paused=True))
    assert m.phase is P.PAUSED and acts == [] and m.pause_mode == "cooperative"


def test_pausing_without_ack_falls_back_to_sigstop() -> None:
    m = running(phase=P.PAUSING, since=10, paused_since=10, pause_mode="cooperative", heartbeat_seen=True)
    m, acts = step(m, CFG, Inputs(now=15, alive=True, thermal=HOT))
    assert m.phase is P.PAUSED and acts == [Freeze()] and m.pause_mode == "sigstop"


def test_always_cooperative_never_sigstops() -> None:
    cfg = CFG.model_copy(update={"cooperative_pause": "always"})
    m = running(hot_since=0)
    m, acts = step(m, cfg, Inputs(now=3, alive=True, thermal=HOT))
    assert acts == [RequestPause("hot: junction")]
    m, acts = step(m, cfg, Inputs(now=30, alive=True, thermal=HOT))
    assert m.phase is P.PAUSING and acts == []


def test_never_cooperative_sigstops_even_with_heartbeat() -> None:
    cfg = CFG.model_copy(update={"cooperative_pause": "never"})
    m, acts = step(running(heartbeat_seen=True, hot_since=0), cfg, Inputs(now=3, alive=True, thermal=HOT))
    assert acts == [Freeze()]


def test_resume_needs_hysteresis() -> None:
    m = running(phase=P.PAUSED, paused_since=0, pause_mode="sigstop")
    m, acts = step(m, CFG, Inputs(now=5, alive=True, thermal=WARM))
    assert m.phase is P.PAUSED and acts == []
    m, acts = step(m, CFG, Inputs(now=6, alive=True))
    assert m.phase is P.RUNNING and acts == [CancelPause(), Thaw()] and m.resumes_total == 1 and m.last_progress == 6


def test_manual_pause_holds_until_manual_resume() -> None:
    m, acts = step(running(), CFG, Inputs(now=1, alive=True, command="pause"))
    assert m.phase is P.PAUSED and m.manual_pause and acts == [Freeze()]
    m, acts = step(m, CFG, Inputs(now=2, alive=True))
    assert m.phase is P.PAUSED
    m, acts = step(m, CFG, Inputs(now=3, alive=True, command="resume"))
    assert m.phase is P.RUNNING and Thaw() in acts


def test_max_pause_stops_then_restarts_immediately_when_cool() -> None:
    m = running(phase=P.PAUSED, paused_since=0, pause_mode="sigstop")
    m, acts = step(m, CFG, Inputs(now=100, alive=True, thermal=HOT))
    assert m.phase is P.STOPPING and acts == [CancelPause(), Terminate("paused longer than 100s")]
    m, acts = step(m, CFG, Inputs(now=101, alive=False, exit_code=-15))
    assert m.phase is P.BACKOFF and m.next_start == 101
    m, acts = step(m, CFG, Inputs(now=102, thermal=HOT))
    assert m.phase is P.BACKOFF and acts == []
    m, acts = step(m, CFG, Inputs(now=103))
    assert m.phase is P.RUNNING and acts == [Spawn(resume=True)] and dict(m.restarts_by_reason) == {"max-pause": 1}


def test_critical_stops_from_running_and_restarts_when_cool() -> None:
    m, acts = step(running(), CFG, Inputs(now=1, alive=True, thermal=CRIT))
    assert m.phase is P.STOPPING and Terminate("emergency: crit") in acts
    m, _ = step(m, CFG, Inputs(now=2, alive=False, exit_code=0))
    assert m.phase is P.STOPPED
    m, acts = step(m, CFG, Inputs(now=3, thermal=HOT))
    assert acts == []
    m, acts = step(m, CFG, Inputs(now=4))
    assert acts == [Spawn(resume=True)] and dict(m.restarts_by_reason) == {"emergency": 1}


def test_critical_while_paused_stops() -> None:
    m = running(phase=P.PAUSED, paused_since=0, pause_mode="sigstop")
    m, acts = step(m, CFG, Inputs(now=1, alive=True, thermal=CRIT))
    assert m.phase is P.STOPPING and isinstance(acts[-1], Terminate)


def test_grace_then_kill() -> None:
    m = running(phase=P.STOPPING, stop_sent=0, after_stop="restart")
    m, acts = step(m, CFG, Inputs(now=9, alive=True))
    assert acts == []
    m, acts = step(m, CFG, Inputs(now=10, alive=True))
    assert acts == [Kill("still running 10s after SIGTERM")] and m.killed
    m, acts = step(m, CFG, Inputs(now=11, alive=True))
    assert acts == []


def test_exit_zero_is_finished() -> None:
    m, acts = step(running(), CFG, Inputs(now=5, alive=False, exit_code=0))
    assert m.phase is P.FINISHED and m.last_exit_code == 0


def test_crash_backs_off_exponentially_and_gives_up() -> None:
    m = running()
    delays = []
    for i in range(3):
        m, _ = step(m, CFG, Inputs(now=10 * i, alive=False, exit_code=1))
        if m.phase is P.FAILED:
            break
        assert m.phase is P.BACKOFF
        delays.append(m.next_start - 10 * i)  # type: ignore[operator]
        m, acts = step(m, CFG, Inputs(now=m.next_start))  # type: ignore[arg-type]
        assert acts == [Spawn(resume=True)]
    assert delays == [1, 2] and m.phase is P.FAILED and m.crashes == 3 and "without progress" in (m.reason or "")


def test_progress_resets_crash_count() -> None:
    m = running(crashes=2)
    m, _ = step(m, CFG, Inputs(now=1, alive=True, steps_total=1))
    m, _ = step(m, CFG, Inputs(now=2, alive=True, steps_total=2))
    assert m.run_progressed and m.crashes == 0
    m, _ = step(m, CFG, Inputs(now=3, alive=False, exit_code=1))
    assert m.phase is P.BACKOFF and m.crashes == 1


def test_log_output_is_not_real_progress_but_defers_hang() -> None:
    m, _ = step(running(crashes=2), CFG, Inputs(now=40, alive=True, log_bytes=100))
    assert m.last_progress == 40 and not m.run_progressed and m.crashes == 2


def test_hang_collects_evidence_and_restarts() -> None:
    m, acts = step(running(), CFG, Inputs(now=50, alive=True))
    assert m.phase is P.STOPPING and isinstance(acts[0], CollectEvidence) and isinstance(acts[-1], Terminate)
    m, _ = step(m, CFG, Inputs(now=51, alive=False, exit_code=-15))
    assert m.phase is P.BACKOFF and m.crashes == 1
    m, acts = step(m, CFG, Inputs(now=60))
    assert dict(m.restarts_by_reason) == {"hang": 1}


def test_no_hang_while_paused() -> None:
    m = running(phase=P.PAUSED, paused_since=0, pause_mode="sigstop", manual_pause=True)
    m, acts = step(m, CFG, Inputs(now=90, alive=True))
    assert m.phase is P.PAUSED and acts == []


def test_manual_restart_of_running_and_failed() -> None:
    m, acts = step(running(), CFG, Inputs(now=1, alive=True, command="restart"))
    assert m.phase is P.STOPPING and m.after_stop == "restart"
    m, _ = step(m, CFG, Inputs(now=2, alive=False, exit_code=0))
    assert m.phase is P.BACKOFF
    failed = Machine(phase=P.FAILED, crashes=3)
    m, acts = step(failed, CFG, Inputs(now=3, command="restart"))
    assert m.phase is P.RUNNING and m.crashes == 0 and acts == [Spawn(resume=True)]


def test_shutdown_while_paused_terminates_and_stops() -> None:
    m = running(phase=P.PAUSED, paused_since=0, pause_mode="sigstop")
    m, acts = step(m, CFG, Inputs(now=1, alive=True, shutdown=True))
    assert m.phase is P.STOPPING and acts == [CancelPause(), Terminate("daemon stopping")]
    m, acts = step(m, CFG, Inputs(now=2, alive=False, exit_code=0, shutdown=True))
    assert m.phase is P.STOPPED and acts == []


@pytest.mark.parametrize(
    "stop_sent, now, killed",
    [
        (None, 5, False),  # TERM just sent by the shutdown itself: nothing more yet
        (0, 9.9, False),  # within its grace_s = 10
        (0, 10, True),  # its own grace is over: KILL now, not at the supervisor's backstop
    ],
)
def test_shutdown_holds_each_trainer_to_its_own_grace(stop_sent: float | None, now: float, killed: bool) -> None:
    m = running()
    if stop_sent is None:
        m, acts = step(m, CFG, Inputs(now=now, alive=True, shutdown=True))
        assert acts == [CancelPause(), Terminate("daemon stopping")]
    else:
        m = replace(m, phase=P.STOPPING, stop_sent=stop_sent, after_stop="hang")  # stopping before the shutdown
        m, acts = step(m, CFG, Inputs(now=now, alive=True, shutdown=True))
        assert acts == ([Kill("still running 10s after SIGTERM")] if killed else [])
    assert m.phase is P.STOPPING and m.after_stop == ("shutdown" if stop_sent is None else "hang")
    assert m.killed is killed
    m, acts = step(m, CFG, Inputs(now=now + 1, alive=True, shutdown=True))
    assert acts == ([] if killed or now + 1 < 10 else [Kill("still running 10s after SIGTERM")])


def test_shutdown_in_backoff_stops_without_spawning() -> None:
    m, acts = step(Machine(phase=P.BACKOFF, next_start=0), CFG, Inputs(now=5, shutdown=True))
    assert m.phase is P.STOPPED and acts == []


@pytest.mark.parametrize("crashes, jitter, expected",
                         [(1, 0, 1), (2, 0, 2), (3, 0, 4), (9, 0, 8), (1, 1, 1.5), (1, -1, 0.5)])
def test_backoff_delay(crashes: int, jitter: float, expected: float) -> None:
    assert backoff_delay_s(CFG, crashes, jitter) == pytest.approx(expected)


def _gpu(gpu_id: str, junction_c: float) -> GpuReading:
    return GpuReading(gpu_id=gpu_id, card="card0", backend="amdgpu",
                      temps=(TempReading("junction", junction_c, crit_c=110.0),))


@pytest.mark.parametrize("temp_c, hot, cool, critical", [(80, False, True, False), (97, False, False, False),
                                                         (100, True, False, False), (110, True, False, True)])
def test_thermal_verdict_uses_card_crit(temp_c: float, hot: bool, cool: bool, critical: bool) -> None:
    snap = Snapshot(0, 0, (_gpu("0000:03:00.0", temp_c), _gpu("0000:04:00.0", 20)))
    v = thermal_verdict(snap, ("0000:03:00.0",), ThermalConfig(), (), (), BACKSTOP_S)
    assert (v.hot, v.cool, v.critical) == (hot, cool, critical)
    other = thermal_verdict(snap, ("0000:04:00.0",), ThermalConfig(), (), (), BACKSTOP_S)
    assert not other.hot


@pytest.mark.parametrize("gpus", [(), ("a",), ("b", "c"), ("c",), ("x",)])
def test_a_verdict_from_shares_computed_once_is_the_verdict(gpus: tuple[str, ...]) -> None:
    """The supervisor's readers share one ``Heat`` per tick: the verdict it gives is thermal_verdict's, and a
    GPU's share under one set of limits is computed once whoever asks for it."""
    snap = Snapshot(0, 0, (_gpu("a", 50), _gpu("b", 97), _gpu("c", 110)))
    fans = (FanState(gpu_id="a", backend="pwm1", mode=FanMode.FAILSAFE),)
    powers = (_power("b", False),)
    heat = Heat(snap)
    for thermal in (ThermalConfig(), ThermalConfig(junction_limit_c=90, hysteresis_c=10)):
        first = heat.of(gpus, thermal)
        assert combined_verdict(first, fans, powers, BACKSTOP_S) == thermal_verdict(
            snap, gpus, thermal, fans, powers, BACKSTOP_S)
        assert all(x is y for x, y in zip(first, heat.of(gpus, thermal), strict=True))
        assert all(x is y for x, y in zip(heat.of((), thermal), heat.of((), thermal.model_copy()), strict=True))


def test_fan_failsafe_is_critical_only_for_own_gpus() -> None:
    snap = Snapshot(0, 0, (_gpu("a", 50), _gpu("b", 50)))
    fans = (FanState(gpu_id="b", backend="pwm1", mode=FanMode.FAILSAFE),)
    assert thermal_verdict(snap, ("b",), ThermalConfig(), fans, (), BACKSTOP_S).critical
    assert not thermal_verdict(snap, ("a",), ThermalConfig(), fans, (), BACKSTOP_S).critical


def test_governed_hot_gpu_waits_for_the_backstop_then_pauses() -> None:
    """While the power governor still lowers the cap, the pause waits: the cap, not a stop, holds the limit."""
    governed = replace(HOT, governed_backstop_s=60.0)
    m, _ = step(running(), CFG, Inputs(now=1, alive=True, thermal=governed))
    m, acts = step(m, CFG, Inputs(now=30, alive=True, thermal=governed))  # well past debounce_s (2 s)
    assert m.phase is P.RUNNING and acts == []
    m, acts = step(m, CFG, Inputs(now=61, alive=True, thermal=governed))  # the safety net
    assert m.phase is P.PAUSED and acts == [Freeze()]


def test_governor_at_its_floor_lets_the_debounced_pause_through() -> None:
    m, _ = step(running(), CFG, Inputs(now=1, alive=True, thermal=replace(HOT, governed_backstop_s=60.0)))
    m, acts = step(m, CFG, Inputs(now=20, alive=True, thermal=HOT))  # at the floor: hot for 19 s already
    assert m.phase is P.PAUSED and acts == [Freeze()]


def test_crit_stops_at_once_even_when_governed() -> None:
    m, acts = step(running(), CFG, Inputs(now=1, alive=True, thermal=replace(CRIT, governed_backstop_s=60.0)))
    assert m.phase is P.STOPPING and any(isinstance(a, Terminate) for a in acts)


def _power(gpu_id: str, pause_allowed: bool) -> PowerState:
    return PowerState(gpu_id=gpu_id, mode=PowerMode.GOVERNING if not pause_allowed else PowerMode.FLOOR,
                      pause_allowed=pause_allowed)


@pytest.mark.parametrize(
    "powers, governed",
    [
        ((), False),  # no governor: pause as always
        ((_power("a", False),), True),  # held above its floor
        ((_power("a", True),), False),  # at the floor (or idle, unavailable, dry-run)
        ((_power("a", False), _power("b", True)), False),  # b is hot too and not held
        ((_power("b", False),), False),  # the governor holds another GPU
    ],
)
def test_thermal_verdict_is_governed_only_when_every_hot_gpu_is_held(powers: tuple[PowerState, ...],
                                                                     governed: bool) -> None:
    snap = Snapshot(0, 0, (_gpu("a", 101), _gpu("b", 101 if len(powers) == 2 else 50)))
    v = thermal_verdict(snap, (), ThermalConfig(), (), powers, backstop_s=45.0)
    assert v.hot and v.governed_backstop_s == (45.0 if governed else None)
    assert ("governed" in (v.reason or "")) is governed


def test_paused_stays_paused_for_min_pause_s_even_when_cool() -> None:
    cfg = CFG.model_copy(update={"min_pause_s": 30})
    m = Machine(phase=P.PAUSED, since=100, paused_since=100, pause_mode="sigstop", run_started=0)
    held, acts = step(m, cfg, Inputs(now=110, thermal=Thermal(), alive=True))
    assert held.phase is P.PAUSED and acts == []
    resumed, acts = step(m, cfg, Inputs(now=131, thermal=Thermal(), alive=True))
    assert resumed.phase is P.RUNNING and Thaw() in acts
    manual, _ = step(m, cfg, Inputs(now=101, thermal=Thermal(), alive=True, command="resume"))
    assert manual.phase is P.RUNNING


# ---- a distributed job's ranks ---------------------------------------------------------------------
def ranks(held: int = 0, of: int = 2, held_by: str | None = None, job: str = "j1", **kw: object) -> RankView:
    base = RankView(ranks=of, ranks_seen=of, ranks_held=held, steps_total=10, steps_per_s=None, last_step_unix=None,
                    paused=held == of, acknowledged=held == of and held_by is None, held_by=held_by, paused_by=held_by,
                    job=job, world_size=of, pg_timeout_s=60.0, backend="gloo")
    return replace(base, **kw)  # type: ignore[arg-type]


def test_job_is_paused_only_when_every_rank_holds_then_sigstop_names_the_missing() -> None:
    m = running(heartbeat_seen=True, hot_since=0, seen_job="j1")
    m, _ = step(m, CFG, Inputs(now=3, alive=True, thermal=HOT, ranks=ranks(0)))
    m, acts = step(m, CFG, Inputs(now=4, alive=True, thermal=HOT, ranks=ranks(1)))
    assert m.phase is P.PAUSING and acts == []
    done, _ = step(m, CFG, Inputs(now=5, alive=True, thermal=HOT, heartbeat_paused=True, ranks=ranks(2)))
    assert done.phase is P.PAUSED and done.reason == "paused at a step boundary"
    m, acts = step(m, CFG, Inputs(now=8, alive=True, thermal=HOT, ranks=ranks(1)))
    assert m.phase is P.PAUSED and acts == [Freeze()]
    assert m.reason == "no pause acknowledgement from 1 of 2 ranks: SIGSTOP"


def test_held_by_another_node_is_paused_here_not_counted_not_a_hang_and_ends_with_it() -> None:
    m = running(heartbeat_seen=True, seen_job="j1")
    remote = ranks(2, held_by="node-b: hot: junction 101°C")
    m, acts = step(m, CFG, Inputs(now=10, alive=True, heartbeat_paused=True, ranks=remote))
    assert m.phase is P.PAUSED and m.pause_mode == "remote" and acts == [] and m.pauses_total == 0
    assert m.reason == "paused by node-b: hot: junction 101°C"
    m, acts = step(m, CFG, Inputs(now=500, alive=True, heartbeat_paused=True, ranks=remote, command="resume"))
    assert m.phase is P.PAUSED and acts == [] and m.events == ("not resumed: paused by node-b: hot: junction 101°C "
                                                               "(resume it there)",)
    m, acts = step(m, CFG, Inputs(now=501, alive=True, ranks=ranks(0)))  # long past hang_timeout_s and max_pause_s
    assert m.phase is P.RUNNING and acts == [] and m.resumes_total == 0 and m.last_progress == 501


def test_this_node_heats_up_while_held_by_another() -> None:
    remote = ranks(2, held_by="node-b: hot")
    m, _ = step(running(heartbeat_seen=True, seen_job="j1"), CFG,
                Inputs(now=1, alive=True, heartbeat_paused=True, ranks=remote))
    m, acts = step(m, CFG, Inputs(now=2, alive=True, thermal=HOT, heartbeat_paused=True, ranks=remote))
    assert m.phase is P.PAUSED and acts == []  # debounced
    m, acts = step(m, CFG, Inputs(now=4, alive=True, thermal=HOT, heartbeat_paused=True, ranks=remote))
    assert m.phase is P.PAUSING and acts == [RequestPause("hot: junction")] and m.pauses_total == 1
    m, _ = step(m, CFG, Inputs(now=5, alive=True, thermal=HOT, heartbeat_paused=True, ranks=ranks(2)))
    assert m.phase is P.PAUSED and m.pause_mode == "cooperative"


def test_workers_restarted_by_torchrun_count_as_a_restart_of_the_run() -> None:
    m, _ = step(running(heartbeat_seen=True), CFG, Inputs(now=1, alive=True, ranks=ranks(job="j1")))
    assert m.seen_job == "j1" and m.restarts_total == 0
    m, acts = step(m, CFG, Inputs(now=2, alive=True, ranks=ranks(job="j2")))
    assert m.phase is P.RUNNING and acts == [] and m.restarts_by_reason == (("torchrun", 1),)
    assert m.restarts_total == 1 and "workers restarted by torchrun" in m.events


@pytest.mark.parametrize("max_pause_s, mode, seen, view, expect", [
    (None, "cooperative", True, ranks(2), None),  # nothing in flight: no bound
    (3600.0, "cooperative", True, ranks(2), 3600.0),  # the user's own bound
    (None, "remote", True, ranks(2), None),  # the other node's to bound
    (None, "sigstop", True, ranks(1), None),  # one node, gloo: everything stops and resumes together
    (None, "sigstop", True, ranks(1, backend="nccl"), 54.0),  # NCCL: below its timeout (60 s)
    (None, "sigstop", True, ranks(1, of=1, world_size=2), 54.0),  # spans nodes: the other node waits
    (30.0, "sigstop", True, ranks(1, backend="nccl"), 30.0),
    (None, "sigstop", False, None, 540.0),  # never heartbeat: maybe NCCL with its 600 s default
    (None, "sigstop", True, None, None),  # a single process
])
def test_pause_limit(max_pause_s: float | None, mode: str, seen: bool, view: RankView | None,
                     expect: float | None) -> None:
    assert pause_limit_s(max_pause_s, mode, seen, view) == expect  # type: ignore[arg-type]


# ---- restarts: each start after the first is counted once, by its reason --------------------------
EARLIER = (("crash", 2),)


def waiting(phase: P, after: str) -> Machine:
    return Machine(phase=phase, after_stop=after, next_start=0, restarts_total=2,  # type: ignore[arg-type]
                   restarts_by_reason=EARLIER)


@pytest.mark.parametrize("machine, inputs, acts_expected, by_reason", [
    (waiting(P.BACKOFF, "crash"), Inputs(now=1), [Spawn(resume=True)], (("crash", 3),)),
    (waiting(P.BACKOFF, "hang"), Inputs(now=1), [Spawn(resume=True)], (("crash", 2), ("hang", 1))),
    (waiting(P.BACKOFF, "restart"), Inputs(now=1), [Spawn(resume=True)], (("crash", 2), ("restart", 1))),
    (waiting(P.BACKOFF, "max-pause"), Inputs(now=1), [Spawn(resume=True)], (("crash", 2), ("max-pause", 1))),
    (waiting(P.BACKOFF, "gpu_reset"), Inputs(now=1), [Spawn(resume=True)], (("crash", 2), ("gpu_reset", 1))),
    (waiting(P.STOPPED, "emergency"), Inputs(now=1), [Spawn(resume=True)], (("crash", 2), ("emergency", 1))),
    # `gpuwatch restart`: a failed run resumes from its checkpoint, a finished one starts afresh
    (replace(waiting(P.FAILED, "crash"), crashes=3), Inputs(now=1, command="restart"), [Spawn(resume=True)],
     (("crash", 2), ("manual", 1))),
    (waiting(P.FINISHED, "crash"), Inputs(now=1, command="restart"), [Spawn(resume=False)],
     (("crash", 2), ("manual", 1))),
    # torchrun restarted the job's workers: the same run goes on, nothing is spawned
    (running(seen_job="j1", restarts_total=2, restarts_by_reason=EARLIER),
     Inputs(now=1, alive=True, ranks=ranks(job="j2")), [], (("crash", 2), ("torchrun", 1))),
])
def test_each_restart_is_counted_once_by_reason(machine: Machine, inputs: Inputs, acts_expected: list[object],
                                                by_reason: tuple[tuple[str, int], ...]) -> None:
    m, acts = step(machine, CFG, inputs)
    assert m.phase is P.RUNNING and acts == acts_expected
    assert m.restarts_total == 3 and m.restarts_by_reason == by_reason
    assert m.crashes == (machine.crashes if inputs.command != "restart" else 0)
