"""The live page's summary (publish/live.py): values from the published state, the ladder's rung, and no
field that the status document redacts for remote clients."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from gpuwatch.config.cooling import FanConfig
from gpuwatch.model import FanMode, FanState, PowerMode, PowerState, PublishedState, TrainerPhase
from gpuwatch.publish.live import (
    HISTORY_FAN_KEYS,
    HISTORY_GPU_KEYS,
    HISTORY_POWER_KEYS,
    Level,
    history_part,
    ladder_rung,
    ladder_rungs,
    redacted,
    rung_of,
    summary,
    temp_level,
    worst,
)
from tests.support.published import GPU_A, GPU_B, GPU_GONE, example_state, with_rungs


@pytest.fixture(scope="module")
def example(tmp_path_factory: pytest.TempPathFactory) -> PublishedState:
    return example_state(tmp_path_factory.mktemp("sys"))


def test_each_gpu_against_its_limits_curve_and_cap(example: PublishedState) -> None:
    s = summary(example, FanConfig())
    assert s["tick"] == 7200 and s["interval_s"] == 1.0 and s["failures"] == ["fan controller: OSError: [Errno 5] EIO"]
    a, b, gone = s["gpus"]
    reading = example.snapshot.gpu(GPU_A)
    junction = next(t for t in a["temps"] if t["label"] == "junction")
    assert junction["temp_c"] == round(reading.temp("junction").temp_c)
    assert junction["limit_c"] == example.limit_c(GPU_A, "junction")
    assert a["fan"] | {"curve": None} == {"mode": "curve", "duty_pct": round(reading.fan_duty * 100),
                                          "target_pct": 40.0, "rpm": 1450, "sensor": "junction",
                                          "sensor_temp_c": 61.0, "stalled": False, "message": None, "curve": None}
    assert a["fan"]["curve"] == [list(p) for p in FanConfig().curve]
    assert a["power"] == {"w": round(reading.power_w), "cap_w": 245.0, "original_cap_w": 289.0,
                          "floor_cap_w": 174.0, "mode": "governing", "reason": None}
    # The cap governs GPU A and the clock rung holds a ceiling above it (issue 36): the rung in use is the clock.
    assert a["rung"] == "clock" and a["state"] == "up" and a["resets_total"] == 0
    assert a["vram_total_bytes"] == reading.vram_total_bytes
    # GPU B: its fan in failsafe, recovering from its second reset, and bert held on it.
    assert b["state"] == "recovering" and b["resets_total"] == 2 and b["fan"]["mode"] == "failsafe"
    assert b["fan"]["message"] == "junction unreadable: failsafe" and b["rung"] == "pause"
    assert gone["id"] == GPU_GONE and gone["state"] == "down" and gone["temps"] == [] and gone["fan"]["curve"] == []


def test_each_run_its_state_rate_gpus_energy_and_why(example: PublishedState) -> None:
    resnet, bert, vit = summary(example, FanConfig())["runs"]
    assert resnet == {"name": "resnet", "origin": "configured", "phase": "running", "steps_per_s": 4.5,
                      "steps_total": 12345, "gpus": [GPU_A, GPU_B], "run_energy_kj": 1800.0,
                      "energy_total_kj": 2500.0, "steps_per_kj": 4.5, "why": None,
                      "paused_since_unix": None, "restarts_total": 2, "pauses_total": 3}
    assert bert["phase"] == "paused" and bert["why"] == "box3: hot: junction 101°C >= 100°C"
    assert vit["phase"] == "backoff" and vit["gpus"] == [] and vit["why"] == "exit code 1"


@pytest.mark.parametrize(("code", "why"), [
    (1, "exit code 1"), (-9, "killed by signal 9"),
    (None, "ended without an exit code (see gpuwatch status on the box)"),
])
def test_a_failed_run_says_its_exit_never_its_spawn_error(example: PublishedState, code: int | None,
                                                          why: str) -> None:
    """A failed spawn's reason names the program (a path): the page says the exit alone."""
    failed = replace(example.trainers[2], phase=TrainerPhase.FAILED, last_exit_code=code,
                     last_exit_reason="spawn failed: [Errno 2] No such file or directory: '/home/alice/train.py'",
                     reason="spawn failed: [Errno 2] No such file or directory: '/home/alice/train.py'; fix it")
    run = summary(replace(example, trainers=(failed,)), FanConfig())["runs"][0]
    assert run["why"] == why and "alice" not in json.dumps(run)


