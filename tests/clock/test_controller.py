"""The clock controller on real captures: its write logs (the overdrive table and the level mask), the record
before the first write and the original back on every exit path (shutdown, `gpuwatch restore` after a SIGKILL),
a ceiling a GPU reset took away taken again, a hung write, and the cards it cannot drive."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from gpuwatch.config.file import parse_config
from gpuwatch.daemon import compose
from gpuwatch.model import ClockMode, ClockState, GpuReading, PowerMode, PowerState, Snapshot, TempReading
from gpuwatch.sim import navi31
from gpuwatch.supervise.actions import thermal_verdict
from gpuwatch.sysfs import Sysfs
from tests.support.clock_rig import ClockRig, ClockSysfs, clock_records, restore_clocks
from tests.support.trees import capture

NAVI21 = "navi21-rx6900xt-sapphire-nitro"
VEGA56 = "vega10-rx-vega56-asus-strix"
OD = "pp_od_clk_voltage"


def test_the_od_table_write_log_and_the_way_back(tmp_path: Path) -> None:
    rig = ClockRig(tmp_path, capture(NAVI21))
    first = rig.tick(100.0)  # junction limit 100 °C, set point 98: over it, the cap at its floor
    assert first.mode is ClockMode.LIMITING and first.backend == "od_table" and not first.pause_allowed
    assert rig.sysfs.take_log() == [(OD, "s 1 2475\n"), (OD, "c\n")] and rig.od_max_mhz() == 2475
    # Recorded before the first write: the original maximum, by PCI slot.
    assert clock_records(rig.runtime_dir).load() == {rig.card.pci_slot: {"backend": "od_table", "sclk_max_mhz": 2500}}
    hot = rig.hot(120)
    assert hot.ceiling_mhz is not None and hot.ceiling_mhz < 2475 and hot.writes_total > 1
    assert hot.original_mhz == 2500 and hot.floor_mhz == 1500 and hot.limited_seconds_total > 0
    rig.sysfs.take_log()
    rig.controller.restore()  # the daemon's shutdown
    assert rig.sysfs.take_log() == [(OD, "s 1 2500\n"), (OD, "c\n")] and rig.od_max_mhz() == 2500
    assert not clock_records(rig.runtime_dir).path.exists()


def test_it_steps_back_up_as_the_card_cools_and_gives_the_original_back(tmp_path: Path) -> None:
    rig = ClockRig(tmp_path, capture(NAVI21))
    rig.hot(20)
    assert rig.od_max_mhz() < 2500
    states = [rig.tick(80.0) for _ in range(3000)]
    assert states[-1].mode is ClockMode.IDLE and states[-1].ceiling_mhz is None and rig.od_max_mhz() == 2500
    assert not clock_records(rig.runtime_dir).path.exists()


def test_nothing_while_the_cap_still_has_room(tmp_path: Path) -> None:
    rig = ClockRig(tmp_path, capture(NAVI21))
    rig.power_mode = PowerMode.GOVERNING
    state = rig.hot(60)
    assert state.mode is ClockMode.IDLE and state.pause_allowed and rig.sysfs.take_log() == []


def test_a_gpu_reset_that_puts_the_table_back_is_seen_and_taken_again(tmp_path: Path) -> None:
    rig = ClockRig(tmp_path, capture(NAVI21))
    rig.tick(100.0)
    rig.tree.write(rig.device(OD), navi31.od_table(500, 2500))  # the firmware's table after a reset
    rig.sysfs.take_log()
    state = rig.tick(99.0)
    assert state.resets_total == 1 and rig.od_max_mhz() == 2475
    assert rig.sysfs.take_log() == [(OD, "s 1 2475\n"), (OD, "c\n")]


def test_dry_run_writes_nothing(tmp_path: Path) -> None:
    rig = ClockRig(tmp_path, capture(NAVI21), power={"clock": "dry-run"})
    state = rig.hot(30)
    assert state.mode is ClockMode.DRY_RUN and state.target_ceiling_mhz is not None and state.pause_allowed
    assert rig.sysfs.take_log() == [] and not clock_records(rig.runtime_dir).path.exists()


@pytest.mark.parametrize(("name", "od", "reason"), [
    (NAVI21, False, "no ceiling between the floor"),  # no OD: RDNA's mask has only the range's two ends
    ("navi33-rx7600s-laptop", False, "already manual"),
    ("navi10-rx5700xt-sapphire", False, "no pp_od_clk_voltage"),
])
def test_cards_it_cannot_drive_say_why_and_pause_as_before(tmp_path: Path, name: str, od: bool, reason: str) -> None:
    rig = ClockRig(tmp_path, capture(name), od=od)
    state = rig.hot(5)
    assert state.mode is ClockMode.UNAVAILABLE and reason in (state.reason or "") and state.pause_allowed
    assert rig.sysfs.take_log() == []


def test_the_level_mask_and_gpuwatch_restore_after_a_sigkill(tmp_path: Path) -> None:
    """Vega 56: no OD table, eight real levels, performance level auto. A daemon killed while it holds a ceiling
    leaves manual + a mask; `gpuwatch restore` (compose.restore_all, on the plain tree) gives auto back."""
    rig = ClockRig(tmp_path, capture(VEGA56), od=False)
    state = rig.hot(10, junction_c=95.5)  # just over its 95 °C limit (5 °C over steps down to the floor at once)
    assert state.backend == "dpm_mask" and state.mode is ClockMode.LIMITING
    log = rig.sysfs.take_log()
    assert log[:2] == [("power_dpm_force_performance_level", "manual\n"), ("pp_dpm_sclk", "0 1 2 3 4 5 6\n")]
    assert state.ceiling_mhz is not None and 991.0 <= state.ceiling_mhz < 1590.0 and state.floor_mhz == 991.0
    level = rig.device("power_dpm_force_performance_level")
    assert Sysfs(rig.tree.root).read(level) == "manual"
    # SIGKILL: no restore ran; ExecStopPost runs `gpuwatch restore` with the same config.
    config = parse_config({"runtime_dir": str(rig.runtime_dir), "sysfs_root": str(rig.tree.root)})
    result = compose.restore_all(config)
    assert result.problems == [] and f"{rig.card.pci_slot}: shader clocks back to the firmware" in result.done[0]
    assert Sysfs(rig.tree.root).read(level) == "auto" and not clock_records(rig.runtime_dir).path.exists()


def test_a_killed_daemons_ceiling_goes_back_at_the_next_start(tmp_path: Path) -> None:
    rig = ClockRig(tmp_path, capture(NAVI21))
    rig.hot(20)
    assert rig.od_max_mhz() < 2500
    rig.controller = rig.new_controller()  # started again after a SIGKILL, the card still cool
    state = rig.tick(60.0)
    assert rig.od_max_mhz() == 2500 and state.original_mhz == 2500 and state.mode is ClockMode.IDLE
    assert not clock_records(rig.runtime_dir).path.exists()


def test_restore_after_a_refused_write_is_reported_and_kept(tmp_path: Path) -> None:
    rig = ClockRig(tmp_path, capture(NAVI21))
    rig.hot(5)
    sysfs = ClockSysfs(rig.tree.root)
    sysfs.refuse = "EACCES"
    (problem,) = restore_clocks(sysfs, rig.runtime_dir).problems
    assert rig.card.pci_slot in problem and "EACCES" in problem
    assert rig.card.pci_slot in clock_records(rig.runtime_dir).load()
    done = restore_clocks(ClockSysfs(rig.tree.root), rig.runtime_dir)
    assert done.problems == [] and rig.od_max_mhz() == 2500


class HangingSysfs(ClockSysfs):
    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.release = threading.Event()
        self.hang = False

    def write(self, relative: str, value: str) -> None:
        if self.hang and relative.endswith(OD):
            self.release.wait(30)
        super().write(relative, value)


def test_a_hung_write_holds_neither_the_tick_nor_the_restore(tmp_path: Path) -> None:
    rig = ClockRig(tmp_path, capture(NAVI21))
    rig.sysfs = HangingSysfs(rig.tree.root)
    rig.controller = rig.new_controller(deadline_s=0.2)
    rig.sysfs.hang = True
    try:
        state = rig.tick(100.0)
        assert "blocked" in (state.reason or "") and state.pause_allowed
        with pytest.raises(RuntimeError, match="blocked"):
            rig.controller.restore()
    finally:
        rig.sysfs.release.set()


def _reading(slot: str, junction_c: float) -> GpuReading:
    return GpuReading(gpu_id=slot, card="card0", backend="amdgpu",
                      temps=(TempReading("junction", junction_c, crit_c=110.0),))


def test_the_supervisor_waits_while_the_clock_holds_and_pauses_at_its_floor() -> None:
    slot = "0000:03:00.0"
    snapshot = Snapshot(0.0, 0.0, (_reading(slot, 101.0),))
    from gpuwatch.config.cooling import ThermalConfig
    at_floor = (PowerState(gpu_id=slot, mode=PowerMode.FLOOR, pause_allowed=True),)
    holding = (ClockState(gpu_id=slot, mode=ClockMode.LIMITING, pause_allowed=False),)
    clock_floor = (ClockState(gpu_id=slot, mode=ClockMode.FLOOR, pause_allowed=True),)
    held = thermal_verdict(snapshot, (), ThermalConfig(), (), at_floor, 60.0, holding)
    assert held.hot and held.governed_backstop_s == 60.0 and "clock ceiling governed" in (held.reason or "")
    free = thermal_verdict(snapshot, (), ThermalConfig(), (), at_floor, 60.0, clock_floor)
    assert free.hot and free.governed_backstop_s is None


def test_a_first_write_refused_outright_leaves_nothing_to_give_back(tmp_path: Path) -> None:
    rig = ClockRig(tmp_path, capture(NAVI21))
    rig.sysfs.refuse = "EACCES"  # the file is writable, the driver still refuses (a locked-down kernel)
    state = rig.tick(100.0)
    assert state.mode is ClockMode.UNAVAILABLE and "EACCES" in (state.reason or "")
    assert rig.sysfs.take_log() == [(OD, "s 1 2475\n")]  # nothing else tried: nothing of ours is in force
    assert not clock_records(rig.runtime_dir).path.exists() and rig.od_max_mhz() == 2500


def test_a_killed_daemons_level_mask_goes_back_at_the_next_start(tmp_path: Path) -> None:
    """The mask a killed daemon left reads "manual": the next start gives the recorded level back before it
    probes, instead of taking "manual" for a person's choice."""
    rig = ClockRig(tmp_path, capture(VEGA56), od=False)
    rig.hot(20)
    level = rig.device("power_dpm_force_performance_level")
    assert Sysfs(rig.tree.root).read(level) == "manual"
    rig.controller = rig.new_controller()
    state = rig.tick(60.0)
    assert Sysfs(rig.tree.root).read(level) == "auto" and state.backend == "dpm_mask" and state.mode is ClockMode.IDLE
    assert not clock_records(rig.runtime_dir).path.exists()


