"""status_line: the STATUS= text, as a table of published states."""

from __future__ import annotations

import pytest

from gpuwatch.model import (
    FanMode,
    FanState,
    GpuReading,
    PowerMode,
    PowerState,
    PublishedState,
    Snapshot,
    TempReading,
    TrainerPhase,
    TrainerState,
)
from gpuwatch.publish.summary import status_line


def gpu(slot: str, up: bool = True, pwm: int | None = 128, **temps: float | None) -> GpuReading:
    return GpuReading(
        gpu_id=slot,
        card="card0",
        backend="amdgpu",
        up=up,
        pwm=pwm,
        pwm_max=255,
        temps=tuple(TempReading(label, value) for label, value in temps.items()),
    )


def state(gpus: tuple[GpuReading, ...], fans: tuple[FanState, ...] = (), trainers: tuple[TrainerState, ...] = (),
          powers: tuple[PowerState, ...] = ()) -> PublishedState:
    return PublishedState(snapshot=Snapshot(0.0, 0.0, gpus), fans=fans, trainers=trainers, powers=powers)


A, B = "0000:03:00.0", "0000:0c:00.0"


@pytest.mark.parametrize(
    "published, expected",
    [
        (state(()), "no GPU found"),
        (state((gpu(A, edge=51.4, junction=78.6),)), f"1 GPU, hottest {A} junction 79°C | fan duty 50%"),
        (
            state((gpu(A, edge=50.0), gpu(B, pwm=None, mem=83.0))),
            f"2 GPUs, hottest {B} mem 83°C | fan duty 50%",
        ),
        (state((gpu(A, pwm=None, edge=None),)), "1 GPU, no temperature readable"),
        (
            state((gpu(A, up=False, edge=99.0), gpu(B, edge=40.0))),
            f"2 GPUs (1 down), hottest {B} edge 40°C | fan duty 50%",
        ),
        (
            state((gpu(A, edge=60.0),), fans=(FanState(A, "pwm1", FanMode.UNCONTROLLED),)),
            f"1 GPU, hottest {A} edge 60°C | fan duty 50%, UNCONTROLLED on 1",
        ),
        (
            state(
                (gpu(A, edge=60.0),),
                fans=(FanState(A, "pwm1", FanMode.CURVE, target_ratio=0.6),),
                trainers=(TrainerState("resnet", TrainerPhase.RUNNING),),
            ),
            f"1 GPU, hottest {A} edge 60°C | fan target 60% duty 50% | trainer resnet: running",
        ),
        (
            state(
                (gpu(A, edge=60.0),),
                fans=(FanState(A, "pwm1", FanMode.FAILSAFE, target_ratio=1.0, stalled=True),),
                trainers=tuple(TrainerState(f"t{i}", TrainerPhase.PAUSED) for i in range(5)),
            ),
            f"1 GPU, hottest {A} edge 60°C | fan target 100% duty 50%, FAILSAFE on 1, STALLED on 1 | "
            "trainers t0: paused, t1: paused, t2: paused, +2 more",
        ),
        (
            state((gpu(A, pwm=None, edge=60.0),), fans=(FanState(A, "pwm1", FanMode.MONITOR_ONLY),)),
            f"1 GPU, hottest {A} edge 60°C | fan duty n/a (monitor-only)",
        ),
    ],
)
def test_status_line(published: PublishedState, expected: str) -> None:
    assert status_line(published) == expected


def _capped(slot: str, mode: PowerMode, cap_w: float) -> PowerState:
    return PowerState(slot, mode, cap_w=cap_w, original_cap_w=150.0)


@pytest.mark.parametrize(
    "powers, expected",
    [
        ((_capped(A, PowerMode.IDLE, 150.0),), ""),  # nothing to say while the cap is the original
        ((_capped(A, PowerMode.GOVERNING, 112.0),), " | power capped 112/150 W"),
        ((_capped(A, PowerMode.GOVERNING, 130.0), _capped(B, PowerMode.FLOOR, 90.0)),
         " | power capped 90/150 W (on 2 GPUs) at the floor"),
        ((PowerState(A, PowerMode.UNAVAILABLE, reason="no power1_cap"),), ""),
    ],
)
def test_status_line_says_when_a_cap_is_lowered(powers: tuple[PowerState, ...], expected: str) -> None:
    assert status_line(state((gpu(A, edge=60.0),), powers=powers)) == (
        f"1 GPU, hottest {A} edge 60°C | fan duty 50%" + expected)