def test_no_command_line_or_path_reaches_the_page(example: PublishedState) -> None:
    """contracts.md: no argument of a command line, no log or dump path, no pid, even for a full reader; the
    processes' names and users only for a reader /status does not redact for: the others get counts."""
    state = replace(example, trainers=tuple(replace(t, log_path="/home/alice/runs/secret.log")
                                            for t in example.trainers))
    full = summary(state, FanConfig())
    text = json.dumps(full)
    for secret in ("train.py", "old_job.py", "/usr/bin", "/var/lib", "secret.log", "devcd", "31337", "4242"):
        assert secret not in text
    a, b, gone = full["gpus"]
    assert a["process_count"] == 3 and b["process_count"] == 1 and gone["process_count"] == 0
    assert a["processes"][0] == {"name": "python3", "user": "alice", "run": "resnet", "vram_bytes": 6 * 2**30,
                                 "busy_pct": 75}
    assert a["processes"][2] | {"vram_bytes": 0} == {"name": "gnome-shell", "user": "bob", "run": None,
                                                     "vram_bytes": 0, "busy_pct": 4}
    shown = redacted(full)
    text = json.dumps(shown)
    for secret in ("alice", "bob", "python3", "gnome-shell"):
        assert secret not in text
    assert shown["redacted"] is True and [g["process_count"] for g in shown["gpus"]] == [3, 1, 0]
    assert full["gpus"][0]["processes"], "redacted changes a copy: the full summary is shared by other readers"


def test_clocks_throttle_and_pcie_link(example: PublishedState) -> None:
    a, b, _ = summary(example, FanConfig())["gpus"]
    reading = example.snapshot.gpu(GPU_B)
    assert b["pcie"] == {"gts": reading.pcie_link_speed_gts, "width": reading.pcie_link_width,
                         "max_gts": reading.pcie_max_link_speed_gts, "max_width": reading.pcie_max_link_width}
    assert b["clocks"]["throttle"] == list(reading.throttle_reasons or [])
    assert a["clocks"]["sclk_mhz"] is not None and a["clocks"]["mclk_mhz"] is not None


@pytest.mark.parametrize(("temp", "limit", "crit", "level"), [
    (None, 100, 110, None),  # unreadable: said in words, never counted as cool
    (60, None, None, "ok"), (60, 100, 110, "ok"), (94.9, 100, 110, "ok"), (95, 100, 110, "near"),
    (99, 100, 110, "near"), (100, 100, 110, "over"), (109, 100, 110, "over"), (110, 100, 110, "critical"),
    (120, None, 110, "critical"),
])
def test_the_heat_level_against_the_limit_and_crit(temp: float | None, limit: float | None, crit: float | None,
                                                   level: str | None) -> None:
    assert temp_level(temp, limit, crit) == level


@pytest.mark.parametrize(("levels", "expected"), [
    ([], "ok"), ([None], "ok"), (["ok", "near"], "near"), (["over", None, "near"], "over"),
    (["critical", "ok"], "critical"),
])
def test_the_worst_level(levels: list[Level | None], expected: str) -> None:
    assert worst(levels) == expected


def test_the_hostname_hottest_and_what_gpuwatch_does(example: PublishedState) -> None:
    s = summary(example, FanConfig(), hostname="gpu-box-3")
    assert s["hostname"] == "gpu-box-3"
    assert s["hottest_c"] == max(t["temp_c"] for g in s["gpus"] for t in g["temps"] if t["temp_c"] is not None)
    assert s["doing"] == "pausing"  # bert is held on GPU B
    # Each state as the tick publishes it: its rungs computed from it (the summary reads them: daemon/loop.py).
    calm = with_rungs(replace(example, trainers=(), powers=(), clocks=(), fans=()))
    assert summary(calm, FanConfig())["doing"] == "watching"
    assert summary(with_rungs(replace(example, trainers=())), FanConfig())["doing"] == "clocking down"


def test_a_per_gpu_curve_is_the_gpus_own(example: PublishedState) -> None:
    fan = FanConfig.model_validate({"gpus": {GPU_A: {"curve": [[40, 30], [80, 100]]}}})
    a, b, _ = summary(example, fan)["gpus"]
    assert a["fan"]["curve"] == [[40.0, 30.0], [80.0, 100.0]] and b["fan"]["curve"] == [list(p) for p in fan.curve]


