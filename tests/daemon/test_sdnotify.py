"""Notifier against real datagram sockets bound by the test (path and abstract namespace)."""

from __future__ import annotations

import logging
import os
import socket
import uuid
from pathlib import Path

import pytest

from gpuwatch.daemon.sdnotify import Notifier, socket_address, watchdog_interval_s


def bind(path: str) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(path)
    sock.settimeout(2)
    return sock


def test_path_socket_receives_each_notification(tmp_path: Path) -> None:
    with bind(str(tmp_path / "notify")) as sock:
        notifier = Notifier(str(tmp_path / "notify"))
        notifier.ready("2 GPUs")
        notifier.status("2 GPUs")  # unchanged: not sent again
        notifier.status("3 GPUs")
        notifier.reloading()
        notifier.stopping()
        got = [sock.recv(4096).decode() for _ in range(4)]
        notifier.close()
    assert got[0] == "READY=1\nSTATUS=2 GPUs"
    assert got[1] == "STATUS=3 GPUs"
    assert got[2].startswith("RELOADING=1\nMONOTONIC_USEC=")
    assert got[3] == "STOPPING=1"


def test_abstract_namespace_socket() -> None:
    name = f"gpuwatch-test-{uuid.uuid4().hex}"
    with bind("\0" + name) as sock:
        notifier = Notifier("@" + name)
        assert notifier.ready()
        assert sock.recv(4096) == b"READY=1"
        notifier.close()


def test_watchdog_pings_at_half_the_interval(tmp_path: Path) -> None:
    now = [100.0]
    with bind(str(tmp_path / "n")) as sock:
        notifier = Notifier(str(tmp_path / "n"), watchdog_s=10.0, monotonic=lambda: now[0])
        sock.settimeout(0.05)
        sent = []
        for t in (100.0, 102.0, 104.9, 105.0, 109.0, 110.1):
            now[0] = t
            notifier.watchdog()
            try:
                sock.recv(64)
                sent.append(t)
            except TimeoutError:
                pass
        assert notifier.next_ping_in_s() == pytest.approx(5.0)
        notifier.close()
    assert sent == [100.0, 105.0, 110.1]


def test_without_notify_socket_everything_is_a_no_op() -> None:
    notifier = Notifier.from_env({})
    assert not notifier.enabled
    assert notifier.ready() and notifier.status("x") and notifier.watchdog() and notifier.stopping()
    assert notifier.next_ping_in_s() is None


def test_from_env_reads_watchdog_and_unsets_for_children(tmp_path: Path) -> None:
    env = {"NOTIFY_SOCKET": str(tmp_path / "n"), "WATCHDOG_USEC": "3000000", "WATCHDOG_PID": str(os.getpid())}
    notifier = Notifier.from_env(env, unset=True)
    assert notifier.watchdog_s == 3.0
    assert env == {}


@pytest.mark.parametrize(
    "env, expected",
    [
        ({}, None),
        ({"WATCHDOG_USEC": "500000"}, 0.5),
        ({"WATCHDOG_USEC": "500000", "WATCHDOG_PID": "1"}, None),  # armed for another process
        ({"WATCHDOG_USEC": "0"}, None),
        ({"WATCHDOG_USEC": "soon"}, None),
    ],
)
def test_watchdog_interval_table(env: dict[str, str], expected: float | None) -> None:
    assert watchdog_interval_s(env, pid=4242) == expected


@pytest.mark.parametrize(
    "value, expected",
    [("/run/systemd/notify", "/run/systemd/notify"), ("@abc", "\0abc"), ("vsock:2:1234", None), ("", None)],
)
def test_socket_address_table(value: str, expected: str | None) -> None:
    assert socket_address(value) == expected


def test_send_errors_are_logged_not_raised(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    notifier = Notifier(str(tmp_path / "nobody-listens"))
    with caplog.at_level(logging.ERROR, logger="gpuwatch.sdnotify"):
        assert notifier.ready() is False
    assert len([r for r in caplog.records if "failed" in r.getMessage()]) == 1  # one failed send, one line
    assert "sd_notify READY to" in caplog.text and "failed" in caplog.text


def test_non_unix_socket_is_reported(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.ERROR, logger="gpuwatch.sdnotify"):
        notifier = Notifier("vsock:2:1234")
    assert not notifier.enabled
    assert "not a Unix socket path" in caplog.text
