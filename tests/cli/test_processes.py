"""`gpuwatch status --processes` and the per-trainer GPU lines: on a fake /proc tree, on the example state,
and on the simulator with a supervised trainer (the daemon's published state, read by a real CLI process)."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from gpuwatch.cli.process_table import render_processes
from gpuwatch.cli.status import exit_code, render
from gpuwatch.config.file import parse_config
from gpuwatch.daemon.loop import Daemon
from gpuwatch.model import TrainerPhase
from gpuwatch.publish.document import to_document
from gpuwatch.sim.proctree import RENDER_NODE, FakeProcTree, amdgpu_fdinfo
from gpuwatch.sim.tree import FakeSysfsTree
from tests.support.paths import REPO, TESTS
from tests.support.published import GPU_A, NOW_UNIX, example_state
from tests.support.trees import capture

MIB = 2**20


def gpuwatch(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gpuwatch", *args], capture_output=True, text=True, timeout=60)


def test_status_processes_without_a_daemon_reads_the_proc_tree(tmp_path: Path) -> None:
    tree = FakeSysfsTree(tmp_path / "sys")
    tree.add_capture(capture("navi21-rx6900xt-sapphire-nitro"), pci_slot=GPU_A)
    proc = FakeProcTree(tmp_path / "proc")
    shared = amdgpu_fdinfo(217, GPU_A, vram_bytes=3 * 1024 * MIB, gtt_bytes=64 * MIB, engines_ns={"gfx": 10**9})
    proc.add_process(4242, cmdline=["python3", "train.py", "--epochs", "300"], uid=os.getuid())
    proc.set_fd(4242, 7, RENDER_NODE, shared)
    proc.set_fd(4242, 8, RENDER_NODE, shared)  # dup'd: the same client
    proc.add_process(4300, cmdline=["python3", "train.py"], ppid=4242, uid=os.getuid())
    proc.set_fd(4300, 7, RENDER_NODE, shared)  # inherited by a DataLoader worker
    proc.add_process(1800, comm="Xorg", cmdline=["/usr/lib/xorg/Xorg", "vt2"], uid=0)
    proc.set_fd(1800, 3, "/dev/dri/card0", amdgpu_fdinfo(5, GPU_A, vram_bytes=64 * MIB))
    proc.add_process(6000, comm="firefox", cmdline=["firefox"])
    proc.set_fd(6000, 9, "/dev/dri/renderD129", (TESTS / "fixtures/fdinfo/i915.txt").read_text())
    common = ["--sysfs-root", str(tree.root), "--proc-root", str(proc.root), "-c", "/dev/null"]
    done = gpuwatch("status", "--processes", *common)
    assert done.returncode == 0, done.stderr
    table = done.stdout.split("\n\nPID")[1].splitlines()
    assert table[0].split() == ["USER", "GPU", "VRAM", "GTT", "BUSY", "STATE", "TRAINER", "COMMAND"]
    rows = {line.split()[0]: line.split() for line in table[1:]}
    assert set(rows) == {"4242", "4300", "1800"}, done.stdout  # not the i915 client
    assert rows["4242"][2:5] == [GPU_A, "3.0", "GiB"] and rows["4242"][-3:] == ["train.py", "--epochs", "300"]
    assert rows["4300"][3] == "-" and rows["1800"][1] == "root" and rows["1800"][3:5] == ["64", "MiB"]
    doc = json.loads(gpuwatch("status", "--json", "--processes", *common).stdout)
    assert sorted(row["pid"] for row in doc["processes"]) == [1800, 4242, 4300]
    assert json.loads(gpuwatch("status", "--json", *common).stdout)["processes"] == []  # not asked for
    wrong = gpuwatch("status", "--processes", "--sysfs-root", str(tree.root), "--proc-root", str(tmp_path / "nope"),
                     "-c", "/dev/null")
    assert wrong.returncode == 2 and wrong.stderr.count("\n") == 1 and "cannot list processes" in wrong.stderr


def test_the_example_state_renders_trainer_gpu_lines_resets_and_the_table(tmp_path: Path) -> None:
    doc = to_document(example_state(tmp_path / "sys"), "daemon")
    text = render(doc, now=NOW_UNIX)
    assert f"  on {GPU_A}: vram 12 MiB  gtt 20 MiB  drm engine 0%  rocm vram 6.0 GiB  kfd cu 75%  (2 processes)" in text
    assert "  reset  2 since start, last " in text and "ring gfx_0.0.0 timed out; VRAM lost" in text
    assert "recovering: waiting for pid 31337 to let go of it (D state)" in text and "reboot" not in text
    failed = copy.deepcopy(doc)
    failed["gpus"][1]["reset"]["stuck_past_deadline"] = True  # held past resets.recovery.STUCK_REPORT_S
    assert ("RECOVERY FAILED: held by pid 31337 in D state since its reset; the GPU is not used while they hold "
            "it, the host may need a reboot") in render(failed, now=NOW_UNIX).replace("\n", "")
    assert exit_code(doc) == 1
    table = render_processes(doc).splitlines()
    assert [line.split()[0] for line in table[1:5]] == ["4242", "1800", "4300", "31337"]  # by GPU, then VRAM
    assert table[1].split()[3:9] == ["6.0", "GiB", "20", "MiB", "cu", "75%"]  # KFD VRAM is the larger one
    assert table[4].split()[5:8] == ["-", "N/A", "D"]  # GTT unknown, BUSY unknown (GPU in reset), state D
    assert table[-2].startswith("1 process(es) not readable") and "ROCm (KFD)" in table[-1]


def test_a_trainer_with_a_process_left_behind_is_an_alarm(tmp_path: Path) -> None:
    state = example_state(tmp_path / "sys")
    resets = tuple(replace(r, recovering=False, stuck_pids=()) for r in state.snapshot.resets)
    calm = replace(state, snapshot=replace(state.snapshot, resets=resets, gpus=state.snapshot.gpus[:1]),
                   fans=state.fans[:1], daemon=replace(state.daemon, failures=()) if state.daemon else None)
    assert exit_code(to_document(calm, "daemon")) == 0
    stuck = replace(calm, trainers=(replace(calm.trainers[0], stuck_pids=(4242,)),))
    doc = to_document(stuck, "daemon")
    assert exit_code(doc) == 1 and "pid 4242 left behind after SIGKILL" in render(doc, now=NOW_UNIX)


def test_status_processes_on_the_simulator_with_a_supervised_trainer(tmp_path: Path) -> None:
    trainer: dict[str, Any] = {
        "name": "demo", "cwd": str(tmp_path),
        "command": [sys.executable, str(REPO / "demo/train_demo.py"), "--step-s", "0.05", "--backend", "python"],
    }
    if os.geteuid() == 0:
        trainer["user"] = "root"
    data = {"runtime_dir": str(tmp_path / "run"), "interval_s": 0.05, "http": {"enabled": False},
            "simulate": {"enabled": True, "tree_dir": str(tmp_path / "tree"), "time_scale": 20.0,
                         "desktop_client": True}, "trainer": [trainer]}
    (tmp_path / "gpuwatch.toml").write_text(f'runtime_dir = "{tmp_path / "run"}"\n')
    daemon = Daemon(parse_config(data))
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            state = daemon.tick()
            uses = state.trainers[0].gpu_use if state.trainers else ()
            if uses and uses[0].engine_busy_ratio is not None and state.trainers[0].phase is TrainerPhase.RUNNING:
                break
            time.sleep(0.02)
        done = gpuwatch("status", "--processes", "-c", str(tmp_path / "gpuwatch.toml"))
    finally:
        daemon.shutdown()
    assert "trainer demo: running" in done.stdout, done.stdout + done.stderr
    assert "  on 0000:28:00.0: vram 12 MiB  gtt 20 MiB  drm engine 0%  rocm vram 4.0 GiB  kfd cu 100%" in done.stdout
    rows = [line for line in done.stdout.split("\n\nPID")[1].splitlines()[1:] if line[:1].isdigit()]
    assert len(rows) == 2 and any(" demo " in row and "train_demo.py" in row for row in rows), rows
    assert any(row.startswith("4194404 ") and row.endswith("/usr/bin/gnome-shell") for row in rows), rows