FAN = FanState(gpu_id=GPU_A, backend="pwm1", mode=FanMode.CURVE, target_ratio=0.5)
CAP = PowerState(gpu_id=GPU_A, mode=PowerMode.GOVERNING)


@pytest.mark.parametrize(("fan", "power", "held", "clock", "rung"), [
    (None, None, False, False, "none"),
    (FAN, None, False, False, "none"),  # at the curve's lowest speed: nothing to escalate
    (replace(FAN, target_ratio=0.7), None, False, False, "fan"),
    (replace(FAN, mode=FanMode.FAILSAFE, target_ratio=1.0), None, False, False, "fan"),
    (replace(FAN, mode=FanMode.MONITOR_ONLY, target_ratio=0.9), None, False, False, "none"),
    (replace(FAN, target_ratio=1.0), replace(CAP, mode=PowerMode.IDLE), False, False, "fan"),
    (replace(FAN, target_ratio=1.0), CAP, False, False, "cap"),
    (replace(FAN, target_ratio=1.0), replace(CAP, mode=PowerMode.FLOOR), False, False, "cap"),
    (replace(FAN, target_ratio=1.0), CAP, False, True, "clock"),
    (replace(FAN, target_ratio=1.0), CAP, True, True, "pause"),
    (None, None, True, False, "pause"),
])
def test_the_ladder_rung_is_the_highest_in_use(fan: FanState | None, power: PowerState | None, held: bool,
                                               clock: bool, rung: str) -> None:
    assert ladder_rung(fan, 50.0, power, held, clock_limited=clock) == rung


def test_a_pausing_run_holds_its_gpus_on_the_pause_rung(example: PublishedState) -> None:
    """resnet runs on both GPUs: pausing, it puts both on the pause rung; without runs, neither is."""
    trainers = (replace(example.trainers[0], phase=TrainerPhase.PAUSING),)
    a, b, _ = summary(with_rungs(replace(example, trainers=trainers)), FanConfig())["gpus"]
    assert a["rung"] == b["rung"] == "pause"
    assert {g["id"] for g in summary(with_rungs(replace(example, trainers=())), FanConfig())["gpus"]
            if g["rung"] == "pause"} == set()


def test_numbers_are_rounded_once_to_the_digits_shown(example: PublishedState) -> None:
    """149.4967 W is 149 W on the page: rounded to 149.5 first, the page showed 150 (found by the browser test)."""
    gpus = tuple(replace(g, power_w=149.4967, fan_rpm=None) if g.gpu_id == GPU_A else g for g in example.snapshot.gpus)
    state = replace(example, snapshot=replace(example.snapshot, gpus=gpus),
                    trainers=(replace(example.trainers[0], steps_per_s=4.4949, run_energy_j=1_849_960.0),))
    s = summary(state, FanConfig())
    assert s["gpus"][0]["power"]["w"] == 149
    assert s["runs"][0]["steps_per_s"] == 4.49 and s["runs"][0]["run_energy_kj"] == 1850.0


@pytest.mark.parametrize(("phase", "reason", "paused_by", "why", "event"), [
    # The review's "paused: pausing: manual pause": the phase words the supervisor's reasons carry go.
    (TrainerPhase.PAUSING, "pausing: manual pause", None, "manual pause", "run bert paused (manual pause)"),
    (TrainerPhase.PAUSED, "paused (SIGSTOP): hot: junction 101°C", None, "hot: junction 101°C",
     "run bert paused (hot: junction 101°C)"),
    (TrainerPhase.PAUSING, "started: pausing: manual pause", None, "manual pause", "run bert paused (manual pause)"),
    (TrainerPhase.PAUSING, "restarted (exit code 1), still paused: pausing: manual pause", None, "manual pause",
     "run bert paused (manual pause)"),
    (TrainerPhase.PAUSED, "re-attached holding its pause: manual pause", None, "manual pause",
     "run bert paused (manual pause)"),
    (TrainerPhase.PAUSED, "paused by node-b", None, "by node-b", "run bert paused (by node-b)"),
    (TrainerPhase.PAUSED, "pausing: hot", "box3: hot: junction 101°C", "box3: hot: junction 101°C",
     "run bert paused (box3: hot: junction 101°C)"),  # what the held ranks say wins
    (TrainerPhase.PAUSED, "no pause acknowledgement: SIGSTOP", None, "no pause acknowledgement: SIGSTOP",
     "run bert paused (no pause acknowledgement: SIGSTOP)"),
    (TrainerPhase.PAUSED, None, None, None, "run bert paused"),
])
def test_a_held_runs_why_is_its_cause_alone_and_its_event_one_sentence(
        example: PublishedState, phase: TrainerPhase, reason: str | None, paused_by: str | None, why: str | None,
        event: str) -> None:
    from gpuwatch.publish.history import events

    before = summary(replace(example, trainers=(replace(example.trainers[1], phase=TrainerPhase.RUNNING),)),
                     FanConfig())
    held = replace(example.trainers[1], phase=phase, reason=reason, paused_by=paused_by)
    after = summary(replace(example, trainers=(held,)), FanConfig())
    assert after["runs"][0]["why"] == why
    assert [e["text"] for e in events(before, after, False) if e["kind"] == "pause"] == [event]


