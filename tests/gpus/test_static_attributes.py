"""The amdgpu backend reads fixed attributes once per discovery and everything else every tick.

Identity, board limits, labels and crit points are fixed while the driver is bound, so the backend
remembers them until its next re-discovery (a poll-cycle optimisation, docs/performance.md). Values
that move (temperatures, power cap, runtime status) and read errors are never remembered. A file found
absent is remembered as absent until the next discovery too (which files a card has is fixed at probe),
except power/runtime_status.
"""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from gpuwatch.gpus.amdgpu import STATIC_ATTRIBUTES, Directory, Remembered, discover, read_card
from gpuwatch.gpus.amdgpu_source import AmdgpuSource
from gpuwatch.sim.tree import FakeSysfsTree, load_capture
from gpuwatch.sysfs import Sysfs
from tests.support.paths import CARD_FILES
from tests.support.trees import FaultySysfs, capture

CARD = "navi31-rx7900xtx-sapphire-nitro"


class Clock:
    def __init__(self) -> None:
        self.now_s = 0.0

    def __call__(self) -> float:
        return self.now_s


def _backend(fake_sysfs: FakeSysfsTree, sysfs: Sysfs | None = None) -> tuple[AmdgpuSource, str, Clock]:
    card = fake_sysfs.add_capture(capture(CARD))
    assert card.hwmon_dir is not None
    clock = Clock()
    return AmdgpuSource(sysfs or Sysfs(fake_sysfs.root), rediscover_s=30.0, clock=clock), card.hwmon_dir, clock


def test_fixed_attributes_are_reread_at_rediscovery_only(fake_sysfs: FakeSysfsTree) -> None:
    backend, hwmon, clock = _backend(fake_sysfs)
    (first,), _ = backend.read_all()
    assert first.temp("junction").crit_c == 110.0
    fake_sysfs.write(f"{hwmon}/temp2_crit", "100000\n")
    fake_sysfs.write(f"{hwmon}/temp2_input", "77000\n")
    fake_sysfs.write(f"{hwmon}/power1_cap", "250000000\n")
    clock.now_s = 29.0
    (cached,), _ = backend.read_all()
    assert cached.temp("junction").crit_c == 110.0
    assert cached.temp("junction").temp_c == 77.0 and cached.power_cap_w == 250.0
    clock.now_s = 30.0
    (fresh,), _ = backend.read_all()
    assert fresh.temp("junction").crit_c == 100.0


def test_absent_files_are_looked_for_again_at_rediscovery_only(fake_sysfs: FakeSysfsTree) -> None:
    backend, _, clock = _backend(fake_sysfs)
    (first,), _ = backend.read_all()
    assert first.pcie_replays_total is None and first.runtime_status is None  # absent in this capture
    device = backend.discovered().cards[0].device_dir
    fake_sysfs.write(f"{device}/pcie_replay_count", "3\n")
    fake_sysfs.write(f"{device}/power/runtime_status", "active\n")
    clock.now_s = 29.0
    (cached,), _ = backend.read_all()
    assert cached.pcie_replays_total is None  # not opened again before the next discovery
    assert cached.runtime_status == "active"  # the PM core's file: looked for every tick
    clock.now_s = 30.0
    (fresh,), _ = backend.read_all()
    assert fresh.pcie_replays_total == 3


def test_steady_state_reading_equals_a_full_read(fake_sysfs: FakeSysfsTree) -> None:
    from gpuwatch.gpus.amdgpu import discover, read_card

    backend, _, clock = _backend(fake_sysfs)
    backend.read_all()
    clock.now_s = 1.0
    (steady,), _ = backend.read_all()
    (card,) = discover(backend.sysfs).cards
    assert steady == read_card(backend.sysfs, card)


def test_read_errors_of_fixed_attributes_are_retried_and_reported_every_tick(fake_sysfs: FakeSysfsTree) -> None:
    sysfs = FaultySysfs(fake_sysfs.root, {"temp2_crit": errno.EIO})
    backend, _, clock = _backend(fake_sysfs, sysfs)
    for now_s in (0.0, 1.0, 2.0):
        clock.now_s = now_s
        (reading,), _ = backend.read_all()
        assert [(e.sensor, e.error) for e in reading.errors] == [("temp2_crit", "EIO")]
    sysfs.faults.clear()
    clock.now_s = 3.0
    (healed,), _ = backend.read_all()
    assert healed.errors == () and healed.temp("junction").crit_c == 110.0


def test_moving_values_are_not_fixed() -> None:
    for name in ("temp1_input", "temp2_input", "power1_cap", "power1_average", "pwm1", "pwm1_enable",
                 "fan1_input", "current_link_speed", "gpu_busy_percent", "mem_info_vram_used"):
        assert name not in STATIC_ATTRIBUTES
    assert "power/runtime_status" not in STATIC_ATTRIBUTES


def test_a_fixed_attribute_that_is_garbage_is_reported_every_tick(fake_sysfs: FakeSysfsTree) -> None:
    """Its text is remembered; its number is parsed once only when the parse succeeds (gpus.amdgpu.Directory)."""
    backend, hwmon, clock = _backend(fake_sysfs)
    fake_sysfs.write(f"{hwmon}/temp2_crit", "hot\n")
    for now_s in (0.0, 1.0, 2.0):
        clock.now_s = now_s
        (reading,), _ = backend.read_all()
        assert [(e.sensor, e.error) for e in reading.errors] == [("temp2_crit", "garbage: 'hot'")]
        assert reading.temp("junction").crit_c is None and reading.temp("edge").crit_c == 100.0


@pytest.mark.parametrize("card_file", CARD_FILES, ids=lambda path: path.stem)
def test_every_capture_reads_the_same_once_its_fixed_part_is_kept(tmp_path: Path, card_file: Path) -> None:
    """Once its fixed attributes are remembered, ``read_card`` sets the moving files on the reading they made
    (amdgpu._Kept): the same files read in the same order, the same reading as the full read over the same
    remembered files (awake, suspended, a moving file failing, a file that fails while absent)."""
    tree = FakeSysfsTree(tmp_path / "sys")
    added = tree.add_capture(load_capture(card_file))
    sysfs = FaultySysfs(tree.root, {})
    cards = discover(sysfs).cards
    if not cards:
        pytest.skip("not an amdgpu card")
    (card,) = cards
    kept: Remembered = {}
    full: Remembered = {}

    def both() -> None:
        full.get(card.device_dir, Directory("")).kept = None  # the full read, its fixed files remembered
        sysfs.reads.clear()
        expected = read_card(sysfs, card, full)
        reads = list(sysfs.reads)
        sysfs.reads.clear()
        assert read_card(sysfs, card, kept) == expected
        assert sysfs.reads == reads

    for _ in range(3):
        both()
    assert kept[card.device_dir].kept is not None
    assert read_card(sysfs, card, kept) == read_card(sysfs, card)
    if added.hwmon_dir is not None:
        tree.write(f"{added.hwmon_dir}/temp1_input", "41000\n")
        sysfs.faults.update({"temp2_input": errno.EIO, "power1_cap": errno.EINVAL, "current_link_speed": errno.EIO,
                             "power1_input": errno.EIO})
        both()
        sysfs.faults.clear()
    tree.write(f"{card.device_dir}/power/runtime_status", "suspended\n")
    both()
    tree.write(f"{card.device_dir}/power/runtime_status", "active\n")
    both()
