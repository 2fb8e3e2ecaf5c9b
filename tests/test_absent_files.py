"""The amdgpu backend skips files a card lacked at discovery, and nothing else.

A file missing at discovery is not re-opened every tick (a poll-cycle optimisation, see
docs/performance.md) but is picked up at the next re-discovery; a file that vanishes later
(a temperature) is still read, and reported absent, on every tick.
"""

from __future__ import annotations

from conftest import capture
from gpuwatch.amdgpu import AmdgpuBackend
from gpuwatch.fakesysfs import FakeSysfsTree
from gpuwatch.sysfs import Sysfs


class Clock:
    def __init__(self) -> None:
        self.now_s = 0.0

    def __call__(self) -> float:
        return self.now_s


def _backend(fake_sysfs: FakeSysfsTree) -> tuple[AmdgpuBackend, str, Clock]:
    card = fake_sysfs.add_capture(capture("navi31-rx7900xtx-sapphire-nitro"))
    clock = Clock()
    assert card.hwmon_dir is not None
    return AmdgpuBackend(Sysfs(fake_sysfs.root), rediscover_s=30.0, clock=clock), card.hwmon_dir, clock


def test_file_missing_at_discovery_is_picked_up_at_rediscovery(fake_sysfs: FakeSysfsTree) -> None:
    backend, hwmon, clock = _backend(fake_sysfs)
    (first,), _ = backend.read_all()
    assert first.power_w is not None and first.temp("junction") is not None
    fake_sysfs.remove(f"{hwmon}/power1_average")
    fake_sysfs.remove(f"{hwmon}/temp1_input")
    clock.now_s = 30.0  # re-discovery: power1_average and temp1_input are now learned as absent
    (gone,), _ = backend.read_all()
    assert gone.power_w is None
    fake_sysfs.write(f"{hwmon}/power1_average", "123000000\n")
    fake_sysfs.write(f"{hwmon}/temp1_input", "45000\n")
    clock.now_s = 31.0
    (skipped,), _ = backend.read_all()
    assert skipped.power_w is None and skipped.errors == ()
    clock.now_s = 60.0
    (back,), _ = backend.read_all()
    assert back.power_w == 123.0 and back.temp("edge").temp_c == 45.0


def test_file_vanishing_after_discovery_is_read_every_tick(fake_sysfs: FakeSysfsTree) -> None:
    backend, hwmon, clock = _backend(fake_sysfs)
    backend.read_all()
    fake_sysfs.remove(f"{hwmon}/temp2_input")
    clock.now_s = 1.0
    (gone,), _ = backend.read_all()
    assert gone.temp("junction").temp_c is None
    fake_sysfs.write(f"{hwmon}/temp2_input", "101000\n")
    clock.now_s = 2.0
    (back,), _ = backend.read_all()
    assert back.temp("junction").temp_c == 101.0


def test_errors_are_not_taken_for_absence(fake_sysfs: FakeSysfsTree) -> None:
    backend, hwmon, clock = _backend(fake_sysfs)
    fake_sysfs.write(f"{hwmon}/temp2_input", "garbage\n")
    (bad,), _ = backend.read_all()
    assert [e.sensor for e in bad.errors] == ["temp2_input"]
    fake_sysfs.write(f"{hwmon}/temp2_input", "88000\n")
    clock.now_s = 1.0
    (good,), _ = backend.read_all()
    assert good.temp("junction").temp_c == 88.0 and good.errors == ()
