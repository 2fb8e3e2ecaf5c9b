"""Issue 46 item 8: the per-user bounds of the control socket (pure tables) and its rate-limited log."""

from __future__ import annotations

import logging

import pytest

from gpuwatch.daemon.bounds import Bucket, RateLimitedLog, Slots, UserRate


@pytest.mark.parametrize("takes, waits", [
    ([(1, 0.0)] * 3, [0.0, 0.0, 0.0]),  # within the burst
    ([(5, 0.0), (1, 0.0)], [0.0, 0.1]),  # one over: a tenth of a second at 10/s
    ([(5, 0.0), (1, 0.1)], [0.0, 0.0]),  # refilled meanwhile
    ([(5, 0.0), (10, 0.0)], [0.0, 1.0]),  # the debt is kept: a flood waits in proportion
    ([(5, 0.0), (5, 100.0), (1, 100.0)], [0.0, 0.0, 0.1]),  # never more than the burst
])
def test_a_bucket_says_how_long_to_wait(takes: list[tuple[int, float]], waits: list[float]) -> None:
    bucket = Bucket(rate_per_s=10.0, burst=5.0)
    assert [pytest.approx(bucket.take(amount, now)) for amount, now in takes] == waits


def test_a_users_rate_waits_for_the_slower_of_lines_and_bytes() -> None:
    rate = UserRate(Bucket(10.0, 10.0), Bucket(100.0, 100.0))
    assert rate.take(1, 300, 0.0) == pytest.approx(2.0)  # 200 bytes over at 100 B/s


@pytest.mark.parametrize("held, uid, refused", [
    ({}, 1000, None),
    ({1000: 2}, 1000, "too many connections of uid 1000 at once (at most 2)"),
    ({1000: 1, 1001: 1, 1002: 1}, 1003, None),
    ({1000: 2, 1001: 2}, 1002, "too many connections at once (at most 4 of unprivileged users)"),
])
def test_slots_per_user_and_in_all(held: dict[int, int], uid: int, refused: str | None) -> None:
    slots = Slots(per_user=2, total=4)
    slots.held = dict(held)
    assert slots.refusal(uid) == refused


def test_slots_given_back() -> None:
    slots = Slots(per_user=1, total=4)
    slots.take(5)
    assert slots.refusal(5) is not None
    slots.give(5)
    assert slots.refusal(5) is None and slots.held == {}


def test_the_rate_limited_log_says_what_it_left_out(caplog: pytest.LogCaptureFixture) -> None:
    noisy = RateLimitedLog(logging.getLogger("test.ratelog"), every_s=10.0)
    with caplog.at_level(logging.WARNING, "test.ratelog"):
        said = [noisy.warning("k", "bad %s", i, now=float(now)) for i, now in enumerate([0, 1, 2, 5, 11])]
        noisy.warning("other", "another kind", now=3.0)
    assert said == [True, False, False, False, True]
    assert [r.getMessage() for r in caplog.records] == [
        "bad 0", "bad 4 (3 more like it in the last 11 s not logged)", "another kind"]
