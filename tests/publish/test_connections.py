"""publish/connections.py, the HTTP server's bookkeeping, without sockets: the caps, which connection is cut
to make room, a refused client, the descriptors given back, and the warnings held to one per REPORT_EVERY_S.
(The same rules over real sockets: test_http_slow_clients.py, test_http_burst.py, test_tls.py.)"""

from __future__ import annotations

import logging

import pytest

from gpuwatch.publish.connections import REPORT_EVERY_S, Connection, Connections


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_full_client_makes_room_by_cutting_its_oldest_waiting_connection() -> None:
    connections = Connections(max_connections=10, max_per_client=2, monotonic=Clock())
    first, second = connections.add("10.0.0.1"), connections.add("10.0.0.1")
    other = connections.add("10.0.0.2")
    assert first is not None and second is not None and other is not None and len(connections) == 3
    third = connections.add("10.0.0.1")
    assert third is not None and first.cut and not second.cut and not other.cut
    # The cut one counts until its socket is closed (it still holds a descriptor).
    assert len(connections) == 4
    connections.closed(first)
    connections.closed(first)  # closed twice (cut, then its task ends): counted once
    assert len(connections) == 3 and list(connections) == [second, other, third]


def test_a_client_whose_connections_are_all_answered_is_refused() -> None:
    connections = Connections(max_connections=10, max_per_client=2, monotonic=Clock())
    answered = [connections.add("10.0.0.1") for _ in range(2)]
    for connection in answered:
        assert connection is not None
        connection.waiting = False  # sent its request: never cut to make room
    assert connections.add("10.0.0.1") is None
    assert not any(c.cut for c in answered if c is not None) and len(connections) == 2
    assert connections.add("10.0.0.2") is not None  # another address is not held back


@pytest.mark.parametrize(("waiting", "cut"), [([True, True, True], 0), ([False, True, True], 1),
                                              ([False, False, False], None)])
def test_at_the_connection_cap_the_oldest_waiting_one_is_cut(waiting: list[bool], cut: int | None) -> None:
    connections = Connections(max_connections=3, max_per_client=3, monotonic=Clock())
    made: list[Connection] = []
    for n, wait in enumerate(waiting):
        connection = connections.add(f"10.0.0.{n}")
        assert connection is not None
        connection.waiting = wait
        made.append(connection)
    assert connections.full
    assert connections.cut_oldest(lambda c: True, "over the connection limit") is (cut is not None)
    assert [c.cut for c in made] == [n == cut for n in range(3)]


def test_cut_offs_are_summarised_at_most_once_per_period(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    connections = Connections(max_connections=10, max_per_client=10, monotonic=clock)
    with caplog.at_level(logging.WARNING, logger="gpuwatch.http"):
        connections.note_cut("10.0.0.1", "no complete request within 5 s")  # the first is said at once
        for _ in range(3):
            connections.note_cut("10.0.0.2", "no complete request within 5 s")
        connections.report_if_due()
        assert len(caplog.records) == 1
        clock.now += REPORT_EVERY_S
        connections.report_if_due()
        connections.report_if_due()
    assert [r.getMessage() for r in caplog.records] == [
        "cut off 1 slow HTTP client connection(s): 1 no complete request within 5 s; from 10.0.0.1 (1)",
        "cut off 3 slow HTTP client connection(s): 3 no complete request within 5 s; from 10.0.0.2 (3)",
    ]


def test_a_failed_accept_is_said_once_per_period(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    connections = Connections(max_connections=10, max_per_client=10, monotonic=clock)
    error = OSError(24, "Too many open files")
    with caplog.at_level(logging.WARNING, logger="gpuwatch.http"):
        for _ in range(5):
            connections.accept_failed(error, 0.5)
        clock.now += REPORT_EVERY_S
        connections.accept_failed(error, 0.5)
    assert [r.getMessage() for r in caplog.records] == [
        "HTTP: cannot accept a connection (Too many open files, 0 open); retrying in 0.5 s"] * 2


def test_a_held_back_cut_off_calls_held_and_is_due_after_the_period() -> None:
    clock, held = Clock(), []
    connections = Connections(max_connections=10, max_per_client=10, monotonic=clock,
                              held=lambda: held.append(clock.now))
    assert connections.held_for_s() is None
    connections.note_cut("10.0.0.1", "no complete request within 5 s")  # said at once: nothing held
    assert held == [] and connections.held_for_s() is None
    clock.now += 4.0
    connections.note_cut("10.0.0.2", "no complete request within 5 s")
    assert held == [1004.0] and connections.held_for_s() == REPORT_EVERY_S - 4.0
    clock.now += REPORT_EVERY_S - 4.0
    assert connections.held_for_s() == 0.0
    connections.report_if_due()
    assert connections.held_for_s() is None

