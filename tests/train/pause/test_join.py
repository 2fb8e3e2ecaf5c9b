"""The join agreement (issue 38): all ranks or none take part, whatever fails on one rank, and no rank waits
for one that cannot take part. Ranks are threads sharing one real ``HashStore``; the side group is a stub."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402

from gpuwatch.train.pause.join import Joined, join  # noqa: E402

pytestmark = pytest.mark.torch
LONG_S = 600.0  # a bound no test may reach: reaching it would mean a rank waited for one that had failed


def ok_devices() -> list[str]:
    return ["device"]


def failing_devices() -> list[str]:
    raise RuntimeError("Unable to find address for: bogus0")


def connected(store: Any, devices: Any) -> str:
    return "group"


def refused(store: Any, devices: Any) -> str:
    raise RuntimeError("Connection refused")


def run_ranks(store: Any, world: int, devices: dict[int, Any] | None = None, connect: dict[int, Any] | None = None,
              bound_s: float = LONG_S, absent: tuple[int, ...] = (), delay_s: dict[int, float] | None = None
              ) -> dict[int, Joined]:
    results: dict[int, Joined] = {}

    def rank(r: int) -> None:
        time.sleep((delay_s or {}).get(r, 0.0))
        results[r] = join(store, r, world, (devices or {}).get(r, ok_devices), (connect or {}).get(r, connected),
                          bound_s)

    threads = [threading.Thread(target=rank, args=(r,), daemon=True) for r in range(world) if r not in absent]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not any(thread.is_alive() for thread in threads), "a rank still waits"
    return results


def test_every_rank_joins_the_same_incarnation() -> None:
    results = run_ranks(dist.HashStore(), 4)
    assert {r.group for r in results.values()} == {"group"} and len({r.job for r in results.values()}) == 1


@pytest.mark.parametrize("failing", [0, 1, 3])
def test_one_rank_that_cannot_take_part_turns_the_pause_off_everywhere_at_once(failing: int) -> None:
    results = run_ranks(dist.HashStore(), 4, devices={failing: failing_devices})
    assert len(results) == 4 and all(r.group is None for r in results.values())
    assert f"rank {failing}" in results[failing].why_off


def test_a_connection_that_fails_on_one_rank_turns_it_off_everywhere() -> None:
    results = run_ranks(dist.HashStore(), 3, connect={2: refused})
    assert len(results) == 3 and all(r.group is None for r in results.values())


def test_keys_of_a_dead_incarnation_are_never_taken_for_this_one() -> None:
    store = dist.HashStore()
    for r in range(1, 3):  # what killed ranks left: hellos, echoes with the old id, acks, decisions
        store.set(f"gpuwatch/join/hello/{r}", "old-nonce")
        store.set(f"gpuwatch/join/welcome/{r}", "old-nonce deadbeef")
        store.set(f"gpuwatch/join/ack/{r}", "old-nonce deadbeef ok")
    store.set("gpuwatch/join/deadbeef/decision", "off")
    results = run_ranks(store, 3, delay_s={0: 0.3})  # rank 0 last: the others see only the old keys first
    assert {r.group for r in results.values()} == {"group"} and {r.job for r in results.values()} != {"deadbeef"}
    again = run_ranks(store, 3, delay_s={1: 0.3})  # and a restart on the same store joins anew
    assert {r.group for r in again.values()} == {"group"} and again[0].job != results[0].job


def test_a_rank_that_never_comes_turns_it_off_within_the_bound() -> None:
    results = run_ranks(dist.HashStore(), 3, bound_s=0.5, absent=(2,))
    assert set(results) == {0, 1} and all(r.group is None for r in results.values())
    assert "[2]" in results[0].why_off


def test_rank_zero_late_past_the_others_bound_agrees_on_off() -> None:
    results = run_ranks(dist.HashStore(), 2, bound_s=0.3, delay_s={0: 1.0})
    assert results[1].group is None and results[0].group is None
