"""The clock rung as the kernel behaves (issue 49): a refused step down is the card's floor, a ceiling verified
by the clock the card runs at, the forced level written back after every commit, the user's own maximum kept,
another's pending edit said, APUs that need ``manual`` declined, the older fine-grained pp_dpm_sclk print. On
real captures with the simulated kernel (sim/kernel.py) behind the clock files."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from gpuwatch.clock.dpm_mask import SclkTable, parse_sclk
from gpuwatch.model import ClockMode
from gpuwatch.sim.kernel import Board
from gpuwatch.sysfs import Sysfs
from tests.support.clock_rig import ClockRig, ClockSysfs, clock_records
from tests.support.trees import capture

NAVI21 = "navi21-rx6900xt-sapphire-nitro"
OD, LEVEL = "pp_od_clk_voltage", "power_dpm_force_performance_level"


def _rig(tmp_path: Path, board: Board) -> ClockRig:
    rig = ClockRig(tmp_path, capture(NAVI21))
    rig.sysfs.board(rig.card.device_dir, board)
    return rig


def _user(rig: ClockRig, *commands: str) -> None:
    """Another process (a person, LACT) writing the same table."""
    other = ClockSysfs(rig.tree.root)
    for command in commands:
        other.write(rig.device(OD), command)


def test_a_refused_step_down_is_the_cards_floor_held_for_the_run(tmp_path: Path) -> None:
    rig = _rig(tmp_path, Board(fmax_min_mhz=2400))  # OD_RANGE prints 500: the minimum of Fmax is unprinted
    state = rig.hot(60)
    assert state.mode is ClockMode.FLOOR and state.pause_allowed  # the pause rung acts below it
    assert state.ceiling_mhz == 2400 and state.card_floor_mhz == 2400 and state.floor_mhz == 2400
    assert rig.od_max_mhz() == 2400 and state.reason is None
    refused = [value for name, value in rig.sysfs.take_log() if value == "s 1 2375\n"]
    assert refused == ["s 1 2375\n"]  # tried once, never again
    assert rig.hot(30).ceiling_mhz == 2400 and all(v != "s 1 2375\n" for _, v in rig.sysfs.take_log())
    states = [rig.tick(80.0) for _ in range(600)]  # it cools: back up, the original given back
    assert states[-1].mode is ClockMode.IDLE and rig.od_max_mhz() == 2500 and states[-1].card_floor_mhz == 2400


def test_a_card_that_refuses_any_ceiling_is_given_up_with_the_reason(tmp_path: Path) -> None:
    rig = _rig(tmp_path, Board(fmax_min_mhz=2500))
    state = rig.hot(5)
    assert state.mode is ClockMode.UNAVAILABLE and state.pause_allowed
    assert "refuses any ceiling under its maximum 2500 MHz" in (state.reason or "")
    assert rig.od_max_mhz() == 2500 and not clock_records(rig.runtime_dir).path.exists()


def test_a_ceiling_the_card_keeps_running_above_is_committed_again_then_reported(tmp_path: Path) -> None:
    rig = _rig(tmp_path, Board(ignores_fmax=True))
    rig.tree.write(rig.device("gpu_busy_percent"), "100\n")
    rig.tree.write(rig.hwmon("freq1_input"), "2660000000\n")  # the firmware runs its own maximum
    first = rig.tick(100.0)
    assert first.ceiling_mhz == 2475 and not first.not_in_force and not first.pause_allowed
    rig.sysfs.take_log()
    rig.tick(100.0)
    assert rig.sysfs.take_log() == []  # within the settle time
    again = rig.tick(100.0)
    assert rig.sysfs.take_log() == [(OD, "s 1 2475\n"), (OD, "c\n")] and not again.not_in_force  # once more
    state = rig.hot(4)
    assert state.not_in_force and state.pause_allowed and "not taking effect" in (state.reason or "")
    rig.tree.write(rig.hwmon("freq1_input"), f"{int(state.ceiling_mhz or 0) * 1_000_000}\n")  # it takes now
    later = rig.tick(100.0)
    assert not later.not_in_force and later.reason is None


def test_an_idle_card_above_its_ceiling_proves_nothing(tmp_path: Path) -> None:
    rig = _rig(tmp_path, Board(ignores_fmax=True))
    rig.tree.write(rig.device("gpu_busy_percent"), "5\n")
    rig.tree.write(rig.hwmon("freq1_input"), "2660000000\n")
    state = rig.hot(10)
    assert not state.not_in_force and all(v != "s 1 2475\n" for _, v in rig.sysfs.take_log()[2:])


def test_the_forced_level_is_written_back_after_every_commit_and_the_give_back(tmp_path: Path) -> None:
    rig = _rig(tmp_path, Board(commit_sets_level="auto"))
    rig.tree.write(rig.device(LEVEL), "high\n")
    rig.hot(20)
    log = rig.sysfs.take_log()
    commits = [i for i, (name, value) in enumerate(log) if (name, value) == (OD, "c\n")]
    assert len(commits) > 1 and all(log[i + 1] == (LEVEL, "high\n") for i in commits)
    assert Sysfs(rig.tree.root).read(rig.device(LEVEL)) == "high"
    rig.controller.restore()
    assert rig.sysfs.take_log()[-1] == (LEVEL, "high\n") and rig.od_max_mhz() == 2500
    assert Sysfs(rig.tree.root).read(rig.device(LEVEL)) == "high"


@pytest.mark.parametrize(("user_mhz", "held_after"), [(2300, 2277), (2600, 2444)])
def test_a_maximum_the_user_commits_is_kept_and_given_back(tmp_path: Path, user_mhz: int, held_after: int) -> None:
    rig = _rig(tmp_path, Board())
    state = rig.hot(5)
    assert state.ceiling_mhz == 2450
    _user(rig, f"s 1 {user_mhz}\n", "c\n")
    state = rig.hot(2)
    assert state.original_mhz == user_mhz and rig.od_max_mhz() == held_after
    assert clock_records(rig.runtime_dir).load()[rig.card.pci_slot]["sclk_max_mhz"] == user_mhz
    assert state.resets_total == 0
    states = [rig.tick(80.0) for _ in range(600)]  # it cools: never above the user's maximum
    assert states[-1].mode is ClockMode.IDLE and rig.od_max_mhz() == user_mhz
    assert max(s.ceiling_mhz or 0 for s in states) <= user_mhz


def test_the_users_maximum_is_what_goes_back_at_exit(tmp_path: Path) -> None:
    rig = _rig(tmp_path, Board())
    rig.hot(9)
    _user(rig, "s 1 2600\n", "c\n")
    rig.hot(2)
    rig.controller.restore()
    assert rig.od_max_mhz() == 2600 and not clock_records(rig.runtime_dir).path.exists()


def test_another_pending_edit_is_said_before_our_commit_commits_it(tmp_path: Path,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    rig = _rig(tmp_path, Board())
    rig.hot(2)
    _user(rig, "s 0 600\n")  # a person's edit, not committed
    with caplog.at_level(logging.WARNING, "gpuwatch.clock"):
        rig.hot(8)
    said = [r.getMessage() for r in caplog.records if "differs from what gpuwatch last left" in r.getMessage()]
    assert len(said) == 1 and "0: 600Mhz" in said[0]
    assert rig.sysfs.od_committed_mhz(rig.card.device_dir) == (600, rig.od_max_mhz())  # ours committed it


def test_an_apu_that_needs_manual_for_od_is_declined_with_the_reason(tmp_path: Path) -> None:
    rig = ClockRig(tmp_path, capture("apu-vangogh-steamdeck"))  # with an OD table, as in manual
    rig.tree.write(rig.device("device"), "0x163f\n")  # Van Gogh's PCI id (amdgpu_drv.c)
    state = rig.hot(3)
    assert state.mode is ClockMode.UNAVAILABLE and "vangogh APU takes OD edits only while" in (state.reason or "")
    assert all(name != OD for name, _ in rig.sysfs.take_log())


@pytest.mark.parametrize(("text", "table"), [
    # navi10_print_clk_levels before the two-line print: the current clock at an end, the middle the ends' mean.
    ("0: 300Mhz *\n1: 1025Mhz \n2: 1750Mhz \n", SclkTable((300, 1750), 0, 300)),
    ("0: 800Mhz \n1: 1712Mhz \n2: 2625Mhz *\n", SclkTable((800, 2625), 1, 2625)),
    # the current clock between the ends: the marked middle line, as today's kernels print it
    ("0: 300Mhz \n1: 1203Mhz *\n2: 1750Mhz \n", SclkTable((300, 1750), None, 1203)),
    # real levels (Vega, an APU's fixed middle level) stay levels
    ("0: 200Mhz *\n1: 1100Mhz \n2: 1600Mhz \n", SclkTable((200, 1100, 1600), 0, 200)),
])
def test_the_older_fine_grained_print_has_no_middle_level(text: str, table: SclkTable) -> None:
    assert parse_sclk(text) == table