def test_no_write_without_its_record(tmp_path: Path) -> None:
    """A runtime directory the record cannot be written to (full, read-only, not a directory): nothing is
    written, the card free to pause, tried again every tick; once the directory is usable the ceiling is
    recorded, then set, without a restart (three tries used to give the rung up until a restart)."""
    rig = ClockRig(tmp_path, capture(NAVI21))
    rig.runtime_dir.parent.mkdir(parents=True, exist_ok=True)
    rig.runtime_dir.write_text("not a directory\n")
    states = [rig.tick(100.0) for _ in range(20)]
    assert rig.sysfs.take_log() == [] and rig.od_max_mhz() == 2500
    assert states[-1].mode is not ClockMode.UNAVAILABLE and "cannot record the original" in (states[-1].reason or "")
    assert states[-1].pause_allowed
    rig.runtime_dir.unlink()
    rig.runtime_dir.mkdir()
    states = [rig.tick(100.0) for _ in range(5)]
    assert states[-1].mode is ClockMode.LIMITING and states[-1].reason is None and rig.od_max_mhz() < 2500
    assert clock_records(rig.runtime_dir).path.exists()


@pytest.mark.parametrize(("name", "od", "file"), [
    (NAVI21, True, OD), (VEGA56, False, "power_dpm_force_performance_level"),
])  # (an empty pp_dpm_sclk is SI's table for good: no levels to mask, tests/clock/test_captures.py)
def test_an_empty_clock_file_at_the_first_tick_is_probed_again(tmp_path: Path, name: str, od: bool, file: str) -> None:
    """Issue 31 point 12 for the clock rung: amdgpu prints an empty line when the SMU's query fails (amdgpu_pm.c,
    ``if (size == 0) size = sysfs_emit(buf, "\\n")``), as for power1_cap. That is a read to try again, never a
    card without a table given up until a restart (nor an empty performance level recorded as the original)."""
    rig = ClockRig(tmp_path, capture(name), od=od)
    path = rig.tree.root / rig.device(file)
    kept = path.read_text()
    path.write_text("\n")
    waiting = rig.tick(100.0)
    assert waiting.mode is not ClockMode.UNAVAILABLE and "not known yet" in (waiting.reason or ""), waiting
    assert waiting.pause_allowed and rig.sysfs.take_log() == []
    path.write_text(kept)
    assert rig.tick(100.0).mode in (ClockMode.LIMITING, ClockMode.FLOOR)  # Vega 56: 5 °C over its limit, the floor