def test_the_rungs_are_the_published_ones_and_the_same_without(example: PublishedState) -> None:
    """The summary takes each GPU's rung from the state (the tick computed them: daemon/loop.py); a state built
    without them (or a GPU that is down) gets the same from ``rung_of``, under each GPU's own fan settings."""
    fan = FanConfig.model_validate({"gpus": {GPU_A: {"curve": [[40, 30], [80, 100]]}}})
    for state in (example, with_rungs(replace(example, trainers=()), fan)):
        published = summary(state, fan)
        assert state.ladder_rungs and published == summary(replace(state, ladder_rungs=()), fan)
        assert [g["rung"] for g in published["gpus"]][:2] == [rung for _, rung in state.ladder_rungs]


def _cut(tick: dict[str, Any]) -> dict[str, Any]:
    """A summary cut down to what the history reads (``history_part``'s keys)."""
    return {"tick": tick["tick"], "taken_unix": tick["taken_unix"], "interval_s": tick["interval_s"],
            "version": tick["version"],
            "gpus": [{**{k: g[k] for k in HISTORY_GPU_KEYS},
                      "temps": [{"temp_c": t["temp_c"]} for t in g["temps"]],
                      "fan": {k: g["fan"][k] for k in HISTORY_FAN_KEYS},
                      "power": {k: g["power"][k] for k in HISTORY_POWER_KEYS}} for g in tick["gpus"]],
            "runs": tick["runs"]}


def _variants(example: PublishedState) -> list[PublishedState]:
    gpus = tuple(replace(g, power_w=149.4967, fan_rpm=None, gpu_busy_ratio=None) if g.gpu_id == GPU_A else g
                 for g in example.snapshot.gpus)
    held = (replace(example.trainers[1], phase=TrainerPhase.PAUSED, reason="pausing: manual pause"),)
    return [example, replace(example, daemon=None, fans=(), powers=(), trainers=()),
            replace(example, snapshot=replace(example.snapshot, gpus=gpus, resets=()), trainers=held),
            replace(example, fans=tuple(replace(f, failsafe_reason="hot", message="m") for f in example.fans),
                    powers=tuple(replace(p, cap_w=None) for p in example.powers))]


def test_the_history_part_is_the_summary_cut_down(example: PublishedState) -> None:
    """What the live feed keeps while no page is open: every value the history reads, the summary's own, in
    its order (its events and points are the same bytes either way)."""
    from gpuwatch.publish.history import events, point

    for state in _variants(example):
        whole, part = summary(state, FanConfig(), "box"), history_part(state)
        assert json.dumps(part) == json.dumps(_cut(whole))
        assert point(part) == point(whole)
        assert events(None, part, True) == events(None, whole, True)
    before, after = _variants(example)[1], example  # a failsafe, a cap lowered
    assert events(history_part(before), history_part(after), False) == events(
        summary(before, FanConfig()), summary(after, FanConfig()), False) != []


def test_the_rungs_of_every_gpu_at_once_are_rung_of_each(example: PublishedState) -> None:
    fan = FanConfig.model_validate({"gpus": {GPU_A: {"curve": [[40, 30], [80, 100]]}}})
    for state in _variants(example) + [replace(example, trainers=(replace(example.trainers[0],
                                                                          phase=TrainerPhase.PAUSING),))]:
        ids = [g.gpu_id for g in state.snapshot.gpus]
        assert ladder_rungs(state, fan.for_gpu, ids) == [(i, rung_of(state, i, fan.for_gpu(i))) for i in ids]
