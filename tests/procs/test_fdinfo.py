"""The fdinfo, stat, status and cmdline parsers on every kernel layout (tests/fixtures/fdinfo)."""

from __future__ import annotations

import pytest

from gpuwatch.procs.fdinfo import DrmClient, command_line, parse_fdinfo, parse_size, parse_stat, parse_uid
from gpuwatch.sim.proctree import amdgpu_fdinfo, stat_line
from tests.support.paths import TESTS

FIXTURES = TESTS / "fixtures" / "fdinfo"
KIB, MIB = 1024, 1024**2
SLOT = "0000:0b:00.0"


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


@pytest.mark.parametrize(("name", "expected"), [
    ("amdgpu-6.1.txt", DrmClient("amdgpu", SLOT, 305, 3 * 1024 * MIB, 64 * MIB, 812345678 + 1000000 + 5000)),
    ("amdgpu-6.4.txt", DrmClient("amdgpu", SLOT, 306, 1 * MIB, 2 * MIB, 7000000)),
    # The core's header comes first; amdgpu's duplicate (another id) is ignored.
    ("amdgpu-6.6-duplicated-header.txt", DrmClient("amdgpu", SLOT, 41, 512 * MIB, 8 * MIB, 2500000000)),
    ("amdgpu-6.10-dev.txt", DrmClient("amdgpu", SLOT, 77, 100004 * KIB, 12 * MIB, 6000001000)),
    # drm-resident-* preferred; "dec" printed twice (two IP indexes) is summed.
    ("amdgpu-6.13.txt", DrmClient("amdgpu", SLOT, 12, 2097156 * KIB, 18 * MIB, 123001500)),
    ("amdgpu-6.13-idle.txt", DrmClient("amdgpu", SLOT, 13, 4 * KIB, 0, 0)),
    ("i915.txt", DrmClient("i915", "0000:00:02.0", 12, None, None, 900000000)),
    ("amdxdna.txt", DrmClient("amdxdna_accel_driver", "0000:c5:00.1", 3, None, None, 50000)),
])
def test_every_kernel_layout(name: str, expected: DrmClient) -> None:
    assert parse_fdinfo(fixture(name)) == expected


@pytest.mark.parametrize("name", ["amdgpu-5.15-pre-standard.txt", "amdgpu-unplugged.txt"])
def test_not_a_client(name: str) -> None:
    assert parse_fdinfo(fixture(name)) is None


def test_non_drm_fdinfo_and_garbage() -> None:
    assert parse_fdinfo("pos:\t0\nflags:\t02\nmnt_id:\t15\nino:\t1\neventfd-count:\t0\n") is None
    assert parse_fdinfo("") is None
    odd = parse_fdinfo("drm-driver:\tamdgpu\ndrm-pdev:\t0000:0B:00.0\ndrm-client-id:\tx\ndrm-memory-vram:\t12 GB\n"
                       "drm-engine-gfx:\tlots ns\n")
    assert odd == DrmClient("amdgpu", SLOT, None, None, None, 0)  # pdev lowercased; unparseable values None/0


@pytest.mark.parametrize(("text", "value"), [
    ("0", 0), ("22 MiB", 22 * MIB), ("44564 KiB", 44564 * KIB), ("17196 kB", 17196 * KIB), ("4095", 4095),
    ("1 GiB", 1024 * MIB), ("12 GB", None), ("KiB", None), ("-1 KiB", None),
])
def test_sizes(text: str, value: int | None) -> None:
    assert parse_size(text) == value


def test_the_simulator_writes_what_the_parser_reads() -> None:
    text = amdgpu_fdinfo(7, SLOT, vram_bytes=3 * MIB + 512, gtt_bytes=20 * MIB, engines_ns={"gfx": 5, "compute": 0})
    assert "drm-resident-vram:\t3146240\n" in text and "drm-memory-gtt: \t20480 KiB" in text
    assert parse_fdinfo(text) == DrmClient("amdgpu", SLOT, 7, 3 * MIB + 512, 20 * MIB, 5)


def test_stat_splits_at_the_last_parenthesis() -> None:
    stat = parse_stat(stat_line(4242, "a) b (c", "D", 4200, 9812345))
    assert stat is not None and (stat.pid, stat.comm, stat.state, stat.ppid, stat.start_ticks) == (
        4242, "a) b (c", "D", 4200, 9812345)
    assert parse_stat("") is None and parse_stat("12 (x) S 1") is None and parse_stat("x (y) S" + " 1" * 30) is None


def test_uid_and_command() -> None:
    assert parse_uid("Name:\tpython3\nUid:\t1000\t1000\t1000\t1000\nGid:\t5\n") == 1000
    assert parse_uid("Name:\tx\n") is None
    assert command_line("python3\0train.py\0--lr\0000.003\0", "python3") == "python3 train.py --lr 0.003"
    assert command_line("", "kworker/0:1") == "[kworker/0:1]"
    assert command_line(None, None) == "?"
    assert command_line("x" * 300, None).endswith("...") and len(command_line("x" * 300, None)) == 200
