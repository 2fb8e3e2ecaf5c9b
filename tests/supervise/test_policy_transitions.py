"""The supervisor's transitions as whole results: for a given machine and tick, the whole machine after it
(every field), the actions in order, and the event it logs, derived by hand from the rules in
gpuwatch/supervise/policy.py's docstring and docs/supervisor.md. test_policy.py follows scenarios through
several ticks; this table pins each branch's exact output, so a transition that forgets a field (a pause
start, a counter, a reason) or says the wrong thing fails here.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpuwatch.config.trainer import TrainerConfig
from gpuwatch.model import TrainerPhase as P
from gpuwatch.supervise.actions import (
    Abandon,
    Action,
    CancelPause,
    CollectEvidence,
    Freeze,
    Inputs,
    Kill,
    RequestPause,
    Spawn,
    Terminate,
    Thaw,
    Thermal,
)
from gpuwatch.supervise.machine import Machine
from gpuwatch.supervise.policy import step
from gpuwatch.supervise.ranks import RankView

CFG = TrainerConfig(name="t", command=["x"], debounce_s=2, max_pause_s=100, min_pause_s=5, grace_s=10,
                    gpu_reset_grace_s=3, stuck_after_s=20, pause_ack_timeout_s=5, hang_timeout_s=50,
                    give_up_after_crashes=3, stable_after_s=1000, log_is_progress=False,
                    backoff={"initial_s": 1, "max_s": 8, "jitter_ratio": 0.5})
NO_DEBOUNCE = CFG.model_copy(update={"debounce_s": 0.0})
UNBOUNDED = CFG.model_copy(update={"max_pause_s": None})
HOT = Thermal(hot=True, cool=False, reason="hot: junction")
RUNNING = Machine(phase=P.RUNNING, since=0, run_started=0, last_progress=0)
COOPERATIVE = Machine(phase=P.PAUSING, since=10, run_started=0, paused_since=10, pause_mode="cooperative",
                      heartbeat_seen=True, pauses_total=1)
SIGSTOPPED = Machine(phase=P.PAUSED, since=10, run_started=0, paused_since=10, pause_mode="sigstop", pauses_total=1)
HELD_REMOTELY = Machine(phase=P.PAUSED, since=4, run_started=0, pause_mode="remote", paused_since=4,
                        reason="paused by node-b: hot")


def ranks(held_by: str | None = None, held: int = 2, pg_timeout_s: float | None = None,
          backend: str | None = None) -> RankView:
    return RankView(ranks=2, ranks_seen=2, ranks_held=held, steps_total=None, steps_per_s=None, last_step_unix=None,
                    paused=held == 2, acknowledged=False, held_by=held_by, paused_by=held_by, job=None,
                    world_size=4, pg_timeout_s=pg_timeout_s, backend=backend)


def stopping(given: Machine, now: float, why: str, after: str) -> Machine:
    """What _stop makes of ``given``: TERM sent now, not killed, why it stops."""
    return replace(given, stop_sent=now, killed=False, after_stop=after, phase=P.STOPPING, since=now,  # type: ignore[arg-type]
                   reason=f"stopping: {why}")


def stop_actions(why: str) -> list[Action]:
    return [CancelPause(), Terminate(why)]


ABANDONED = "still there 20s after SIGKILL (stuck in the kernel): left behind"
SPAWN_FROM = Machine(phase=P.BACKOFF, since=1, run_started=0, last_progress=0, next_start=5, paused_since=3,
                     pause_mode="sigstop", manual_pause=True, crashes=1, hot_since=2, seen_steps=7, seen_mtime=1.5,
                     seen_log_bytes=10, seen_job="j1", run_progressed=True)

# (given, config, inputs) -> (the machine after, the actions, the events logged)
TRANSITIONS = [
    pytest.param(RUNNING, CFG, Inputs(now=10, alive=True, thermal=Thermal(hot=True, cool=False, critical=True)),
                 stopping(RUNNING, 10, "emergency", "emergency"), stop_actions("emergency"), ("stopping: emergency",),
                 id="crit-without-a-reason-stops-as-emergency"),
    pytest.param(Machine(phase=P.FINISHED, since=3, reason="finished (exit 0)"), CFG, Inputs(now=5),
                 Machine(phase=P.FINISHED, since=3, reason="finished (exit 0)"), [], (),
                 id="finished-stays"),
    pytest.param(Machine(phase=P.STOPPING, since=1, run_started=0, stop_sent=1, after_stop="hang"), CFG,
                 Inputs(now=2, alive=True, command="restart"),
                 Machine(phase=P.STOPPING, since=1, run_started=0, stop_sent=1, after_stop="restart"), [], (),
                 id="manual-restart-while-stopping-restarts-once-gone"),
    pytest.param(RUNNING, CFG, Inputs(now=3, alive=True, command="restart"),
                 stopping(RUNNING, 3, "manual restart", "restart"), stop_actions("manual restart"),
                 ("stopping: manual restart",), id="manual-restart-stops-a-live-run"),
    pytest.param(Machine(phase=P.FINISHED, since=3, crashes=2), CFG, Inputs(now=5, command="restart"),
                 Machine(phase=P.RUNNING, since=5, run_started=5, last_progress=5, restarts_total=1,
                         restarts_by_reason=(("manual", 1),), reason="restarted (manual)"),
                 [Spawn(resume=False)], ("restarted (manual)",), id="manual-restart-of-a-finished-run-starts-afresh"),
    pytest.param(Machine(phase=P.BACKOFF, since=3, next_start=9, after_stop="hang", crashes=2), CFG,
                 Inputs(now=5, command="restart"),
                 Machine(phase=P.RUNNING, since=5, run_started=5, last_progress=5, restarts_total=1,
                         restarts_by_reason=(("manual", 1),), reason="restarted (manual)"),
                 [Spawn(resume=True)], ("restarted (manual)",),
                 id="manual-restart-of-a-waiting-run-starts-now-from-its-checkpoint-with-no-crashes"),
    pytest.param(Machine(phase=P.STOPPED, since=3, after_stop="stop", manual_pause=True, pauses_total=1), CFG,
                 Inputs(now=5, command="restart"),
                 Machine(phase=P.PAUSED, since=5, run_started=5, last_progress=5, restarts_total=1,
                         restarts_by_reason=(("manual", 1),), paused_since=5, pause_mode="sigstop", manual_pause=True,
                         pauses_total=1, reason="restarted (manual), still paused: paused (SIGSTOP): manual pause"),
                 [Spawn(resume=True), Freeze()], ("restarted (manual), still paused: paused (SIGSTOP): manual pause",),
                 id="manual-restart-of-a-manually-paused-trainer-comes-back-held"),
    # `gpuwatch stop` (issue 38): a live run stops as any stop does and stays STOPPED; one not running at once.
    pytest.param(Machine(phase=P.STOPPING, since=1, run_started=0, stop_sent=1, after_stop="hang"), CFG,
                 Inputs(now=2, alive=True, command="stop"),
                 Machine(phase=P.STOPPING, since=1, run_started=0, stop_sent=1, after_stop="stop"), [], (),
                 id="manual-stop-while-stopping-stays-stopped-once-gone"),
    pytest.param(RUNNING, CFG, Inputs(now=3, alive=True, command="stop"),
                 stopping(RUNNING, 3, "manual stop", "stop"), stop_actions("manual stop"),
                 ("stopping: manual stop",), id="manual-stop-stops-a-live-run"),
    pytest.param(Machine(phase=P.BACKOFF, since=2, next_start=8, after_stop="hang", crashes=1), CFG,
                 Inputs(now=5, command="stop"),
                 Machine(phase=P.STOPPED, since=5, after_stop="stop", crashes=1,
                         reason="stopped; `gpuwatch restart t` starts it"), [],
                 ("stopped; `gpuwatch restart t` starts it",), id="manual-stop-of-a-waiting-run-is-at-once"),
    # A manual pause with no run to hold holds the next run from its start; a resume then lets it run.
    pytest.param(Machine(phase=P.BACKOFF, since=2, next_start=8), CFG, Inputs(now=5, command="pause"),
                 Machine(phase=P.BACKOFF, since=2, next_start=8, manual_pause=True, pauses_total=1), [],
                 ("paused: the next run starts held",), id="pause-between-runs-holds-the-next-run"),
    pytest.param(Machine(phase=P.BACKOFF, since=2, next_start=8, manual_pause=True, pauses_total=1), CFG,
                 Inputs(now=5, command="pause"),
                 Machine(phase=P.BACKOFF, since=2, next_start=8, manual_pause=True, pauses_total=1), [], (),
                 id="pause-between-runs-twice-is-one-pause"),
    pytest.param(Machine(phase=P.BACKOFF, since=2, next_start=8, manual_pause=True, pauses_total=1), CFG,
                 Inputs(now=5, command="resume"),
                 Machine(phase=P.BACKOFF, since=2, next_start=8, pauses_total=1, resumes_total=1), [],
                 ("resumed: the next run starts running",), id="resume-between-runs-lets-the-next-run-run"),
    pytest.param(Machine(phase=P.FINISHED, since=2), CFG, Inputs(now=5, command="pause"),
                 Machine(phase=P.FINISHED, since=2, manual_pause=True, pauses_total=1), [],
                 ("paused: the next run starts held",), id="pause-after-a-finished-run-holds-the-next-run"),
    pytest.param(Machine(), CFG, Inputs(now=7, command="pause"),
                 Machine(phase=P.PAUSED, since=7, run_started=7, last_progress=7, paused_since=7, pause_mode="sigstop",
                         manual_pause=True, pauses_total=1, reason="started: paused (SIGSTOP): manual pause"),
                 [Spawn(resume=False), Freeze()],
                 ("paused: the next run starts held", "started: paused (SIGSTOP): manual pause"),
                 id="pause-before-the-first-start-starts-it-held"),
    pytest.param(Machine(manual_pause=True, pauses_total=1), CFG.model_copy(update={"cooperative_pause": "always"}),
                 Inputs(now=7),
                 Machine(phase=P.PAUSING, since=7, run_started=7, last_progress=7, paused_since=7,
                         pause_mode="cooperative", manual_pause=True, pauses_total=1,
                         reason="started: pausing: manual pause"),
                 [Spawn(resume=False), RequestPause("manual pause")], ("started: pausing: manual pause",),
                 id="first-start-of-a-manually-paused-trainer-asks-it-to-hold"),
    pytest.param(Machine(), CFG, Inputs(now=1, gpus_ready=False, gpus_wait="GPU 0000:03:00.0 does not answer"),
                 Machine(reason="waiting to start: GPU 0000:03:00.0 does not answer"), [], (),
                 id="starting-waits-for-its-gpus"),
    pytest.param(Machine(), CFG, Inputs(now=1, thermal=HOT),
                 Machine(reason="waiting to start: hot: junction"), [], ("waiting to start: hot: junction",),
                 id="starting-waits-while-hot"),
    pytest.param(Machine(), CFG, Inputs(now=7),
                 Machine(phase=P.RUNNING, since=7, run_started=7, last_progress=7, reason="started"),
                 [Spawn(resume=False)], ("started",), id="starting-spawns"),
    pytest.param(RUNNING, CFG, Inputs(now=4, alive=True, ranks=ranks("node-b: hot")),
                 replace(RUNNING, pause_mode="remote", paused_since=4, phase=P.PAUSED, since=4,
                         reason="paused by node-b: hot"), [], ("paused by node-b: hot",),
                 id="running-held-by-another-node"),
    pytest.param(replace(RUNNING, last_progress=10, killed=True), CFG, Inputs(now=60, alive=True),
                 stopping(replace(RUNNING, last_progress=10), 60, "hang: no progress for 50s", "hang"),
                 [CollectEvidence("hang: no progress for 50s"), *stop_actions("hang: no progress for 50s")],
                 ("stopping: hang: no progress for 50s",), id="hang-after-hang_timeout_s"),
    pytest.param(replace(RUNNING, last_progress=10), CFG, Inputs(now=59.5, alive=True),
                 replace(RUNNING, last_progress=10), [], (), id="no-hang-before-hang_timeout_s"),
    pytest.param(replace(COOPERATIVE, hot_since=9.0), CFG, Inputs(now=15, alive=True),
                 replace(COOPERATIVE, paused_since=None, pause_mode=None, last_progress=15, resumes_total=1,
                         phase=P.RUNNING, since=15, reason="resumed"),
                 [CancelPause(), Thaw()], ("resumed",), id="pausing-resumes-when-cool-after-min_pause_s"),
    pytest.param(COOPERATIVE, CFG, Inputs(now=12, alive=True, thermal=HOT, heartbeat_paused=True),
                 replace(COOPERATIVE, phase=P.PAUSED, since=12, reason="paused at a step boundary"), [],
                 ("paused at a step boundary",), id="pausing-acknowledged"),
    pytest.param(COOPERATIVE, CFG, Inputs(now=110, alive=True, thermal=HOT),
                 stopping(COOPERATIVE, 110, "paused longer than 100s", "max-pause"),
                 stop_actions("paused longer than 100s"), ("stopping: paused longer than 100s",),
                 id="pausing-longer-than-max_pause_s"),
    pytest.param(COOPERATIVE, CFG, Inputs(now=15, alive=True, thermal=HOT, ranks=ranks(held=1)),
                 replace(COOPERATIVE, pause_mode="sigstop", phase=P.PAUSED, since=15,
                         reason="no pause acknowledgement from 1 of 2 ranks: SIGSTOP"), [Freeze()],
                 ("no pause acknowledgement from 1 of 2 ranks: SIGSTOP",), id="no-acknowledgement-from-ranks"),
    pytest.param(COOPERATIVE, CFG, Inputs(now=15, alive=True, thermal=HOT),
                 replace(COOPERATIVE, pause_mode="sigstop", phase=P.PAUSED, since=15,
                         reason="no pause acknowledgement: SIGSTOP"), [Freeze()],
                 ("no pause acknowledgement: SIGSTOP",), id="no-acknowledgement"),
    pytest.param(Machine(phase=P.STOPPING, since=0, run_started=0, stop_sent=0, after_stop="hang"), CFG,
                 Inputs(now=10, alive=True),
                 Machine(phase=P.STOPPING, since=0, run_started=0, stop_sent=0, after_stop="hang", killed=True),
                 [Kill("still running 10s after SIGTERM")], ("SIGKILL after 10s grace",), id="kill-after-grace_s"),
    pytest.param(Machine(phase=P.STOPPING, since=0, run_started=0, stop_sent=0, after_stop="gpu_reset"), CFG,
                 Inputs(now=3, alive=True),
                 Machine(phase=P.STOPPING, since=0, run_started=0, stop_sent=0, after_stop="gpu_reset", killed=True),
                 [Kill("still running 3s after SIGTERM")], ("SIGKILL after 3s grace",),
                 id="kill-after-gpu_reset_grace_s"),
    pytest.param(Machine(phase=P.STOPPING, since=0, run_started=0, stop_sent=0, after_stop="hang", killed=True), CFG,
                 Inputs(now=30, alive=True),
                 Machine(phase=P.BACKOFF, since=30, run_started=0, after_stop="hang", last_exit_code=None,
                         last_exit_reason=ABANDONED, next_start=31.0, crashes=1, reason="hang; restart in 1.0s"),
                 [Abandon(ABANDONED), CancelPause()], ("hang; restart in 1.0s",),
                 id="abandoned-after-stuck_after_s-counts-as-ended"),
    pytest.param(Machine(phase=P.STOPPED, since=2, after_stop="shutdown"), CFG, Inputs(now=5),
                 Machine(phase=P.STOPPED, since=2, after_stop="shutdown"), [], (),
                 id="stopped-by-the-daemon-stays-stopped"),
    pytest.param(Machine(phase=P.STOPPED, since=2, after_stop="emergency"),
                 CFG.model_copy(update={"restart_after_emergency": False}), Inputs(now=5),
                 Machine(phase=P.STOPPED, since=2, after_stop="emergency"), [], (),
                 id="emergency-stop-stays-without-restart_after_emergency"),
    pytest.param(Machine(phase=P.BACKOFF, since=2, next_start=3), CFG,
                 Inputs(now=5, gpus_ready=False, gpus_wait="GPU 0000:03:00.0 does not answer"),
                 Machine(phase=P.BACKOFF, since=2, next_start=3,
                         reason="waiting to restart: GPU 0000:03:00.0 does not answer"), [], (),
                 id="backoff-waits-for-its-gpus"),
    pytest.param(Machine(phase=P.BACKOFF, since=2, next_start=3), CFG, Inputs(now=5, thermal=HOT),
                 Machine(phase=P.BACKOFF, since=2, next_start=3, reason="waiting to restart: hot: junction"), [], (),
                 id="backoff-waits-while-hot"),
    pytest.param(Machine(phase=P.BACKOFF, since=2, next_start=3, after_stop="hang", crashes=1), CFG, Inputs(now=5),
                 Machine(phase=P.RUNNING, since=5, run_started=5, last_progress=5, crashes=1, restarts_total=1,
                         restarts_by_reason=(("hang", 1),), reason="restarted (hang)"),
                 [Spawn(resume=True)], ("restarted (hang)",), id="backoff-after-a-hang-restarts-as-hang"),
    pytest.param(replace(SPAWN_FROM, manual_pause=False), CFG, Inputs(now=5),
                 replace(SPAWN_FROM, run_started=5, last_progress=5, run_progressed=False, seen_log_bytes=0,
                         seen_steps=None, seen_mtime=None, hot_since=None, seen_job=None, restarts_total=1,
                         restarts_by_reason=(("crash", 1),), next_start=None, after_stop=None, paused_since=None,
                         pause_mode=None, manual_pause=False, phase=P.RUNNING, since=5, reason="restarted (crash)"),
                 [Spawn(resume=True)], ("restarted (crash)",), id="backoff-due-restarts-from-the-checkpoint"),
    # A manual pause lasts until `gpuwatch resume`, across a new run too (issue 38 point 2): held from its start.
    pytest.param(SPAWN_FROM, CFG, Inputs(now=5),
                 replace(SPAWN_FROM, run_started=5, last_progress=5, run_progressed=False, seen_log_bytes=0,
                         seen_steps=None, seen_mtime=None, hot_since=None, seen_job=None, restarts_total=1,
                         restarts_by_reason=(("crash", 1),), next_start=None, after_stop=None, paused_since=5,
                         pause_mode="sigstop", manual_pause=True, phase=P.PAUSED, since=5,
                         reason="restarted (crash), still paused: paused (SIGSTOP): manual pause"),
                 [Spawn(resume=True), Freeze()], ("restarted (crash), still paused: paused (SIGSTOP): manual pause",),
                 id="backoff-due-restarts-held-by-a-manual-pause"),
    pytest.param(HELD_REMOTELY, CFG, Inputs(now=9, alive=True),
                 replace(HELD_REMOTELY, paused_since=None, pause_mode=None, last_progress=9, phase=P.RUNNING,
                         since=9, reason="running again: no node asks for the pause"), [],
                 ("running again: no node asks for the pause",), id="remote-hold-released"),
    pytest.param(HELD_REMOTELY, CFG, Inputs(now=9, alive=True, ranks=ranks("node-c: hot")),
                 replace(HELD_REMOTELY, reason="paused by node-c: hot", last_progress=9), [], (),
                 id="remote-hold-is-not-a-hang"),
    pytest.param(RUNNING, NO_DEBOUNCE, Inputs(now=5, alive=True, thermal=Thermal(hot=True, cool=False)),
                 replace(RUNNING, paused_since=5, pauses_total=1, pause_mode="sigstop", phase=P.PAUSED, since=5,
                         reason="paused (SIGSTOP): hot"), [Freeze()], ("paused (SIGSTOP): hot",),
                 id="hot-without-debounce-pauses-at-once"),
    pytest.param(replace(RUNNING, hot_since=1), CFG, Inputs(now=3, alive=True, thermal=HOT),
                 replace(RUNNING, paused_since=3, pauses_total=1, pause_mode="sigstop", phase=P.PAUSED, since=3,
                         reason="paused (SIGSTOP): hot: junction"), [Freeze()],
                 ("paused (SIGSTOP): hot: junction",), id="hot-for-debounce_s-pauses"),
    pytest.param(replace(RUNNING, heartbeat_seen=True, hot_since=2), CFG, Inputs(now=3, alive=True, command="pause"),
                 replace(RUNNING, heartbeat_seen=True, paused_since=3, manual_pause=True, pauses_total=1,
                         pause_mode="cooperative", phase=P.PAUSING, since=3, reason="pausing: manual pause"),
                 [RequestPause("manual pause")], ("pausing: manual pause",), id="manual-pause-asks-the-trainer"),
    pytest.param(SIGSTOPPED, CFG, Inputs(now=15, alive=True),
                 replace(SIGSTOPPED, paused_since=None, pause_mode=None, last_progress=15, resumes_total=1,
                         phase=P.RUNNING, since=15, reason="resumed"), [CancelPause(), Thaw()], ("resumed",),
                 id="resume-at-min_pause_s-exactly"),
    pytest.param(replace(SIGSTOPPED, manual_pause=True, hot_since=10.5), CFG, Inputs(now=11, alive=True,
                                                                                   command="resume"),
                 replace(SIGSTOPPED, paused_since=None, pause_mode=None, last_progress=11, resumes_total=1,
                         phase=P.RUNNING, since=11, reason="resumed"), [CancelPause(), Thaw()], ("resumed",),
                 id="manual-resume"),
    pytest.param(replace(SIGSTOPPED, paused_since=0), UNBOUNDED, Inputs(now=540, alive=True, thermal=HOT),
                 stopping(replace(SIGSTOPPED, paused_since=0), 540, "paused longer than 540s", "max-pause"),
                 stop_actions("paused longer than 540s"), ("stopping: paused longer than 540s",),
                 id="sigstop-of-an-unknown-job-is-bounded"),
    pytest.param(replace(SIGSTOPPED, paused_since=0, heartbeat_seen=True), UNBOUNDED,
                 Inputs(now=540, alive=True, thermal=HOT),
                 replace(SIGSTOPPED, paused_since=0, heartbeat_seen=True), [], (),
                 id="sigstop-of-a-known-local-job-is-not"),
    pytest.param(replace(SIGSTOPPED, paused_since=0, heartbeat_seen=True), UNBOUNDED,
                 Inputs(now=90, alive=True, thermal=HOT, ranks=ranks(pg_timeout_s=100, backend="nccl")),
                 stopping(replace(SIGSTOPPED, paused_since=0, heartbeat_seen=True), 90, "paused longer than 90s",
                          "max-pause"),
                 stop_actions("paused longer than 90s"), ("stopping: paused longer than 90s",),
                 id="sigstop-of-an-nccl-job-within-its-timeout"),
    pytest.param(RUNNING, CFG, Inputs(now=9, exit_code=-15, exit_reason="killed by SIGTERM", shutdown=True),
                 replace(RUNNING, last_exit_code=-15, last_exit_reason="killed by SIGTERM", after_stop="shutdown",
                         phase=P.STOPPED, since=9, reason="stopped: daemon stopping"), [],
                 ("stopped: daemon stopping",), id="shutdown-records-how-the-run-ended"),
    pytest.param(Machine(phase=P.BACKOFF, since=3, next_start=8), CFG, Inputs(now=9, shutdown=True),
                 Machine(phase=P.STOPPED, since=9, next_start=8, after_stop="shutdown",
                         reason="stopped: daemon stopping"), [], ("stopped: daemon stopping",),
                 id="shutdown-stops-a-waiting-trainer"),
    pytest.param(Machine(phase=P.STOPPED, since=5, after_stop="shutdown", reason="stopped: daemon stopping"), CFG,
                 Inputs(now=9, shutdown=True),
                 Machine(phase=P.STOPPED, since=5, after_stop="shutdown", reason="stopped: daemon stopping"), [], (),
                 id="shutdown-once"),
]


@pytest.mark.parametrize("given, config, inputs, after, actions, events", TRANSITIONS)
def test_transition(given: Machine, config: TrainerConfig, inputs: Inputs, after: Machine, actions: list[Action],
                    events: tuple[str, ...]) -> None:
    machine, done = step(given, config, inputs)
    assert machine == after
    assert done == actions
    assert machine.events == events
