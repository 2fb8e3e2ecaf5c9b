"""The simulated kernel's clock files as amdgpu behaves (issue 49 item 3; sim/kernel.py cites each rule's
function): the edit buffer printed, per-setting limits with an unprinted Fmax minimum, Fmin > Fmax refused,
``r`` per firmware, kstrtol's base 0, level names by prefix, and a second process over the same tree."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gpuwatch.sim import navi31
from gpuwatch.sim.kernel import Board, KernelSysfs, kstrtol, od_command
from gpuwatch.sim.tree import FakeSysfsTree
from gpuwatch.sysfs import Sysfs, SysfsError

DEVICE = "class/drm/card0/device"
OD = f"{DEVICE}/pp_od_clk_voltage"
LEVEL = f"{DEVICE}/power_dpm_force_performance_level"


def _kernel(tmp_path: Path, board: Board | None = None) -> KernelSysfs:
    tree = FakeSysfsTree(tmp_path / "sys")
    tree.add_card(navi31.card_files(), card="card0", pci_slot="0000:28:00.0", hwmon="hwmon1", source_hwmon="hwmon1")
    kernel = KernelSysfs(tree.root)
    if board is not None:
        kernel.board(DEVICE, board)
    return kernel


def _printed(kernel: KernelSysfs) -> tuple[int, int]:
    found = re.search(r"^OD_SCLK:\n0: (\d+)Mhz\n1: (\d+)Mhz$", Sysfs(kernel.root).read(OD) or "", re.MULTILINE)
    assert found
    return int(found.group(1)), int(found.group(2))


@pytest.mark.parametrize(("token", "value"), [("2000", 2000), ("0x7d0", 2000), ("0X7D0", 2000), ("03720", 2000),
                                              ("+2000", 2000), ("-1", -1), ("0", 0)])
def test_numbers_parse_as_kstrtol_base_0(token: str, value: int) -> None:
    assert kstrtol(token) == value


@pytest.mark.parametrize("buf", ["", " s 1 2000", "x 1 2000", "s 1 2000MHz", "s 1 08", "s 1 0x", "s " + "1" * 127])
def test_what_the_parse_refuses(buf: str) -> None:
    with pytest.raises(ValueError):
        od_command(buf)


def test_reads_print_the_edit_buffer_not_what_is_committed(tmp_path: Path) -> None:
    kernel = _kernel(tmp_path)
    kernel.write(OD, "s 1 0x7d0\n")
    assert _printed(kernel) == (500, 2000)  # the edit shows before its commit
    assert kernel.od_max_mhz(DEVICE) == 2500 and kernel.od_committed_mhz(DEVICE) == (500, 2500)
    kernel.write(OD, "c\n")
    assert kernel.od_max_mhz(DEVICE) == 2000 and kernel.od_committed_mhz(DEVICE) == (500, 2000)


def test_an_unprinted_fmax_minimum_refuses_a_step_under_it(tmp_path: Path) -> None:
    kernel = _kernel(tmp_path, Board(fmax_min_mhz=2000))
    kernel.write(OD, "s 1 2000\n")  # OD_RANGE prints 500: 2000 is the unprinted minimum, accepted
    with pytest.raises(SysfsError, match="EINVAL"):
        kernel.write(OD, "s 1 1999\n")
    assert _printed(kernel) == (500, 2000)  # the refused value never reached the edit buffer
    kernel.write(OD, "s 0 1999\n")  # Fmin's own limits are OD_RANGE's
    with pytest.raises(SysfsError, match="EINVAL"):
        kernel.write(OD, "s 1 3151\n")  # over OD_RANGE's high end


@pytest.mark.parametrize("firmware", ["smu13", "sienna_cichlid", "navi10"])
def test_fmin_over_fmax_is_einval(tmp_path: Path, firmware: str) -> None:
    kernel = _kernel(tmp_path, Board(firmware=firmware))  # type: ignore[arg-type]
    kernel.write(OD, "s 1 1000\n")
    with pytest.raises(SysfsError, match="EINVAL"):
        kernel.write(OD, "s 0 1200\n")
    # smu_v13_0_0_od_edit_dpm_table stores the value before it checks; the others refuse it first.
    assert _printed(kernel) == ((1200, 1000) if firmware == "smu13" else (500, 1000))
    if firmware == "smu13":
        with pytest.raises(SysfsError, match="EINVAL"):
            kernel.write(OD, "c\n")  # the table with Fmin > Fmax is never committed
        assert kernel.od_committed_mhz(DEVICE) == (500, 2500)


@pytest.mark.parametrize(("firmware", "commits"), [("smu13", True), ("sienna_cichlid", True), ("navi10", False)])
def test_r_restores_the_boot_table_and_commits_where_the_firmware_falls_through(
        tmp_path: Path, firmware: str, commits: bool) -> None:
    kernel = _kernel(tmp_path, Board(firmware=firmware))  # type: ignore[arg-type]
    kernel.write(OD, "s 1 2000\n")
    kernel.write(OD, "c\n")
    kernel.write(OD, "r\n")
    assert _printed(kernel) == (500, 2500)
    assert kernel.od_max_mhz(DEVICE) == (2500 if commits else 2000)


@pytest.mark.parametrize(("written", "reads"), [("high\n", "high"), ("highest", "high"), ("manual", "manual"),
                                                ("profile_peak\n", "profile_peak"), ("autopilot", "auto")])
def test_levels_are_compared_by_prefix(tmp_path: Path, written: str, reads: str) -> None:
    kernel = _kernel(tmp_path)
    kernel.write(LEVEL, written)
    assert kernel.read(LEVEL) == reads


@pytest.mark.parametrize("written", ["hi", " high", "Auto", ""])
def test_unknown_levels_are_einval(tmp_path: Path, written: str) -> None:
    with pytest.raises(SysfsError, match="EINVAL"):
        _kernel(tmp_path).write(LEVEL, written)


def test_a_commit_may_drop_a_forced_level_and_the_pmfw_may_ignore_a_maximum(tmp_path: Path) -> None:
    kernel = _kernel(tmp_path, Board(ignores_fmax=True, commit_sets_level="auto"))
    kernel.write(LEVEL, "high\n")
    kernel.write(OD, "s 1 2000\n")
    kernel.write(OD, "c\n")
    assert kernel.read(LEVEL) == "auto"
    assert kernel.od_committed_mhz(DEVICE) == (500, 2000) and kernel.od_max_mhz(DEVICE) == 2500


def test_a_second_process_sees_the_same_kernel(tmp_path: Path) -> None:
    kernel = _kernel(tmp_path, Board(fmax_min_mhz=2000))
    kernel.write(OD, "s 1 2100\n")
    other = KernelSysfs(kernel.root)  # `gpuwatch restore` after the daemon died
    assert other.od_max_mhz(DEVICE) == 2500  # the edit is pending, not in force
    with pytest.raises(SysfsError, match="EINVAL"):
        other.write(OD, "s 1 1900\n")  # the board's unprinted limit holds there too
    other.write(OD, "c\n")
    assert kernel.od_max_mhz(DEVICE) == 2100


def test_a_table_rewritten_as_a_plain_file_is_taken_as_committed(tmp_path: Path) -> None:
    kernel = _kernel(tmp_path)
    kernel.write(OD, "s 1 2000\n")
    Sysfs(kernel.root).write(OD, navi31.od_table(500, 2400))  # a test playing another tool
    assert kernel.od_max_mhz(DEVICE) == 2400 and kernel.od_committed_mhz(DEVICE) == (500, 2400)
