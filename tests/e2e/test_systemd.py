"""The real daemon process under a systemd-like supervisor built by the test: a datagram socket as
$NOTIFY_SOCKET, a short $WATCHDOG_USEC, SIGHUP reloads and SIGTERM; plus a stuck tick in-process."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from gpuwatch.config.file import CONFIG_ERROR_EXIT, Config, parse_config
from gpuwatch.daemon.compose import Parts
from gpuwatch.daemon.loop import Daemon
from gpuwatch.daemon.sdnotify import Notifier
from gpuwatch.daemon.sense import build_sources
from gpuwatch.model import FanState, Snapshot
from gpuwatch.sim.tree import FakeSysfsTree
from tests.support.trees import capture
from tests.support.waiting import wait_for

GPUWATCH = [sys.executable, "-m", "gpuwatch.cli"]


def write_config(
    path: Path, runtime: Path, interval_s: float = 0.1, edge_limit_c: float = 90.0, extra: str = ""
) -> None:
    path.write_text(
        f'interval_s = {interval_s}\nruntime_dir = "{runtime}"\n{extra}\n'
        f"[thermal]\nedge_limit_c = {edge_limit_c}\n"
        '[fan]\nmode = "monitor-only"\n[http]\nenabled = false\n'
    )


class Daemon_:
    """A `gpuwatch run` child with a bound notify socket; always stopped and reaped."""

    def __init__(self, tmp: Path, sys_root: Path, address: str, env_socket: str, watchdog_usec: int = 300_000) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(address)
        self.runtime = tmp / "run"
        self.config = tmp / "gpuwatch.toml"
        write_config(self.config, self.runtime)
        self.stderr_path = tmp / "stderr.log"
        env = dict(os.environ, NOTIFY_SOCKET=env_socket, WATCHDOG_USEC=str(watchdog_usec), PYTHONUNBUFFERED="1")
        env.pop("WATCHDOG_PID", None)
        with open(self.stderr_path, "wb") as err:
            self.proc = subprocess.Popen(
                [*GPUWATCH, "run", "--sysfs-root", str(sys_root), "-c", str(self.config)],
                env=env, stdout=subprocess.DEVNULL, stderr=err,
            )
        self.messages: list[str] = []

    def collect(self, until: Callable[[list[str]], bool], timeout_s: float = 10.0) -> list[str]:
        end = time.monotonic() + timeout_s
        while not until(self.messages):
            left = end - time.monotonic()
            assert left > 0, f"timed out; got {self.messages!r}; stderr: {self.stderr()}"
            self.sock.settimeout(min(left, 0.5))
            try:
                self.messages.append(self.sock.recv(4096).decode())
            except TimeoutError:
                assert self.proc.poll() is None or until(self.messages), f"daemon exited: {self.stderr()}"
        return self.messages

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def state(self) -> dict:
        return json.loads((self.runtime / "state.json").read_text())

    def stop(self) -> int:
        """SIGTERM, reap, then read what the daemon sent on its way out (datagrams stay queued)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=10)
        finally:
            self.sock.setblocking(False)
            while True:
                try:
                    self.messages.append(self.sock.recv(4096).decode())
                except BlockingIOError:
                    break
            self.sock.close()


@pytest.fixture
def sys_root(fake_sysfs: FakeSysfsTree) -> Path:
    fake_sysfs.add_capture(capture("navi21-rx6900xt-sapphire-nitro"))
    return fake_sysfs.root


@pytest.fixture
def daemon(tmp_path: Path, sys_root: Path) -> Iterator[Daemon_]:
    running = Daemon_(tmp_path, sys_root, str(tmp_path / "notify.sock"), str(tmp_path / "notify.sock"))
    try:
        yield running
    finally:
        if running.proc.poll() is None:
            running.proc.kill()
            running.proc.wait(timeout=10)
        running.sock.close()


def kinds(messages: list[str]) -> list[str]:
    return [m.splitlines()[0].split("=")[0] for m in messages]


