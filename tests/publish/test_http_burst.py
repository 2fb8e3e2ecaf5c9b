"""Issue 31 point 3: the HTTP connection caps hold under a burst, at every moment, and the daemon keeps
descriptors for its own I/O. A real daemon (`gpuwatch run` on a simulated card, open-file limit 1024)
and real TCP connections from eight loopback addresses, counted from the kernel's socket table
(/proc/net/tcp: a connection the daemon has accepted has an inode; one still in the backlog has none)."""

from __future__ import annotations

import errno
import shlex
import socket
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuwatch.publish.serve import MAX_CONNECTIONS, MAX_PER_CLIENT, RESERVED_FDS, connection_cap
from tests.support.daemon_process import DaemonProcess
from tests.support.processes import Processes
from tests.support.stack import GPUWATCH

OPEN_FILES = 1024
ADDRESSES = [f"127.0.0.{i}" for i in range(1, 9)]


def test_the_cap_keeps_descriptors_for_the_daemon() -> None:
    assert connection_cap(65536) == MAX_CONNECTIONS
    assert connection_cap(OPEN_FILES) == MAX_CONNECTIONS  # 1024 - 256 kept is above the cap
    assert connection_cap(512) == 512 - RESERVED_FDS
    assert connection_cap(100) >= 1


def _accepted(port: int) -> Counter[str]:
    """Established connections to ``port`` that a process has accepted (they have an inode), by client.

    Each socket once, by its inode: the kernel writes the table in pieces, and a socket may show twice
    in one read while the table changes."""
    clients: dict[str, str] = {}
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local, remote, state, inode = fields[1], fields[2], fields[3], fields[9]
        if int(local.split(":")[1], 16) == port and state == "01" and inode != "0":
            address = bytes.fromhex(remote.split(":")[0])[::-1]  # little-endian on x86 and arm64
            clients[inode] = socket.inet_ntoa(address)
    return Counter(clients.values())


def _sockets(pid: int) -> int:
    """The sockets among ``pid``'s descriptors (listed by number: a number closed and used again shows once)."""
    count = 0
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            count += fd.readlink().name.startswith("socket:")
        except OSError:
            pass  # closed while listed
    return count


class Burst:
    """``count`` idle connections opened as fast as possible, round robin from ``ADDRESSES``;
    the most the daemon held at once is sampled until ``stop``."""

    def __init__(self, port: int, pid: int) -> None:
        self.port = port
        self.pid = pid
        self.socks: list[socket.socket] = []
        self.most_total = 0
        self.most_per_client = 0
        self._stop = threading.Event()
        self._sampler = threading.Thread(target=self._sample, daemon=True)

    def open(self, count: int) -> None:
        self.baseline = _sockets(self.pid)
        self._sampler.start()
        for i in range(count):
            sock = socket.socket()
            sock.setblocking(False)
            sock.bind((ADDRESSES[i % len(ADDRESSES)], 0))
            assert sock.connect_ex(("127.0.0.1", self.port)) in (0, errno.EINPROGRESS)
            self.socks.append(sock)

    def _sample(self) -> None:
        while not self._stop.is_set():
            accepted = _accepted(self.port)
            self.most_total = max(self.most_total, _sockets(self.pid) - self.baseline)
            self.most_per_client = max(self.most_per_client, max(accepted.values(), default=0))

    def close(self) -> None:
        self._stop.set()
        if self._sampler.is_alive():
            self._sampler.join(10)
        for sock in self.socks:
            sock.close()


class LimitedDaemon(DaemonProcess):
    """`gpuwatch run` under an open-file limit of ``OPEN_FILES`` (the shell's exec keeps the pid)."""

    def __init__(self, processes: Processes, tmp: Path, toml: str) -> None:
        self.runtime = tmp / "run"
        self.config = tmp / "gpuwatch.toml"
        self.write_config(toml)
        command = " ".join(shlex.quote(a) for a in [*GPUWATCH, "run", "-c", str(self.config)])
        self.child = processes.start("gpuwatch", ["sh", "-c", f"ulimit -n {OPEN_FILES} && exec {command}"])
        self.proc = self.child.process


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[DaemonProcess]:
    with Processes(tmp_path / "logs") as processes:
        yield LimitedDaemon(processes, tmp_path, f'interval_s = 0.2\n[http]\nlisten = "127.0.0.1"\nport = 0\n'
                                                 f'[simulate]\nenabled = true\ntree_dir = "{tmp_path / "tree"}"\n')


@pytest.mark.parametrize("connections", [1000, 1600])
def test_a_burst_of_idle_connections_never_holds_more_than_the_caps(daemon: DaemonProcess,
                                                                    connections: int) -> None:
    port = daemon.http_port()
    ticks = daemon.wait_state(lambda d: d["daemon"]["ticks_total"] > 0, "a first tick")["daemon"]["ticks_total"]
    burst = Burst(port, daemon.proc.pid)
    try:
        burst.open(connections)
        # Long enough for every connection to be accepted, cut at the 5 s request deadline or to make room.
        until = time.monotonic() + 8.0
        while time.monotonic() < until:
            time.sleep(0.2)
        # A scrape still gets in (the oldest idle connection makes room for it), and the loop still ticks
        # and publishes (its state file needs descriptors too).
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=30) as response:
            assert response.status == 200
        daemon.wait_state(lambda d: d["daemon"]["ticks_total"] > ticks + 10, "the daemon to tick on", 30)
    finally:
        burst.close()
    assert burst.most_total <= MAX_CONNECTIONS, burst.most_total
    # The burst did reach the server: more than one client's cap at once (on a loaded machine the 5 s request
    # deadline cuts the first connections before the last are accepted, so the peak may stay below the cap).
    assert burst.most_total > MAX_PER_CLIENT, burst.most_total
    assert burst.most_per_client <= MAX_PER_CLIENT + 1, burst.most_per_client  # + the one just accepted
    assert daemon.stop() == 0
    log = daemon.log()
    assert "out of system resource" not in log and "Too many open files" not in log, log[-3000:]
    assert "Traceback" not in log, log[-3000:]
