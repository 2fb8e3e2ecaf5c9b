"""The simulator's processes (a fake /proc the real monitor reads) and its GPU reset, as the kernel shows them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from gpuwatch.gpus.amdgpu import discover, read_card
from gpuwatch.model import PublishedState, Snapshot, TrainerPhase, TrainerState
from gpuwatch.procfs import Procfs
from gpuwatch.procs.monitor import ProcessMonitor
from gpuwatch.resets.uevent import parse, wedged
from gpuwatch.sim.cards import SimulatedGpus
from gpuwatch.sim.faults import SimFaults
from gpuwatch.sysfs import Sysfs
from tests.support.waiting import wait_for

SLOT = "0000:28:00.0"


@pytest.fixture
def child() -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    yield proc
    proc.kill()
    proc.wait()


def running(pid: int) -> PublishedState:
    trainer = TrainerState(name="t", phase=TrainerPhase.RUNNING, pid=pid, started_unix=time.time() - 10)
    return PublishedState(snapshot=Snapshot(0.0, 0.0, ()), trainers=(trainer,))


def test_the_trainer_and_a_desktop_client_show_in_the_fake_proc(tmp_path: Path, child: subprocess.Popen[bytes]) -> None:
    sim = SimulatedGpus(root=tmp_path / "sim", desktop_client=True)
    assert sim.proc_root == tmp_path / "sim-proc"
    sim.observe(running(child.pid))
    monitor = ProcessMonitor(Procfs(sim.proc_root), Sysfs(sim.root), 30.0)
    sim.advance_by(1.0)
    monitor.sample({"t": [child.pid]}, now=0.0)
    sim.clients.clients[4194404].engine_ns += 0.5e9  # the compositor drew for half a second
    sim.advance_by(1.0)
    rows = {r.pid: r for r in monitor.sample({"t": [child.pid]}, now=31.0)[0]}  # others: once per 30 s
    trainer, desktop = rows[child.pid], rows[4194404]
    assert trainer.trainer == "t" and trainer.gpu_id == SLOT and trainer.kfd and "time.sleep(60)" in trainer.command
    # ROCm: a little DRM VRAM and no engine time; the real use through KFD.
    assert trainer.vram_bytes == 12 * 2**20 and trainer.engine_busy_ratio == 0.0
    assert trainer.kfd_vram_bytes == 4 * 2**30 and trainer.kfd_cu_occupancy_ratio == 1.0
    assert desktop.trainer is None and desktop.command == "/usr/bin/gnome-shell" and not desktop.kfd
    assert desktop.engine_busy_ratio is not None and desktop.engine_busy_ratio > 0
    sim.observe(PublishedState(snapshot=Snapshot(0.0, 0.0, ())))  # the trainer is gone
    assert not (sim.proc_root / str(child.pid)).exists() and (sim.proc_root / "4194404").exists()
    assert not (sim.root / f"class/kfd/kfd/proc/{child.pid}").exists()


def test_a_reset_dumps_goes_mute_hangs_the_trainer_and_announces_recovery(
        tmp_path: Path, child: subprocess.Popen[bytes]) -> None:
    sim = SimulatedGpus(root=tmp_path / "sim", faults=SimFaults(gpu_reset_at_s=(10.0,), gpu_reset_outage_s=5.0,
                                                                 gpu_reset_stuck_s=30.0))
    sim.observe(running(child.pid))
    sim.advance_by(9.0)
    assert not (sim.root / "class/devcoredump/devcd1").exists()
    sim.advance_by(2.0)
    devcd = sim.root / "class/devcoredump/devcd1"
    assert os.path.realpath(devcd / "failing_device") == os.path.realpath(sim.root / "class/drm/card0/device")
    assert f"process_name: {psutil.Process(child.pid).name()} PID: {child.pid}" in (devcd / "data").read_text()
    wait_for(lambda: psutil.Process(child.pid).status() == psutil.STATUS_STOPPED, "the trainer to hang", 3)
    stat = (sim.proc_root / str(child.pid) / "stat").read_text()
    assert stat.split(") ")[1].startswith("D ")
    ghost = [pid for pid in os.listdir(sim.proc_root) if pid.isdigit() and int(pid) > 4194304]
    assert ghost and (sim.proc_root / ghost[0] / "stat").read_text().split(") ")[1].startswith("D ")
    sysfs = Sysfs(sim.root)
    gpu = read_card(sysfs, discover(sysfs).cards[0])
    assert gpu.gpu_busy_ratio is None and all(t.temp_c is None for t in gpu.temps)  # not answering
    events = [parse(e) for e in sim.take_uevents()]
    assert [(e[0], e[2]["SUBSYSTEM"]) for e in events if e] == [("add", "devcoredump")]
    sim.advance_by(5.0)  # the outage is over
    gpu = read_card(sysfs, discover(sysfs).cards[0])
    assert gpu.gpu_busy_ratio is not None and all(t.temp_c is not None for t in gpu.temps)
    (event,) = [w for e in sim.take_uevents() if (w := wedged(e))]
    assert (event.gpu_id, event.methods, event.pid) == (SLOT, "none", child.pid)
    (devcd / "data").write_text("1")  # dismissed, as gpuwatch does once it kept a copy
    sim.advance_by(1.0)
    assert not devcd.exists() and not (sim.root / "class/drm/card0/device/devcoredump").exists()
    sim.advance_by(30.0)
    assert not (sim.proc_root / ghost[0]).exists()  # the stuck leftover finally went away
    os.kill(child.pid, signal.SIGCONT)


def test_a_reset_on_request_from_another_thread(tmp_path: Path) -> None:
    sim = SimulatedGpus(root=tmp_path / "sim", count=2)
    assert sim.request_reset("0000:99:00.0") == (False, "no simulated GPU 0000:99:00.0 (they are 0000:28:00.0, "
                                                        "0000:2b:00.0)")
    assert sim.request_reset("0000:2b:00.0")[0]
    sim.advance_by(0.1)
    failing = os.path.realpath(sim.root / "class/devcoredump/devcd1/failing_device")
    assert failing == os.path.realpath(sim.root / "class/drm/card1/device")


def test_a_trainer_that_dies_at_once_never_opens_the_gpu(tmp_path: Path, child: subprocess.Popen[bytes]) -> None:
    sim = SimulatedGpus(root=tmp_path / "sim")
    trainer = TrainerState(name="t", phase=TrainerPhase.RUNNING, pid=child.pid, started_unix=time.time())
    sim.observe(PublishedState(snapshot=Snapshot(0.0, 0.0, ()), trainers=(trainer,)))
    assert not (sim.proc_root / str(child.pid)).exists()


def test_the_desktop_client_hangs_through_the_reset_and_leaves_d_state_once_it_is_over(tmp_path: Path) -> None:
    """The compositor is in D while the card is in reset, not forever (a forever-D holder keeps the GPU
    unusable, and the demo's trainer never came back): only the configured leftover stays stuck."""
    sim = SimulatedGpus(root=tmp_path / "sim", desktop_client=True, faults=SimFaults(gpu_reset_outage_s=5.0))
    desktop = sim.proc_root / "4194404"

    def state() -> str:
        return (desktop / "stat").read_text().split(") ")[1][0]

    sim.advance_by(1.0)
    assert state() == "S"
    sim.inject_reset()
    sim.advance_by(1.0)
    assert state() == "D" and (desktop / "task/4194404/stat").read_text().split(") ")[1][0] == "D"
    sim.advance_by(4.5)  # the outage is over: the driver signals the fences it waited on
    assert state() == "S" and (desktop / "task/4194404/stat").read_text().split(") ")[1][0] == "S"
    assert sim.clients.clients[4194404].hung is False
    monitor = ProcessMonitor(Procfs(sim.proc_root), Sysfs(sim.root), 30.0)
    rows = monitor.sample({}, now=0.0)[0]
    assert [r.state for r in rows if r.pid == 4194404] == ["S"]
