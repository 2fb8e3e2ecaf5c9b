"""Each stage of sensing who uses the GPUs and which GPU was reset runs in its own guard (issue 31 point 6):
a process scan, a uevent socket or a recovery step that raises never costs the devcoredump its count, the
trainers their restart, or the other stages their tick. The daemon ticks on a real-topology fake tree
with the kernel's devcoredump class played by tests' SimulatedResets; the fault is raised where it is
named (the scan and the recovery step by a subclass, the uevents by a real closed socket)."""

from __future__ import annotations

import socket
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

import pytest

from gpuwatch.config.file import Config, parse_config
from gpuwatch.daemon.compose import Parts
from gpuwatch.daemon.loop import Daemon
from gpuwatch.daemon.sense import GpuUseWatch, build_sources
from gpuwatch.model import GpuProcess, GpuResetState, Snapshot
from gpuwatch.procfs import Procfs
from gpuwatch.procs.monitor import ProcessMonitor
from gpuwatch.resets.devcoredump import DevCoredumps
from gpuwatch.resets.recovery import ResetEvent
from gpuwatch.resets.watch import ResetWatch
from gpuwatch.sim.proctree import RENDER_NODE, FakeProcTree, amdgpu_fdinfo
from gpuwatch.sim.resets import SimulatedResets
from gpuwatch.sim.tree import FakeCard, FakeSysfsTree
from gpuwatch.sysfs import Sysfs
from tests.support.trees import capture

SLOT = "0000:28:00.0"


class BrokenScan(ProcessMonitor):
    """The real monitor, raising while ``broken`` (a bug in the scan, or a kernel answer it chokes on)."""

    broken = False

    def sample(self, trees: Mapping[str, Iterable[int]], now: float, careful: frozenset[str] = frozenset(),
               now_unix: float | None = None) -> tuple[tuple[GpuProcess, ...], int]:
        if self.broken:
            raise OverflowError("int too large to convert to float")
        return super().sample(trees, now, careful, now_unix)


class BrokenRecovery(ResetWatch):
    broken = False

    def update(self, snapshot: Snapshot, events: Iterable[ResetEvent], processes: Iterable[GpuProcess],
               now: float, now_unix: float) -> tuple[GpuResetState, ...]:
        if self.broken:
            raise RuntimeError("a bug in the recovery step")
        return super().update(snapshot, events, processes, now, now_unix)


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[tuple[Daemon, SimulatedResets, BrokenScan, BrokenRecovery, socket.socket]]:
    tree = FakeSysfsTree(tmp_path / "sys")
    card: FakeCard = tree.add_capture(capture("navi10-rx5700xt-sapphire"))
    kernel = SimulatedResets(tree.root, [card.device_dir], [card.card])
    proc = FakeProcTree(tmp_path / "proc")
    proc.add_process(4243, comm="render", cmdline=("render",))
    proc.set_fd(4243, 5, RENDER_NODE, amdgpu_fdinfo(8, SLOT, vram_bytes=1 << 30))
    config: Config = parse_config({"sysfs_root": str(tree.root), "runtime_dir": str(tmp_path / "run"),
                                   "http": {"enabled": False}, "fan": {"mode": "monitor-only"}})
    monitor = BrokenScan(Procfs(proc.root), None, all_every_s=1e-9)  # every process, every tick
    uevents, peer = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    uevents.setblocking(False)

    def drain() -> list[bytes]:
        got = []
        while True:
            try:
                got.append(uevents.recv(65536))
            except BlockingIOError:
                return got

    resets = BrokenRecovery(DevCoredumps(Sysfs(tree.root), tmp_path / "dumps"), drain)
    daemon = Daemon(config, Parts(sources=build_sources(config), gpu_use=GpuUseWatch(monitor, resets)))
    try:
        yield daemon, kernel, monitor, resets, uevents
    finally:
        daemon.shutdown()
        uevents.close()
        peer.close()


def test_a_scan_that_raises_costs_the_reset_nothing(rig) -> None:
    daemon, kernel, monitor, _, _ = rig
    first = daemon.tick().snapshot
    assert first.resets[0].resets_total == 0 and [row.pid for row in first.processes] == [4243]
    monitor.broken = True
    kernel.inject(0, 0.0, 0.0, None, None)
    state = daemon.tick()
    (reset,) = state.snapshot.resets
    assert reset.resets_total == 1 and reset.last_source == "devcoredump"
    assert [f.split(":")[0] for f in state.daemon.failures] == ["process scan"]  # type: ignore[union-attr]
    assert "OverflowError" in state.daemon.failures[0]  # type: ignore[union-attr]
    monitor.broken = False
    state = daemon.tick()
    assert [row.pid for row in state.snapshot.processes] == [4243] and not state.daemon.failures  # type: ignore[union-attr]


def test_a_uevent_socket_that_raises_costs_the_devcoredump_nothing(rig) -> None:
    daemon, kernel, _, _, uevents = rig
    uevents.close()  # recv now raises OSError (EBADF), as a socket the kernel tore down would
    kernel.inject(0, 0.0, 0.0, None, None)
    state = daemon.tick()
    assert state.snapshot.resets[0].resets_total == 1
    assert [f.split(":")[0] for f in state.daemon.failures] == ["reset detection (uevents)"]  # type: ignore[union-attr]


def test_a_recovery_step_that_raises_counts_the_reset_on_the_next_tick(rig) -> None:
    daemon, kernel, _, resets, _ = rig
    daemon.tick()
    resets.broken = True
    kernel.inject(0, 0.0, 0.0, None, None)
    state = daemon.tick()
    assert [f.split(":")[0] for f in state.daemon.failures] == ["reset recovery"]  # type: ignore[union-attr]
    assert state.snapshot.processes  # the scan's rows are there all the same
    resets.broken = False
    state = daemon.tick()
    assert state.snapshot.resets[0].resets_total == 1 and not state.daemon.failures  # type: ignore[union-attr]
