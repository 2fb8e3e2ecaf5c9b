"""A card whose sysfs reads hang (a FIFO stands in for the file the driver never answers) is reported
unresponsive within the deadline; the other cards are read as usual; it answers again when the read returns."""

from __future__ import annotations

import os
from pathlib import Path

from gpuwatch.gpus.amdgpu_source import AmdgpuSource
from gpuwatch.gpus.sampler import Sampler
from gpuwatch.sim.tree import FakeSysfsTree
from gpuwatch.sysfs import Sysfs
from tests.support.published import GPU_A, GPU_B, two_gpu_tree
from tests.support.waiting import wait_for


def release(fifo: Path) -> None:
    """Give the blocked reader a writer (then EOF), so its worker returns."""
    os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))


def test_hung_card_is_unresponsive_and_the_others_are_read(tmp_path: Path) -> None:
    tree: FakeSysfsTree = two_gpu_tree(tmp_path / "sys")
    source = AmdgpuSource(Sysfs(tree.root), deadline_s=0.2)
    sampler = Sampler([source])
    first = sampler.sample()
    hwmon = source.locate(GPU_A).hwmon_dir  # type: ignore[union-attr]
    fifo = tree.root / f"{hwmon}/temp2_input"
    fifo.unlink()
    os.mkfifo(fifo)
    try:
        for _ in range(2):  # the second tick does not wait again: the worker is still blocked
            snapshot = sampler.sample()
            a, b = snapshot.gpu(GPU_A), snapshot.gpu(GPU_B)
            assert a is not None and b is not None
            assert not a.up and a.unresponsive and "unresponsive" in a.errors[0].error
            assert a.name == first.gpu(GPU_A).name  # type: ignore[union-attr]  # identity kept
            assert b.up and b.temp("junction") is not None
    finally:
        release(fifo)
    fifo.unlink()
    tree.write(f"{hwmon}/temp2_input", "50000\n")
    back = wait_for(lambda: (g := sampler.sample().gpu(GPU_A)) is not None and g.up and g, "the card to answer again")
    assert not back.unresponsive and back.temp("junction").temp_c == 50  # type: ignore[union-attr]
