"""The process monitor on fake /proc trees with the kernel's layout (gpuwatch/sim/proctree.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuwatch.model import GpuProcess
from gpuwatch.procfs import ProcError, Procfs
from gpuwatch.procs.monitor import ProcessMonitor
from gpuwatch.sim.proctree import KFD_NODE, RENDER_NODE, FakeProcTree, amdgpu_fdinfo
from gpuwatch.sim.tree import FakeSysfsTree
from gpuwatch.sysfs import Sysfs
from tests.support.paths import TESTS

A, B = "0000:0b:00.0", "0000:0e:00.0"
MIB = 1024**2


@pytest.fixture
def proc(tmp_path: Path) -> FakeProcTree:
    return FakeProcTree(tmp_path / "proc")


def trainer_tree(proc: FakeProcTree) -> None:
    """A trainer (4242) with the client dup'd on fds 7 and 9, a DataLoader child (4300) that inherited it,
    and a second client of its own on GPU B; plus /dev/kfd, a pipe and a dma-buf fd that are not DRM."""
    proc.add_process(4242, comm="pt_main_thread", cmdline=["python3", "train.py"], threads={4251: "S"})
    shared = amdgpu_fdinfo(217, A, vram_bytes=4096 * MIB, gtt_bytes=64 * MIB, engines_ns={"gfx": 10**9})
    proc.set_fd(4242, 0, "pipe:[3311]")
    proc.set_fd(4242, 5, KFD_NODE)
    proc.set_fd(4242, 7, RENDER_NODE, shared)
    proc.set_fd(4242, 9, RENDER_NODE, shared)
    proc.set_fd(4242, 11, "/dmabuf:")
    proc.set_fd(4242, 12, "/dev/dri/renderD129", amdgpu_fdinfo(218, B, vram_bytes=10 * MIB))
    proc.add_process(4300, comm="pt_data_worker", cmdline=["python3", "train.py"], ppid=4242)
    proc.set_fd(4300, 7, RENDER_NODE, shared)


def by_pid_gpu(rows: tuple[GpuProcess, ...]) -> dict[tuple[int, str], GpuProcess]:
    return {(r.pid, r.gpu_id): r for r in rows}


def test_a_client_on_several_fds_and_pids_is_counted_once(proc: FakeProcTree) -> None:
    trainer_tree(proc)
    rows, unreadable = ProcessMonitor(Procfs(proc.root), None, 30.0).sample({"resnet": [4242, 4300]}, now=0.0)
    got = by_pid_gpu(rows)
    assert set(got) == {(4242, A), (4242, B), (4300, A)} and unreadable == 0
    leader, worker = got[(4242, A)], got[(4300, A)]
    assert (leader.vram_bytes, leader.gtt_bytes, leader.trainer) == (4096 * MIB, 64 * MIB, "resnet")
    assert leader.command == "python3 train.py" and leader.kfd and leader.state == "S"
    # The worker holds the same client: listed (it holds the GPU), its memory not counted again.
    assert (worker.vram_bytes, worker.gtt_bytes, worker.trainer) == (None, None, "resnet")
    assert got[(4242, B)].vram_bytes == 10 * MIB


def test_engine_busy_is_engine_time_over_wall_time_and_never_steps_back(proc: FakeProcTree) -> None:
    proc.add_process(4242)
    monitor = ProcessMonitor(Procfs(proc.root), None, 30.0)
    for at, ns, busy in ((0.0, 10**9, None), (2.0, 2 * 10**9, 0.5), (3.0, 1 * 10**9, 0.0), (4.0, 2.5 * 10**9, 0.5)):
        proc.set_fd(4242, 7, RENDER_NODE, amdgpu_fdinfo(1, A, engines_ns={"gfx": int(ns)}))
        (row,) = monitor.sample({"t": [4242]}, now=at)[0]
        assert row.engine_busy_ratio == busy, at


def test_other_drivers_old_kernels_and_unbound_devices_are_not_clients(proc: FakeProcTree) -> None:
    for pid, name in ((6000, "i915.txt"), (6001, "amdxdna.txt"), (6002, "amdgpu-5.15-pre-standard.txt"),
                      (6003, "amdgpu-unplugged.txt")):
        proc.add_process(pid)
        target = RENDER_NODE + (" (deleted)" if pid == 6003 else "")
        proc.set_fd(pid, 4, target, (TESTS / "fixtures" / "fdinfo" / name).read_text())
    proc.add_process(6010, state="Z", cmdline=[])  # a zombie: no fds left
    assert ProcessMonitor(Procfs(proc.root), None, 30.0).sample({}, now=0.0) == ((), 0)


class Racing(Procfs):
    """Processes that vanish between the fd listing and the reads, and one whose fds we may not list."""

    def __init__(self, tree: FakeProcTree) -> None:
        super().__init__(tree.root)
        self.tree = tree
        self.vanish: set[int] = set()

    def fds(self, pid: int) -> list[tuple[int, str]] | None:
        if pid == 5000:
            raise ProcError(f"/proc/{pid}/fd", "EACCES")  # another user's Xorg, no CAP_SYS_PTRACE
        found = super().fds(pid)
        if pid in self.vanish:
            self.tree.remove(pid)  # exits right after its fds were listed
        return found


def test_vanishing_and_unreadable_processes_are_skipped(proc: FakeProcTree) -> None:
    trainer_tree(proc)
    for pid in (5000, 7000):
        proc.add_process(pid, comm="Xorg", cmdline=["/usr/lib/xorg/Xorg"])
        proc.set_fd(pid, 3, "/dev/dri/card0", amdgpu_fdinfo(pid, A, vram_bytes=MIB))
    procfs = Racing(proc)
    procfs.vanish = {7000, 4300}
    monitor = ProcessMonitor(procfs, None, 30.0)
    rows, unreadable = monitor.sample({"resnet": [4242, 4300]}, now=0.0)
    assert {(r.pid, r.gpu_id) for r in rows} == {(4242, A), (4242, B)} and unreadable == 1
    proc.remove(4242)  # the trainer exits between two ticks
    assert monitor.sample({"resnet": [4242]}, now=1.0) == ((), 1)


def test_unsupervised_processes_are_read_at_the_slower_cadence(proc: FakeProcTree) -> None:
    proc.add_process(4242)
    proc.set_fd(4242, 7, RENDER_NODE, amdgpu_fdinfo(1, A))
    for pid in range(100, 120):
        proc.add_process(pid, comm="desktop", cmdline=["desktop"])
        proc.set_fd(pid, 3, RENDER_NODE, amdgpu_fdinfo(pid, A))
    monitor = ProcessMonitor(Procfs(proc.root), None, all_every_s=10.0)
    first, _ = monitor.sample({"t": [4242]}, now=0.0, now_unix=1000.0)
    assert len(first) == 21  # the first round is whole
    ages = []
    for tick in range(1, 11):
        rows, _ = monitor.sample({"t": [4242]}, now=float(tick), now_unix=1000.0 + tick)
        ages.append(sorted({(r.sampled_unix or 0) - 1000 for r in rows if r.pid != 4242}))
        assert [r.sampled_unix for r in rows if r.pid == 4242] == [1000.0 + tick]  # the tree: every tick
    # About a tenth of the other processes per tick (2 of 20, plus /proc's other entries), all within the round.
    assert ages[0] == [0.0, 1.0] and max(ages[-1]) == 10.0 and min(ages[-1]) >= 1.0


def test_kfd_per_process_files_add_rocm_memory_and_occupancy(proc: FakeProcTree, fake_sysfs: FakeSysfsTree) -> None:
    proc.add_process(4242)
    proc.set_fd(4242, 5, KFD_NODE)
    proc.set_fd(4242, 7, RENDER_NODE, amdgpu_fdinfo(1, A, vram_bytes=8 * MIB))  # ROCm: no engine time
    fake_sysfs.write("class/kfd/kfd/topology/nodes/0/gpu_id", "0\n")  # the CPU node
    fake_sysfs.write("class/kfd/kfd/topology/nodes/0/properties", "cpu_cores_count 16\nsimd_count 0\n")
    fake_sysfs.write("class/kfd/kfd/topology/nodes/1/gpu_id", "51234\n")
    fake_sysfs.write("class/kfd/kfd/topology/nodes/1/properties",
                     f"simd_count 72\nsimd_per_cu 2\nlocation_id {0x0b << 8}\ndomain 0\n")
    fake_sysfs.write("class/kfd/kfd/proc/4242/vram_51234", f"{6 * 1024 * MIB}\n")
    fake_sysfs.write("class/kfd/kfd/proc/4242/stats_51234/cu_occupancy", "27\n")
    (row,) = ProcessMonitor(Procfs(proc.root), Sysfs(fake_sysfs.root), 30.0).sample({"t": [4242]}, now=0.0)[0]
    assert (row.gpu_id, row.kfd, row.vram_bytes, row.kfd_vram_bytes) == (A, True, 8 * MIB, 6 * 1024 * MIB)
    assert row.kfd_cu_occupancy_ratio == 27 / 36 and row.engine_busy_ratio is None


class Recording(Procfs):
    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.reads: list[str] = []

    def read(self, pid: int, name: str) -> str | None:
        self.reads.append(f"{pid}/{name}")
        return super().read(pid, name)


def test_a_resetting_gpu_is_not_read_and_its_holders_threads_are_checked_for_d_state(proc: FakeProcTree) -> None:
    trainer_tree(proc)
    procfs = Recording(proc.root)
    monitor = ProcessMonitor(procfs, None, 30.0)
    monitor.sample({"resnet": [4242, 4300]}, now=0.0)
    proc.set_state(4242, "D", tid=4251)  # a worker thread waits on the GPU; the main thread sleeps in S
    procfs.reads.clear()
    rows, _ = monitor.sample({"resnet": [4242, 4300]}, now=1.0, careful=frozenset({A}))
    assert "4242/fdinfo/7" not in procfs.reads and "4242/fdinfo/12" in procfs.reads  # GPU B is still read
    got = by_pid_gpu(rows)
    assert got[(4242, A)].state == "D" and got[(4242, A)].vram_bytes == 4096 * MIB  # the last known value
    assert got[(4242, A)].engine_busy_ratio is None


def test_a_reused_pid_is_a_new_process(proc: FakeProcTree) -> None:
    proc.add_process(4242, cmdline=["python3", "old.py"], start_ticks=100)
    proc.set_fd(4242, 7, RENDER_NODE, amdgpu_fdinfo(1, A))
    monitor = ProcessMonitor(Procfs(proc.root), None, 30.0)
    assert monitor.sample({"t": [4242]}, now=0.0)[0][0].command == "python3 old.py"
    proc.add_process(4242, cmdline=["python3", "new.py"], start_ticks=900)
    proc.set_fd(4242, 7, RENDER_NODE, amdgpu_fdinfo(2, A))
    assert monitor.sample({"t": [4242]}, now=1.0)[0][0].command == "python3 new.py"


def test_a_rocm_process_is_seen_at_once_through_kfds_process_list(
    proc: FakeProcTree, fake_sysfs: FakeSysfsTree
) -> None:
    for pid in range(100, 400):
        proc.add_process(pid, cmdline=["idle"])
    monitor = ProcessMonitor(Procfs(proc.root), Sysfs(fake_sysfs.root), all_every_s=30.0)
    assert monitor.sample({}, now=0.0) == ((), 0)
    proc.add_process(5555, cmdline=["python3", "infer.py"])
    proc.set_fd(5555, 5, KFD_NODE)
    proc.set_fd(5555, 7, RENDER_NODE, amdgpu_fdinfo(9, A, vram_bytes=MIB))
    fake_sysfs.write("class/kfd/kfd/proc/5555/pasid", "32770\n")  # amdkfd lists it the moment it opens /dev/kfd
    (row,) = monitor.sample({}, now=1.0)[0]  # a 30 s round would reach pid 5555 only much later
    assert (row.pid, row.kfd, row.vram_bytes) == (5555, True, MIB)


def test_a_shared_client_is_read_once_per_tick_and_every_fd_again_every_two_seconds(proc: FakeProcTree) -> None:
    trainer_tree(proc)
    procfs = Recording(proc.root)
    monitor = ProcessMonitor(procfs, None, 30.0)
    monitor.sample({"resnet": [4242, 4300]}, now=0.0)
    procfs.reads.clear()
    monitor.sample({"resnet": [4242, 4300]}, now=1.0)
    assert sorted(r for r in procfs.reads if "fdinfo" in r) == ["4242/fdinfo/12", "4242/fdinfo/7"]  # not 9, 4300's 7
    # The worker closed its inherited fd and opened its own client under the same number.
    proc.set_fd(4300, 7, RENDER_NODE, amdgpu_fdinfo(300, A, vram_bytes=5 * MIB))
    assert by_pid_gpu(monitor.sample({"resnet": [4242, 4300]}, now=1.5)[0])[(4300, A)].vram_bytes is None
    assert by_pid_gpu(monitor.sample({"resnet": [4242, 4300]}, now=2.0)[0])[(4300, A)].vram_bytes == 5 * MIB


class Counting(Procfs):
    """Counts whose fds were listed."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.listed: list[int] = []

    def fds(self, pid: int) -> list[tuple[int, str]] | None:
        self.listed.append(pid)
        return super().fds(pid)


