"""The health verdict (publish/verdict.py): each fault class and its switch, as a table; normal operation is healthy."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from gpuwatch.config.sections import HealthConfig
from gpuwatch.model import (
    FanMode,
    FanState,
    GpuReading,
    GpuResetState,
    PowerMode,
    PowerState,
    PublishedState,
    Snapshot,
    TempReading,
    TrainerPhase,
    TrainerState,
)
from gpuwatch.publish.health_codes import CODES, fault_line
from gpuwatch.publish.verdict import judge, over_crit_since

SLOT = "0000:03:00.0"
NOW = 1000.0


def gpu(**changes: Any) -> GpuReading:
    base = GpuReading(gpu_id=SLOT, card="card0", backend="amdgpu",
                      temps=(TempReading("edge", 60.0, crit_c=100.0), TempReading("junction", 70.0, crit_c=105.0)),
                      pcie_slot_link_speed_gts=16.0, pcie_slot_max_link_speed_gts=16.0, pcie_slot_link_width=16,
                      pcie_slot_max_link_width=16, pcie_aer_fatal_total=0)
    return replace(base, **changes)


def hot() -> GpuReading:
    return gpu(temps=(TempReading("edge", 90.0, crit_c=100.0), TempReading("junction", 108.0, crit_c=105.0)))


def state(reading: GpuReading | None = None, fan: FanState | None = None, reset: GpuResetState | None = None,
          powers: tuple[PowerState, ...] = (), trainers: tuple[TrainerState, ...] = ()) -> PublishedState:
    snapshot = Snapshot(taken_unix=NOW, taken_monotonic=NOW, gpus=(reading or gpu(),),
                        resets=(reset,) if reset else ())
    return PublishedState(snapshot=snapshot, fans=(fan,) if fan else (), powers=powers, trainers=trainers)


def fan(mode: FanMode = FanMode.CURVE, **changes: Any) -> FanState:
    return FanState(gpu_id=SLOT, backend="pwm1", mode=mode, **changes)


# (name, state, over crit since, the fault lines expected)
CASES: list[tuple[str, PublishedState, dict[str, float], list[str]]] = [
    ("healthy", state(fan=fan()), {}, []),
    ("fan failsafe while hot", state(hot(), fan(FanMode.FAILSAFE)), {},
     [f"gpuwatch:G006 {SLOT} junction 108C>105C fan failsafe"]),
    ("fan failsafe, temperature unreadable", state(fan=fan(FanMode.FAILSAFE, failsafe_reason="junction unreadable")),
     {}, [f"gpuwatch:G006 {SLOT} fan failsafe: junction unreadable"]),
    ("fan uncontrolled", state(fan=fan(FanMode.UNCONTROLLED, message="pwm1 write EIO")), {},
     [f"gpuwatch:G005 {SLOT} fan uncontrolled: pwm1 write EIO"]),
    ("fan stalled", state(fan=fan(stalled=True, rpm=0)), {}, [f"gpuwatch:G007 {SLOT} fan stalled at 0 rpm"]),
    ("over crit, not long enough", state(hot(), fan()), {SLOT: NOW - 10}, []),
    ("over crit for longer than over_crit_s", state(hot(), fan()), {SLOT: NOW - 45},
     [f"gpuwatch:G008 {SLOT} junction 108C>=105C crit for 45s"]),
    ("gpu gone", state(GpuReading(gpu_id=SLOT, card="card0", backend="amdgpu", up=False)), {},
     [f"gpuwatch:G004 {SLOT} gone"]),
    ("gpu not answering", state(GpuReading(gpu_id=SLOT, card="card0", backend="amdgpu", up=False, unresponsive=True)),
     {}, [f"gpuwatch:G004 {SLOT} not answering"]),
    ("reset with stuck processes", state(reset=GpuResetState(SLOT, resets_total=1, recovering=True, stuck_pids=(7,))),
     {}, [f"gpuwatch:G009 {SLOT} reset, 1 stuck process(es) 7"]),
    ("reset recovering", state(reset=GpuResetState(SLOT, resets_total=2, recovering=True)), {},
     [f"gpuwatch:G010 {SLOT} reset #2, recovering"]),
    ("reset long over", state(reset=GpuResetState(SLOT, resets_total=2)), {}, []),
    ("pcie narrower", state(gpu(pcie_slot_link_width=8)), {}, [f"gpuwatch:G011 {SLOT} pcie x8<x16"]),
    ("pcie slower (off by default: DPM)", state(gpu(pcie_slot_link_speed_gts=2.5)), {}, []),
    ("aer fatal", state(gpu(pcie_aer_fatal_total=1)), {}, [f"gpuwatch:G013 {SLOT} pcie aer fatal 1"]),
    ("governed at the floor and paused: normal operation",
     state(fan=fan(), powers=(PowerState(SLOT, PowerMode.FLOOR, cap_w=150.0),),
           trainers=(TrainerState("resnet", TrainerPhase.PAUSED),)), {}, []),
]


@pytest.mark.parametrize(("name", "published", "since", "lines"), CASES, ids=[c[0] for c in CASES])
def test_fault_table(name: str, published: PublishedState, since: dict[str, float], lines: list[str]) -> None:
    verdict = judge(published, HealthConfig(), since, NOW)
    assert [fault_line(f.code, f.gpu_id, f.detail) for f in verdict.faults] == lines
    assert verdict.healthy is (not lines)
    assert all(len(line) <= 80 for line in lines)


def test_governed_and_paused_are_notes_not_faults() -> None:
    published = state(fan=fan(), powers=(PowerState(SLOT, PowerMode.GOVERNING, cap_w=200.0),),
                      trainers=(TrainerState("resnet", TrainerPhase.PAUSED),))
    verdict = judge(published, HealthConfig(), {}, NOW)
    assert verdict.healthy and verdict.notes == (f"{SLOT} power capped", "trainer resnet paused")


@pytest.mark.parametrize("code", ["G005", "G006", "G007", "G008", "G009", "G011", "G012", "G013", "G004"])
def test_every_fault_class_can_be_switched_off(code: str) -> None:
    switch = CODES[code][0]
    published = {
        "G004": state(GpuReading(gpu_id=SLOT, card="card0", backend="amdgpu", up=False)),
        "G005": state(fan=fan(FanMode.UNCONTROLLED)), "G006": state(hot(), fan(FanMode.FAILSAFE)),
        "G007": state(fan=fan(stalled=True)), "G008": state(hot(), fan()),
        "G009": state(reset=GpuResetState(SLOT, recovering=True, stuck_pids=(7,))),
        "G011": state(gpu(pcie_slot_link_width=4)), "G012": state(gpu(pcie_slot_link_speed_gts=8.0)),
        "G013": state(gpu(pcie_aer_fatal_total=3)),
    }[code]
    on = HealthConfig(**{switch: True, "over_crit_s": 0})
    off = HealthConfig(**{switch: False, "over_crit_s": 0})
    since = {SLOT: NOW}
    assert code in [f.code for f in judge(published, on, since, NOW).faults]
    assert code not in [f.code for f in judge(published, off, since, NOW).faults]


def test_a_nonfatal_aer_error_is_a_fault_only_once_turned_on() -> None:
    """G016 (issue 48, the "how to add a health check" recipe followed once): off by default, the count being since
    boot and the error recovered; a site that retires a link on any uncorrectable error turns it on."""
    published = state(gpu(pcie_aer_nonfatal_total=2, pcie_aer_correctable_total=40))
    assert judge(published, HealthConfig(), {}, NOW).healthy
    verdict = judge(published, HealthConfig(off=["pcie_speed"]), {}, NOW)
    lines = [fault_line(f.code, f.gpu_id, f.detail) for f in verdict.faults]
    assert lines == [f"gpuwatch:G016 {SLOT} pcie aer nonfatal 2"]
    assert judge(state(gpu(pcie_aer_nonfatal_total=0)), HealthConfig(off=[]), {}, NOW).healthy


def test_over_crit_since_keeps_the_start_and_forgets_a_cooled_gpu() -> None:
    since = over_crit_since({}, state(hot()), 10.0)
    assert since == {SLOT: 10.0}
    assert over_crit_since(since, state(hot()), 20.0) == {SLOT: 10.0}
    assert over_crit_since(since, state(gpu()), 30.0) == {}


def test_the_verdict_carries_the_slurm_hysteresis() -> None:
    verdict = judge(state(), HealthConfig(drain_after_checks=3, resume_after_checks=5), {}, NOW)
    assert (verdict.drain_after_checks, verdict.resume_after_checks) == (3, 5)


@pytest.mark.parametrize("temps", [
    (),
    (TempReading("edge", 60.0, crit_c=100.0), TempReading("junction", 70.0, crit_c=105.0)),
    (TempReading("edge", 100.0, crit_c=100.0),),  # at crit counts
    (TempReading("edge", 101.0, crit_c=100.0), TempReading("junction", 108.0, crit_c=105.0)),
    (TempReading("edge", 103.0, crit_c=100.0), TempReading("junction", 108.0, crit_c=105.0)),  # equals: the first
    (TempReading("edge", None, crit_c=100.0), TempReading("junction", 108.0, crit_c=None),
     TempReading("mem", 99.0, crit_c=95.0)),
])
def test_the_hottest_over_crit_is_the_furthest_over_the_first_of_equals(temps: tuple[TempReading, ...]) -> None:
    from gpuwatch.model import at_crit
    from gpuwatch.publish.verdict import _hottest_over_crit

    both = [(t.label, t.temp_c, t.crit_c) for t in temps if t.temp_c is not None and t.crit_c is not None]
    over = [s for s in both if at_crit(s[1], s[2])]
    assert _hottest_over_crit(gpu(temps=temps)) == max(over, key=lambda s: s[1] - s[2], default=None)