def test_ready_status_watchdog_stopping_in_order(daemon: Daemon_, sys_root: Path) -> None:
    daemon.collect(lambda m: kinds(m).count("WATCHDOG") >= 3)
    ready = daemon.messages[0]
    assert ready.startswith("READY=1\nSTATUS=1 GPU, hottest ")  # READY carries the first summary
    assert daemon.state()["daemon"]["ticks_total"] >= 1  # READY only after a full tick was published

    # A new hottest temperature changes the summary: one STATUS=, not one per tick.
    edge = next(sys_root.glob("class/hwmon/*/temp1_input"))
    edge.write_text("97000\n")
    daemon.collect(lambda m: any("edge 97°C" in x for x in m if x.startswith("STATUS=")))
    daemon.collect(lambda m: kinds(m).count("WATCHDOG") >= 5)
    assert sum("edge 97°C" in x for x in daemon.messages) == 1

    assert daemon.stop() == 0
    got = kinds(daemon.messages)
    assert got[0] == "READY" and got[-1] == "STOPPING" and got.count("STOPPING") == 1
    assert set(got[1:-1]) == {"STATUS", "WATCHDOG"}
    assert "STATUS" in got


def test_abstract_namespace_notify_socket(tmp_path: Path, sys_root: Path) -> None:
    name = f"gpuwatch-test-{uuid.uuid4().hex}"
    running = Daemon_(tmp_path, sys_root, "\0" + name, "@" + name)
    try:
        running.collect(lambda m: "WATCHDOG" in kinds(m))
        assert kinds(running.messages)[0] == "READY"
        assert running.stop() == 0
        assert kinds(running.messages)[-1] == "STOPPING"
    finally:
        if running.proc.poll() is None:
            running.proc.kill()
            running.proc.wait(timeout=10)
        running.sock.close()


def test_sighup_applies_a_valid_config_and_rejects_an_invalid_one(daemon: Daemon_) -> None:
    daemon.collect(lambda m: "WATCHDOG" in kinds(m))
    assert daemon.state()["daemon"]["interval_s"] == 0.1

    write_config(daemon.config, daemon.runtime, interval_s=0.2, edge_limit_c=42.0)
    daemon.proc.send_signal(signal.SIGHUP)
    # Waits drain the notify socket (collect): a full datagram queue (10 here) blocks the daemon's sd_notify.
    daemon.collect(lambda _: daemon.state()["daemon"]["interval_s"] == 0.2)  # the new interval in the state file
    gpu = daemon.state()["gpus"][0]
    assert gpu["temperatures"]["edge"]["limit_c"] == 42.0
    assert "edge" in gpu["over_limit"]
    after_valid = daemon.collect(lambda m: "READY" in kinds(m)[1:])
    reload_at = kinds(after_valid).index("RELOADING")
    assert kinds(after_valid)[reload_at + 1 :].count("READY") == 1

    daemon.config.write_text("interval_s = -1\nno_such_key = true\n")
    daemon.proc.send_signal(signal.SIGHUP)
    daemon.collect(lambda _: "config reload rejected" in daemon.stderr())
    assert "interval_s = -1" in daemon.stderr() and "no_such_key" in daemon.stderr()
    ticks = daemon.state()["daemon"]["ticks_total"]
    daemon.collect(lambda _: daemon.state()["daemon"]["ticks_total"] > ticks + 2)  # ticks after the rejected reload
    assert daemon.proc.poll() is None
    assert daemon.state()["daemon"]["interval_s"] == 0.2  # the previous (valid) config keeps running
    daemon.collect(lambda m: kinds(m).count("RELOADING") == 2 and kinds(m).count("READY") == 3)
    assert daemon.stop() == 0
    assert kinds(daemon.messages)[-1] == "STOPPING"


