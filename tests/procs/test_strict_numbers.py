"""Every number the process scan reads is a kernel u64 printed with %llu (issue 31): ASCII digits, at most
2**64 - 1. Anything else is no value, never an exception and never a number no float can carry."""

from __future__ import annotations

import pytest

from gpuwatch.procs.fdinfo import U64_MAX, parse_fdinfo, parse_size, parse_stat, parse_uid, u64
from gpuwatch.procs.kfd import KfdNode, usage
from gpuwatch.sim.proctree import generic_fdinfo, stat_line
from gpuwatch.sim.tree import FakeSysfsTree
from gpuwatch.sysfs import Sysfs

SLOT = "0000:0b:00.0"
HUGE = "9" * 400


@pytest.mark.parametrize(("text", "value"), [
    ("0", 0), ("42", 42), (str(U64_MAX), U64_MAX),
    (str(U64_MAX + 1), None),  # 20 digits, past a u64
    ("0" * 21, None), (HUGE, None),
    ("", None), ("-1", None), ("+1", None), (" 1", None), ("1_000", None), ("1.5", None), ("0x10", None),
    ("²", None), ("١٢", None), ("12²", None),  # str.isdigit says yes to these; int() refuses "²"
])
def test_u64(text: str, value: int | None) -> None:
    assert u64(text) == value


def _client(**lines: str) -> str:
    body = {"drm-driver": "amdgpu", "drm-client-id": "7", "drm-pdev": SLOT, **lines}
    return generic_fdinfo() + "".join(f"{key}:\t{value}\n" for key, value in body.items())


@pytest.mark.parametrize("bad", [HUGE, "²", "١٢", "-5", "+5", "1_0"])
def test_a_bad_number_in_fdinfo_is_no_value_not_an_exception(bad: str) -> None:
    client = parse_fdinfo(_client(**{"drm-resident-vram": f"{bad} KiB", "drm-engine-gfx": f"{bad} ns",
                                     "drm-client-id": bad}))
    assert client is not None
    assert (client.vram_bytes, client.engine_ns, client.client_id) == (None, 0, None)


def test_a_good_client_next_to_bad_lines_keeps_its_good_values() -> None:
    client = parse_fdinfo(_client(**{"drm-resident-vram": "4 KiB", "drm-engine-gfx": f"{HUGE} ns",
                                     "drm-engine-compute": "1000 ns"}))
    assert client is not None and (client.vram_bytes, client.engine_ns) == (4096, 1000)


@pytest.mark.parametrize(("size", "value"), [
    ("44564 KiB", 44564 * 1024), ("0", 0), (f"{U64_MAX} KiB", None),  # in bytes, past a u64
    (f"{U64_MAX >> 10} KiB", (U64_MAX >> 10) * 1024), (f"{HUGE} MiB", None), ("12 parsecs", None),
])
def test_sizes_stay_within_a_u64_of_bytes(size: str, value: int | None) -> None:
    assert parse_size(size) == value


def test_stat_and_status_numbers_are_strict() -> None:
    good = stat_line(4242, "python3", "S", 1, 100_000)
    assert parse_stat(good) is not None
    assert parse_stat(good.replace("4242 (", "4²42 (", 1)) is None
    assert parse_stat(good.replace(" 100000 ", f" {HUGE} ")) is None
    assert parse_uid("Uid:\t1000\t1000\t1000\t1000\n") == 1000
    assert parse_uid("Uid:\t１０００\t0\t0\t0\n") is None  # fullwidth digits


def test_kfd_values_are_strict(fake_sysfs: FakeSysfsTree) -> None:
    base = "class/kfd/kfd/proc/4242"
    fake_sysfs.write(f"{base}/vram_1234", f"{HUGE}\n")
    fake_sysfs.write(f"{base}/stats_1234/cu_occupancy", "²\n")
    (use,) = usage(Sysfs(fake_sysfs.root), 4242, {"1234": KfdNode(SLOT, 40)})
    assert (use.vram_bytes, use.cu_occupancy_ratio) == (None, None)