def test_processes_without_gpu_files_are_listed_every_fourth_round_and_still_seen(proc: FakeProcTree) -> None:
    for pid in range(100, 140):
        proc.add_process(pid, cmdline=["idle"])
    procfs = Counting(proc.root)
    monitor = ProcessMonitor(procfs, None, all_every_s=30.0)
    seen_at = None
    for tick in range(0, 160):
        if tick == 5:  # a long-running process opens the GPU late (no KFD: a Vulkan or OpenGL client)
            proc.set_fd(110, 9, RENDER_NODE, amdgpu_fdinfo(7, A, vram_bytes=MIB))
        rows, _ = monitor.sample({}, now=float(tick))
        if seen_at is None and rows:
            seen_at = tick
    assert seen_at is not None and seen_at <= 4 * 30 + 30
    idle = [pid for pid in procfs.listed if pid != 110]
    assert len(idle) <= 40 + 40 * (160 // 30 + 2) // 4, len(idle)  # the first round, then every fourth


def test_a_tree_pid_without_gpu_files_is_listed_every_two_seconds_a_new_one_at_once(proc: FakeProcTree) -> None:
    proc.add_process(4242, comm="python3")
    proc.add_process(4243, comm="python3")
    procfs = Counting(proc.root)
    monitor = ProcessMonitor(procfs, None, all_every_s=0.0)  # no rounds: only the trees are listed
    assert monitor.sample({"t": [4242]}, now=0.0) == ((), 0) and procfs.listed == [4242]
    proc.set_fd(4242, 7, RENDER_NODE, amdgpu_fdinfo(1, A))  # opens the GPU late
    assert monitor.sample({"t": [4242]}, now=1.0) == ((), 0) and procfs.listed == [4242]  # not listed again yet
    monitor.sample({"t": [4242, 4243]}, now=1.5)
    assert procfs.listed == [4242, 4243]  # a new pid of the tree: at once
    rows, _ = monitor.sample({"t": [4242, 4243]}, now=2.0)
    assert procfs.listed == [4242, 4243, 4242] and [(r.pid, r.trainer) for r in rows] == [(4242, "t")]
    monitor.sample({"t": [4242]}, now=2.5)  # 4243 left the tree: forgotten, listed at once when back
    monitor.sample({"t": [4242, 4243]}, now=2.6)
    assert procfs.listed == [4242, 4243, 4242, 4243]