def test_config_error_at_startup_exits_2(tmp_path: Path, sys_root: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("interval_s = 0\n")
    done = subprocess.run([*GPUWATCH, "run", "--sysfs-root", str(sys_root), "-c", str(bad)],
                          capture_output=True, timeout=30)
    assert done.returncode == CONFIG_ERROR_EXIT == 2
    assert b"interval_s" in done.stderr


class StuckFans:
    """A fan consumer whose tick blocks while ``stuck`` is set: a hung control loop."""

    def __init__(self) -> None:
        self.stuck = threading.Event()
        self.release = threading.Event()
        self.entered = threading.Event()

    def tick(self, snapshot: Snapshot, config: Config) -> tuple[FanState, ...]:
        if self.stuck.is_set():
            self.entered.set()
            self.release.wait(10)
        return ()

    def restore(self) -> None:
        pass


def test_a_stuck_tick_stops_the_watchdog_pings(tmp_path: Path, sys_root: Path) -> None:
    config = parse_config({"interval_s": 0.05, "runtime_dir": str(tmp_path / "run"), "sysfs_root": str(sys_root)})
    fans = StuckFans()
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(str(tmp_path / "n"))
        sock.settimeout(0.05)
        daemon = Daemon(config, Parts(sources=build_sources(config), fans=fans),
                        notifier=Notifier(str(tmp_path / "n"), 0.1))
        loop = threading.Thread(target=daemon.run)
        loop.start()
        try:
            def drain(duration_s: float) -> list[str]:
                got, end = [], time.monotonic() + duration_s
                while time.monotonic() < end:
                    try:
                        got.append(sock.recv(4096).decode())
                    except TimeoutError:
                        pass
                return kinds(got)

            assert drain(0.4).count("WATCHDOG") >= 3
            fans.stuck.set()
            assert fans.entered.wait(5)
            drain(0.06)  # a ping already in flight when the tick got stuck
            assert "WATCHDOG" not in drain(0.4)
            fans.stuck.clear()
            fans.release.set()
            assert drain(0.4).count("WATCHDOG") >= 2
        finally:
            fans.release.set()
            daemon.request_stop()
            loop.join(10)
    assert not loop.is_alive()


def test_execstoppost_fans_auto_after_a_rejected_reload_and_sigkill(tmp_path: Path, fake_sysfs: FakeSysfsTree) -> None:
    """What systemd does after a crash: the daemon took the fan, its config file went bad (the reload
    was rejected), it died by SIGKILL; `fans-auto --config <that file>` must still give the fan back."""
    card = fake_sysfs.add_capture(capture("navi21-rx6900xt-sapphire-nitro"))
    assert card.hwmon_dir
    enable = fake_sysfs.root / card.hwmon_dir / "pwm1_enable"
    run_dir = tmp_path / "run"  # systemd's RuntimeDirectory=, passed as $RUNTIME_DIRECTORY
    config = tmp_path / "gpuwatch.toml"
    config.write_text("interval_s = 0.05\n[http]\nenabled = false\n")
    env = dict(os.environ, RUNTIME_DIRECTORY=str(run_dir))
    with open(tmp_path / "stderr.log", "wb") as err:
        proc = subprocess.Popen([*GPUWATCH, "run", "-c", str(config), "--sysfs-root", str(fake_sysfs.root)],
                                env=env, stdout=subprocess.DEVNULL, stderr=err)
    try:
        wait_for(lambda: enable.read_text().strip() == "1", "the daemon to take manual fan control")
        config.write_text("interval_s = 'fast'\n")
        proc.send_signal(signal.SIGHUP)
        wait_for(lambda: "config reload rejected" in (tmp_path / "stderr.log").read_text(), "the rejected reload")
    finally:
        proc.kill()
        proc.wait(timeout=10)
    assert enable.read_text().strip() == "1"  # nobody gave it back yet
    done = subprocess.run([*GPUWATCH, "fans-auto", "--config", str(config), "--sysfs-root", str(fake_sysfs.root)],
                          env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert "interval_s" in done.stderr and "using the default settings" in done.stderr
    assert enable.read_text().strip() == "2"
