"""Faults of the loop's sensing and exit path, injected into a real `gpuwatch run` on real-topology fake trees
(docs/robustness.md, issue 31): a hostile fdinfo while a GPU resets, an empty ``power1_cap`` at the first
tick, a GPU back under a new card number announced by a kernel uevent, and SIGTERM with ``power1_cap``
hanging (a FIFO)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpuwatch.sim.proctree import RENDER_NODE, FakeProcTree, amdgpu_fdinfo, generic_fdinfo
from gpuwatch.sim.resets import SimulatedResets
from gpuwatch.sim.tree import FakeCard, FakeSysfsTree
from tests.support.daemon_process import DaemonProcess, read_state
from tests.support.processes import Processes
from tests.support.stack import GPUWATCH
from tests.support.trees import capture
from tests.support.waiting import wait_for

NAVI10 = "navi10-rx5700xt-sapphire"
SLOT = "0000:28:00.0"  # the capture's slot
ORIGINAL_CAP_UW = 220_000_000


@pytest.fixture
def navi10(tmp_path: Path) -> tuple[FakeSysfsTree, FakeCard]:
    tree = FakeSysfsTree(tmp_path / "sys")
    return tree, tree.add_capture(capture(NAVI10))


@pytest.fixture
def processes(tmp_path: Path) -> Iterator[Processes]:
    with Processes(tmp_path / "logs") as started:
        yield started


def _gpu(document: dict[str, Any]) -> dict[str, Any]:
    (gpu,) = document["gpus"]
    return gpu


def _ticks(daemon: DaemonProcess) -> int:
    document = daemon.state()
    return -1 if document is None else int(document["daemon"]["ticks_total"])


def _metrics(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        assert response.status == 200
        return response.read().decode()


# ---- a hostile fdinfo while the GPU resets (issue 31 points 6 and 7) ----

HUGE = 10**399  # 400 digits: no u64, and no float can carry it


def _hostile(value: int) -> str:
    """An amdgpu client whose engine time and VRAM are 400-digit numbers (each write a larger one)."""
    return generic_fdinfo() + (f"drm-driver:\tamdgpu\ndrm-client-id:\t7\ndrm-pdev:\t{SLOT}\n"
                               f"drm-resident-vram:\t{value} KiB\ndrm-engine-gfx:\t{value} ns\n")


def test_a_hostile_fdinfo_costs_neither_the_reset_the_restart_the_process_rows_nor_metrics(
        tmp_path: Path, navi10: tuple[FakeSysfsTree, FakeCard], processes: Processes) -> None:
    tree, card = navi10
    kernel = SimulatedResets(tree.root, [card.device_dir], [card.card])
    proc = FakeProcTree(tmp_path / "proc")
    proc.add_process(4242, comm="miner", cmdline=("miner",))
    proc.set_fd(4242, 5, RENDER_NODE, _hostile(HUGE))
    proc.add_process(4243, comm="render", cmdline=("render",))
    proc.set_fd(4243, 5, RENDER_NODE, amdgpu_fdinfo(8, SLOT, vram_bytes=1 << 30, engines_ns={"gfx": 10**9}))
    sleeper = tmp_path / "sleeper.py"
    sleeper.write_text("import time\nwhile True:\n    time.sleep(0.05)\n")
    user = __import__("pwd").getpwuid(os.geteuid()).pw_name
    daemon = DaemonProcess(processes, tmp_path, tree.root, (
        f'interval_s = 0.1\nproc_root = "{proc.root}"\n[fan]\nmode = "monitor-only"\n'
        '[http]\nlisten = "127.0.0.1"\nport = 0\n[processes]\nscan_all_every_s = 0.1\n'
        f'[resets]\ndump_dir = "{tmp_path / "dumps"}"\nuevents = false\n'
        f'[[trainer]]\nname = "sleeper"\ncommand = ["{sys.executable}", "{sleeper}"]\ncwd = "{tmp_path}"\n'
        f'user = "{user}"\nhang_timeout_s = 3600\ngpu_reset_grace_s = 1\n'))
    port = daemon.http_port()
    daemon.wait_state(lambda d: d["trainers"][0]["phase"] == "running" and len(d["processes"]) == 2,
                      "the trainer running and both GPU clients listed")

    # The hostile client's counters grow on every read, as a busy client's would (an engine delta of a
    # 400-digit number is what overflowed float() in the scan).
    stop = threading.Event()

    def grow() -> None:
        value = HUGE
        while not stop.wait(0.02):
            value += 10**398
            (proc.root / "4242/fdinfo/5").write_text(_hostile(value))

    grower = threading.Thread(target=grow)
    grower.start()
    try:
        ticks = _ticks(daemon)
        wait_for(lambda: _ticks(daemon) > ticks + 5, "ticks reading the growing counters", 30)
        kernel.inject(0, 0.0, 0.0, None, None)  # the GPU resets: its devcoredump appears
        after = daemon.wait_state(lambda d: dict(d["trainers"][0]["restarts_by_reason"]).get("gpu_reset") == 1
                                  and d["trainers"][0]["phase"] == "running", "the trainer restarted for the reset",
                                  timeout_s=60)
    finally:
        stop.set()
        grower.join()
    reset = _gpu(after)["reset"]
    assert reset["resets_total"] == 1 and reset["last_source"] == "devcoredump"
    rows = {row["pid"]: row for row in after["processes"]}
    assert set(rows) == {4242, 4243}
    assert rows[4242]["vram_bytes"] is None  # not a u64: no value
    assert rows[4243]["vram_bytes"] == 1 << 30
    text = _metrics(port)
    assert f'gpuwatch_gpu_resets_total{{gpu="{SLOT}"}} 1.0' in text
    assert f'gpuwatch_gpu_processes{{gpu="{SLOT}",job_id="",scope="unsupervised"}} 2.0' in text
    assert f'gpuwatch_gpu_processes_vram_bytes{{gpu="{SLOT}",job_id="",scope="unsupervised"}} 1.073741824e+09' in text
    assert not after["daemon"]["failures"], after["daemon"]["failures"]
    assert daemon.stop() == 0
    assert "Traceback" not in daemon.log()


# ---- an empty power1_cap at the first tick (issue 31 point 12) ----

def test_an_empty_power1_cap_at_the_first_tick_is_probed_again_and_then_governed(
        tmp_path: Path, navi10: tuple[FakeSysfsTree, FakeCard], processes: Processes) -> None:
    tree, card = navi10
    cap = tree.root / str(card.hwmon_dir) / "power1_cap"
    cap.write_text("\n")  # the kernel's answer when the SMU's limit query fails
    tree.write(f"{card.hwmon_dir}/temp2_input", "100000\n")  # junction 100 °C: the fan tops out, the cap must fall
    daemon = DaemonProcess(processes, tmp_path, tree.root, "interval_s = 0.1\n[http]\nenabled = false\n")
    waiting = daemon.wait_state(lambda d: d["daemon"]["ticks_total"] >= 3, "three ticks with the cap unreadable")
    power = _gpu(waiting)["power_governor"]
    assert power["mode"] != "unavailable" and "not known yet" in (power["reason"] or ""), power
    assert cap.read_text() == "\n"  # nothing written while the cap in force is unknown

    cap.write_text(f"{ORIGINAL_CAP_UW}\n")  # the SMU answers again
    wait_for(lambda: int(cap.read_text().strip() or ORIGINAL_CAP_UW) < ORIGINAL_CAP_UW, "the governor to lower the cap",
             30, detail=daemon.child.tail)
    assert daemon.log().count("power cap not known yet") == 1  # said once, not every tick
    assert daemon.stop() == 0
    assert int(cap.read_text()) == ORIGINAL_CAP_UW  # given back


# ---- SIGTERM with power1_cap hanging ----

def test_sigterm_exits_with_power1_cap_hanging_and_leaves_the_record(
        tmp_path: Path, navi10: tuple[FakeSysfsTree, FakeCard], processes: Processes) -> None:
    tree, card = navi10
    hwmon = tree.root / str(card.hwmon_dir)
    tree.write(f"{card.hwmon_dir}/temp2_input", "100000\n")
    daemon = DaemonProcess(processes, tmp_path, tree.root, "interval_s = 0.1\n[http]\nenabled = false\n")
    wait_for(lambda: int((hwmon / "power1_cap").read_text().strip() or ORIGINAL_CAP_UW) < ORIGINAL_CAP_UW,
             "the governor to lower the cap", 30, detail=daemon.child.tail)
    assert (hwmon / "pwm1_enable").read_text().strip() == "1"
    # power1_cap stops answering (reads and writes): open() of a FIFO blocks like the stuck driver call.
    (hwmon / "power1_cap").unlink()
    os.mkfifo(hwmon / "power1_cap")
    daemon.wait_log("sysfs reads did not return")

    assert daemon.stop(timeout_s=30) == 0
    assert (hwmon / "pwm1_enable").read_text().strip() == "2"  # the fan went back to the firmware
    assert SLOT in (daemon.runtime / "power-restore.json").read_text()  # kept for `gpuwatch restore`
    assert "power writes blocked" in daemon.log()
    assert "gpuwatch stopped" in daemon.log()
    assert "Traceback" not in daemon.log()  # the cap that did not go back is one line, the record named


# ---- a GPU back under a new card number, announced by a uevent (issue 31 "Also") ----

def _own_netns() -> bool:
    """Whether this test may run the daemon in a network namespace of its own (root, unshare(1))."""
    if os.geteuid() != 0 or shutil.which("unshare") is None or shutil.which("nsenter") is None:
        return False
    return subprocess.run(["unshare", "-n", "true"], capture_output=True).returncode == 0


def _uevent(pid: int, datagram: bytes) -> None:
    """Send ``datagram`` as the kernel does (netlink uevent group 1), inside the daemon's network namespace
    only: its own, so nothing else on this machine (udev) hears it."""
    code = ("import socket, sys\ns = socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, 15)\ns.bind((0, 0))\n"
            "s.sendto(sys.stdin.buffer.read(), (0, 1))\n")
    subprocess.run(["nsenter", f"--net=/proc/{pid}/ns/net", sys.executable, "-c", code], input=datagram,
                   check=True, timeout=30)


@pytest.mark.skipif(not _own_netns(), reason="needs root and unshare -n (a network namespace of its own)")
def test_a_gpu_back_under_a_new_card_number_is_bound_within_ticks_of_its_uevent(
        tmp_path: Path, navi10: tuple[FakeSysfsTree, FakeCard], processes: Processes) -> None:
    tree, card = navi10
    config = tmp_path / "gpuwatch.toml"
    runtime = tmp_path / "run"
    config.write_text(f'runtime_dir = "{runtime}"\ninterval_s = 0.1\n[http]\nenabled = false\n')
    child = processes.start("gpuwatch", ["unshare", "-n", *GPUWATCH, "run", "--sysfs-root", str(tree.root),
                                         "-c", str(config)])

    def state() -> dict[str, Any] | None:
        return read_state(runtime)

    def fan(document: dict[str, Any] | None) -> str | None:
        return None if document is None else (_gpu(document)["fan_controller"] or {}).get("mode")

    wait_for(lambda: fan(state()) == "curve", "the fan under curve control", 60, detail=child.tail)
    daemon_pid = child.process.pid  # unshare without -f execs the daemon: the same pid

    # The card falls off (a reset's re-probe) and stays gone for some ticks: the source discovers again and
    # finds nothing, so its next periodic discovery is 30 s away.
    tree.remove_card(card)
    gone = wait_for(lambda: (d := state()) is not None and not _gpu(d)["up"] and d, "the GPU down", 30)
    ticks = int(gone["daemon"]["ticks_total"])
    wait_for(lambda: (d := state()) is not None and d["daemon"]["ticks_total"] > ticks + 5, "ticks with the GPU gone")
    back = tree.add_capture(capture(NAVI10), card="card2", pci_slot=card.pci_slot, hwmon="hwmon7")
    assert back.hwmon_dir
    _uevent(daemon_pid, f"add@/{back.device_dir}/drm/card2\0ACTION=add\0DEVPATH=/{back.device_dir}/drm/card2\0"
                        "SUBSYSTEM=drm\0DEVNAME=dri/card2\0DEVTYPE=drm_minor\0MAJOR=226\0MINOR=2\0SEQNUM=9001\0"
            .encode())
    sent_at = int((state() or {"daemon": {"ticks_total": 0}})["daemon"]["ticks_total"])  # it is queued by now
    bound = wait_for(lambda: (d := state()) is not None and _gpu(d)["up"] and _gpu(d)["card"] == "card2"
                     and fan(d) == "curve" and d, "the GPU back as card2 under curve control", 30, detail=child.tail)
    # Within a few ticks of the uevent, not at the periodic rediscovery about 250 ticks later.
    assert int(bound["daemon"]["ticks_total"]) - sent_at <= 10
    assert (tree.root / back.hwmon_dir / "pwm1_enable").read_text().strip() == "1"
    os.kill(daemon_pid, signal.SIGTERM)
    assert child.process.wait(30) == 0
    assert (tree.root / back.hwmon_dir / "pwm1_enable").read_text().strip() == "2"



# ---- a /proc name the scan choked on while a trainer's GPU resets (issue 31 point 6; a regression in issue 46) ----

def test_a_trainer_on_a_reset_gpu_is_restarted_with_a_hostile_name_in_proc(
        tmp_path: Path, navi10: tuple[FakeSysfsTree, FakeCard], processes: Processes) -> None:
    """``²`` is a digit to ``str.isdigit`` and no number to ``int``: an entry so named in the proc root made every
    process scan raise (the trainer's rows gone, the reset watch on stale holders). Now it is no pid: the scan,
    the reset's count and the restart of the trainer that holds the GPU all go on. (A scan that raises for any
    other reason costs the reset nothing either: tests/daemon/test_gpu_use_stages.py.)"""
    tree, card = navi10
    kernel = SimulatedResets(tree.root, [card.device_dir], [card.card])
    proc = FakeProcTree(tmp_path / "proc")
    sleeper = tmp_path / "sleeper.py"
    sleeper.write_text("import time\nwhile True:\n    time.sleep(0.05)\n")
    user = __import__("pwd").getpwuid(os.geteuid()).pw_name
    daemon = DaemonProcess(processes, tmp_path, tree.root, (
        f'interval_s = 0.1\nproc_root = "{proc.root}"\n[fan]\nmode = "monitor-only"\n'
        '[http]\nenabled = false\n[processes]\nscan_all_every_s = 0.1\n'
        f'[resets]\ndump_dir = "{tmp_path / "dumps"}"\nuevents = false\n'
        f'[[trainer]]\nname = "sleeper"\ncommand = ["{sys.executable}", "{sleeper}"]\ncwd = "{tmp_path}"\n'
        f'user = "{user}"\nhang_timeout_s = 3600\ngpu_reset_grace_s = 1\n'))
    running = daemon.wait_state(lambda d: d["trainers"][0]["phase"] == "running", "the trainer running")
    pid = running["trainers"][0]["pid"]
    # The trainer holds the GPU in the scan's eyes (its real pid in the fake proc, with the card's render node).
    proc.add_process(pid, comm="python", cmdline=("python", str(sleeper)))
    proc.set_fd(pid, 5, RENDER_NODE, amdgpu_fdinfo(8, SLOT, vram_bytes=1 << 30, engines_ns={"gfx": 10**9}))
    daemon.wait_state(lambda d: [row["pid"] for row in d["processes"]] == [pid], "the trainer's row")

    (proc.root / "\u00b2").mkdir()
    (proc.root / str(pid) / "task" / "\u00b3").mkdir(parents=True)
    ticks = _ticks(daemon)
    wait_for(lambda: _ticks(daemon) > ticks + 5, "ticks with the hostile names", 30)
    kernel.inject(0, 0.0, 0.0, None, None)
    after = daemon.wait_state(lambda d: dict(d["trainers"][0]["restarts_by_reason"]).get("gpu_reset") == 1
                              and d["trainers"][0]["phase"] == "running", "the trainer restarted for the reset",
                              timeout_s=60)
    assert after["trainers"][0]["pid"] != pid
    assert _gpu(after)["reset"]["resets_total"] == 1
    assert not after["daemon"]["failures"], after["daemon"]["failures"]
    assert daemon.stop() == 0
    assert "Traceback" not in daemon.log()


# ---- a devcoredump whose failing_device link comes after the dump (issue 31; a regression in issue 46) ----

def test_a_devcoredump_whose_failing_device_link_comes_late_is_counted(
        tmp_path: Path, navi10: tuple[FakeSysfsTree, FakeCard], processes: Processes) -> None:
    """Before "devcoredump: Send uevent once devcd is ready" (Linux 6.8) the dump's directory, its ``data`` and
    the class link are there before ``failing_device``: a tick in between must not lose the dump."""
    tree, card = navi10
    SimulatedResets(tree.root, [card.device_dir], [card.card])  # the devcoredump class, as the kernel has it
    daemon = DaemonProcess(processes, tmp_path, tree.root, (
        'interval_s = 0.1\n[fan]\nmode = "monitor-only"\n[http]\nenabled = false\n'
        f'[resets]\ndump_dir = "{tmp_path / "dumps"}"\nuevents = false\n'))
    daemon.wait_state(lambda d: d["daemon"]["ticks_total"] > 2, "ticks")
    real = tree.root / "devices/virtual/devcoredump/devcd1"
    real.mkdir(parents=True)
    (real / "data").write_text("**** AMDGPU Device Coredump ****\nkernel: 6.6.0\n")
    os.symlink(os.path.relpath(real, tree.root / "class/devcoredump"), tree.root / "class/devcoredump/devcd1")
    ticks = _ticks(daemon)
    wait_for(lambda: _ticks(daemon) > ticks + 10, "ticks with the dump but no failing_device yet (1.5 s)", 30)
    os.symlink(os.path.relpath(tree.root / card.device_dir, real), real / "failing_device")
    counted = daemon.wait_state(lambda d: _gpu(d)["reset"]["resets_total"] == 1, "the dump counted", 30)
    assert _gpu(counted)["reset"]["last_source"] == "devcoredump"
    assert daemon.stop() == 0


# ---- status after a reset's recovery (issue 31; a regression in issue 46) ----

def _status(daemon: DaemonProcess) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*GPUWATCH, "status", "--color", "never", "-c", str(daemon.config)], capture_output=True,
                          text=True, timeout=60)


def test_status_exits_0_again_once_a_reset_gpu_has_recovered(
        tmp_path: Path, navi10: tuple[FakeSysfsTree, FakeCard], processes: Processes) -> None:
    tree, card = navi10
    kernel = SimulatedResets(tree.root, [card.device_dir], [card.card])
    daemon = DaemonProcess(processes, tmp_path, tree.root, (
        'interval_s = 0.1\n[http]\nenabled = false\n'
        f'[resets]\ndump_dir = "{tmp_path / "dumps"}"\nuevents = false\n'))
    daemon.wait_state(lambda d: d["daemon"]["ticks_total"] > 2, "ticks")
    wait_for(lambda: (done := _status(daemon)).returncode == 0 and done, "status to exit 0", 30,
                       detail=daemon.child.tail)
    kernel.inject(0, 0.0, 0.0, None, None)
    daemon.wait_state(lambda d: _gpu(d)["reset"]["resets_total"] == 1 and not _gpu(d)["reset"]["recovering"],
                      "the reset counted and the GPU recovered", 30)
    done = wait_for(lambda: (done := _status(daemon)).returncode == 0 and done, "status to exit 0 again", 60,
                    detail=lambda: _status(daemon).stdout)
    assert "reset  1 since start" in done.stdout, done.stdout  # still said, as history
    assert daemon.stop() == 0
