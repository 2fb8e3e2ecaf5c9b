"""The power controller on real captures: ordered writes, the restore file before the first write, verified
restore, dry-run, every way a cap can be unavailable, a cap that does not keep what is written, a restart
after SIGKILL, a cap changed by the user, and a GPU back under another hwmon index."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pytest

from gpuwatch.model import PowerMode
from tests.support.power_rig import EACCES, PowerRig
from tests.support.trees import capture

NAVI21 = "navi21-rx6900xt-sapphire-nitro"  # cap 289 W = default, power1_cap_min 0, max 332 W: floor 174 W


def test_hot_card_is_capped_then_given_back(tmp_path: Path) -> None:
    rig = PowerRig(tmp_path, capture(NAVI21))
    rig.set(junction_c=80, power_w=289)
    state = rig.tick(0, can_rise=False)
    assert (state.mode, state.cap_w, state.original_cap_w, state.floor_cap_w) == (PowerMode.IDLE, 289, 289, 174)
    assert state.pause_allowed and rig.sysfs.take_log() == []

    state = rig.governing(junction_c=99)  # 1 °C under the limit (crit 110 - 10), fan at its top
    assert state.mode is PowerMode.GOVERNING and not state.pause_allowed
    log = rig.sysfs.take_log()
    assert log and all(name == "power1_cap" and int(value) % 1_000_000 == 0 for name, value in log)
    assert [int(v) for _, v in log] == sorted((int(v) for _, v in log), reverse=True)  # only down while too hot
    assert state.cap_w == rig.cap_w() < 289 and state.target_cap_w == state.cap_w
    assert state.writes_total == len(log) and state.capped_seconds_total > 0
    assert state.throughput_kept_ratio is not None and 0.8 < state.throughput_kept_ratio < 1
    record = json.loads((rig.runtime_dir / "power-restore.json").read_text())[rig.card.pci_slot]
    assert record["backend"] == "hwmon" and record["cap_uw"] == 289_000_000

    rig.controller.restore()
    assert rig.sysfs.take_log() == [("power1_cap", "289000000")]
    assert rig.cap_w() == 289 and not (rig.runtime_dir / "power-restore.json").exists()
    rig.controller.restore()  # idempotent
    assert rig.sysfs.take_log() == []


def test_the_original_is_persisted_before_the_first_write(tmp_path: Path) -> None:
    rig = PowerRig(tmp_path, capture(NAVI21))
    record = rig.runtime_dir / "power-restore.json"
    seen: list[bool] = []
    write = rig.sysfs.write
    rig.sysfs.write = lambda rel, value: (seen.append(record.exists()), write(rel, value))[1]  # type: ignore[method-assign]
    rig.governing()
    assert seen and all(seen)


def test_no_write_without_its_record(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A runtime directory the record cannot be written to (full, read-only, not a directory): nothing is
    written, said once, the card free to pause, tried again every tick; once the directory is usable the cap is
    recorded, then lowered, without a restart. Before, the OSError left the whole tick (nothing published); then
    three tries gave the governor up until a restart, even once there was space again."""
    rig = PowerRig(tmp_path, capture(NAVI21))
    rig.runtime_dir.parent.mkdir(parents=True, exist_ok=True)
    rig.runtime_dir.write_text("not a directory\n")
    state = rig.governing()
    assert rig.sysfs.take_log() == [] and rig.cap_w() == 289
    assert state.mode is not PowerMode.UNAVAILABLE and "cannot record the original power cap" in (state.reason or "")
    assert state.pause_allowed and state.write_errors_total > 3 and state.writes_total == 0
    tries = [r.getMessage() for r in caplog.records if "cannot record" in r.getMessage() and r.levelname == "ERROR"]
    assert len(tries) == 1 and "(File exists): nothing written; tried again every tick" in tries[0], tries
    rig.runtime_dir.unlink()
    rig.runtime_dir.mkdir()
    state = rig.governing(seconds=5)
    assert state.mode is PowerMode.GOVERNING and state.reason is None and state.writes_total >= 1
    assert rig.cap_w() < 289 and (rig.runtime_dir / "power-restore.json").exists()


def test_writes_that_keep_failing_give_up_after_three(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """EIO on every power1_cap write of a governing card: three in a row and the governor gives up (the card
    pauses instead). Before, the old cap read back on the next tick reset the count: an error line every
    tick, for ever, and the card published as governing."""
    rig = PowerRig(tmp_path, capture(NAVI21))
    state = rig.governing(seconds=20)
    assert state.mode is PowerMode.GOVERNING and state.write_errors_total == 0
    rig.sysfs.refuse = "EIO"
    states = []
    for _ in range(10):
        rig.set(junction_c=104, power_w=rig.cap_w())
        states.append(rig.tick(rig.now + 1))
    assert [s.write_errors_total for s in states[:3]] == [1, 2, 3]
    assert states[2].mode is PowerMode.UNAVAILABLE and states[2].pause_allowed
    assert states[-1].reason == "3 power cap writes failed in a row, last: power1_cap write failed: EIO"
    assert sum(r.getMessage().endswith(": power1_cap write failed: EIO") for r in caplog.records) == 3
    assert "(run gpuwatch restore)" in caplog.text  # giving up gives back: that write fails too, the record stays
    rig.sysfs.refuse = None
    rig.controller.restore()
    assert rig.cap_w() == 289 and not (rig.runtime_dir / "power-restore.json").exists()


def test_fan_that_can_still_rise_keeps_the_governor_idle(tmp_path: Path) -> None:
    rig = PowerRig(tmp_path, capture(NAVI21))
    for at in range(30):
        rig.set(junction_c=99, power_w=289)
        state = rig.tick(at, can_rise=True)
    assert state.mode is PowerMode.IDLE and state.pause_allowed and rig.sysfs.take_log() == []


def test_at_the_floor_the_pause_is_allowed(tmp_path: Path) -> None:
    rig = PowerRig(tmp_path, capture(NAVI21))
    state = rig.governing(junction_c=106, seconds=120)  # over the limit whatever the cap
    assert (state.mode, state.cap_w, state.pause_allowed) == (PowerMode.FLOOR, 174, True)


def test_dry_run_logs_and_writes_nothing(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="gpuwatch.power")
    rig = PowerRig(tmp_path, capture(NAVI21), power={"mode": "dry-run"})
    state = rig.governing()
    assert rig.sysfs.take_log() == [] and rig.cap_w() == 289
    assert state.mode is PowerMode.DRY_RUN and state.pause_allowed  # the supervisor pauses as before
    assert state.target_cap_w is not None and state.target_cap_w < 289
    assert "dry-run: would set the power cap to" in caplog.text
    assert not (rig.runtime_dir / "power-restore.json").exists()


@pytest.mark.parametrize("fan_mode", ["monitor-only", "dry-run"])
def test_fan_modes_that_promise_no_writes_make_it_a_dry_run(tmp_path: Path, fan_mode: str) -> None:
    rig = PowerRig(tmp_path, capture(NAVI21), fan={"mode": fan_mode})
    assert rig.governing().mode is PowerMode.DRY_RUN and rig.sysfs.take_log() == []


def test_off_for_one_gpu_by_pci_slot(tmp_path: Path) -> None:
    rig = PowerRig(tmp_path, capture(NAVI21), power={"gpus": {"0000:0c:00.0": {"mode": "off"}}})
    assert rig.card.pci_slot == "0000:0c:00.0"
    assert rig.governing().mode is PowerMode.OFF and rig.sysfs.take_log() == []


@pytest.mark.parametrize(
    "name, reason",
    [
        ("navi33-rx7600s-laptop", "no room below the cap"),  # power1_cap_min = max = default = 95 W
        ("navi48-rx9070xt-powercolor", "no room below the cap"),  # the user set 120 W of 304: under the floor
        ("apu-vangogh-steamdeck", "slowPPT"),  # an APU package limit shared with the CPU
        ("apu-phoenix-lenovo", "no power1_cap"),  # no cap files at all
        ("si-oland-r7-240", "no power1_cap"),
    ],
)
def test_cards_without_a_cap_to_govern(tmp_path: Path, name: str, reason: str,
                                       caplog: pytest.LogCaptureFixture) -> None:
    rig = PowerRig(tmp_path, capture(name))
    if rig.card.hwmon_dir:
        states = [rig.governing(seconds=5) for _ in range(3)]
    else:
        states = [rig.tick(at) for at in range(3)]
    assert all(s.mode is PowerMode.UNAVAILABLE and s.pause_allowed and reason in (s.reason or "") for s in states)
    assert rig.sysfs.take_log() == []
    assert caplog.text.count("power cap not governed") == 1  # logged once


@pytest.mark.parametrize("refused", [EACCES, "EINVAL"])
def test_refused_write_falls_back_to_the_pause(tmp_path: Path, refused: str) -> None:
    rig = PowerRig(tmp_path, capture(NAVI21))
    rig.sysfs.refuse = refused
    state = rig.governing()
    assert state.mode is PowerMode.UNAVAILABLE and state.pause_allowed and refused in (state.reason or "")
    assert rig.cap_w() == 289
    assert [name for name, _ in rig.sysfs.take_log()] == ["power1_cap"]  # one try, never again


def test_non_root_sees_it_before_any_write(tmp_path: Path) -> None:
    rig = PowerRig(tmp_path, capture(NAVI21))
    if os.geteuid() == 0:
        pytest.skip("root may write a 0444 file: this is the non-root path")
    (rig.tree.root / rig.hwmon("power1_cap")).chmod(0o444)
    state = rig.governing(seconds=3)
    assert state.mode is PowerMode.UNAVAILABLE and "not writable" in (state.reason or "")


def test_a_cap_that_does_not_keep_what_is_written_is_given_up(tmp_path: Path) -> None:
    rig = PowerRig(tmp_path, capture(NAVI21))
    rig.sysfs.ignore = True  # old swsmu: every write "succeeds", the cap stays
    state = rig.governing(junction_c=101, seconds=10)
    assert state.mode is PowerMode.UNAVAILABLE and "does not keep" in (state.reason or "")
    assert state.pause_allowed and not (rig.runtime_dir / "power-restore.json").exists()
    writes = len(rig.sysfs.take_log())
    rig.governing(junction_c=101, seconds=10)
    assert rig.sysfs.take_log() == [] and writes <= 4


def test_a_gpu_reset_that_restores_the_default_is_re_asserted(tmp_path: Path) -> None:
    rig = PowerRig(tmp_path, capture(NAVI21))
    held = rig.governing().cap_w
    rig.tree.write(rig.hwmon("power1_cap"), "289000000\n")  # a GPU reset: the firmware's default again
    state = rig.governing(seconds=5)
    assert state.mode is PowerMode.GOVERNING and state.cap_w is not None and state.cap_w <= (held or 0) + 3


def test_restart_after_sigkill_restores_the_true_original(tmp_path: Path) -> None:
    rig = PowerRig(tmp_path, capture(NAVI21))
    lowered = rig.governing().cap_w
    assert lowered is not None and lowered < 289
    # SIGKILL: no restore. A new daemon must not take the lowered cap for the original.
    rig.controller = rig.new_controller()
    rig.sysfs.take_log()
    rig.set(junction_c=60, power_w=50)
    state = rig.tick(rig.now + 1, can_rise=True)
    assert state.original_cap_w == 289 and rig.sysfs.take_log() == [("power1_cap", "289000000")]
    assert state.mode is PowerMode.IDLE and not (rig.runtime_dir / "power-restore.json").exists()


def test_off_still_gives_back_a_cap_a_killed_daemon_left_lowered(tmp_path: Path) -> None:
    rig = PowerRig(tmp_path, capture(NAVI21))
    rig.governing()
    rig.config = rig.config.model_copy(update={"power": rig.config.power.model_copy(update={"mode": "off"})})
    rig.controller = rig.new_controller()  # SIGKILL, then a restart with the governor switched off
    rig.sysfs.take_log()
    state = rig.tick(rig.now + 1)
    assert state.mode is PowerMode.OFF and rig.sysfs.take_log() == [("power1_cap", "289000000")]
    assert not (rig.runtime_dir / "power-restore.json").exists()
    rig.tick(rig.now + 1)
    assert rig.sysfs.take_log() == []


def test_a_cap_set_by_the_user_while_idle_is_the_new_original(tmp_path: Path) -> None:
    rig = PowerRig(tmp_path, capture(NAVI21))
    rig.set(junction_c=60, power_w=50)
    rig.tick(0, can_rise=True)
    rig.tree.write(rig.hwmon("power1_cap"), "250000000\n")  # rocm-smi --setpoweroverdrive 250
    state = rig.tick(1, can_rise=True)
    assert (state.original_cap_w, state.floor_cap_w) == (250, 174) and rig.sysfs.take_log() == []


def test_a_gpu_back_under_another_hwmon_index_is_written_where_it_now_is(tmp_path: Path) -> None:
    rig = PowerRig(tmp_path, capture(NAVI21))
    rig.governing()
    assert rig.card.hwmon_dir is not None
    old = rig.tree.root / rig.card.hwmon_dir
    new = old.with_name("hwmon9")
    os.rename(old, new)
    (rig.tree.root / "class/hwmon" / old.name).unlink()
    rig.card = type(rig.card)(rig.card.card, rig.card.pci_slot, rig.card.device_dir,
                              f"{rig.card.device_dir}/hwmon/hwmon9")
    rig.now += 31  # the amdgpu source rediscovers every 30 s
    rig.sysfs.take_log()
    state = rig.governing(junction_c=101, seconds=3)
    assert state.mode is PowerMode.GOVERNING and rig.cap_w() < 289
    assert rig.sysfs.paths and all("/hwmon9/" in path for path in rig.sysfs.paths), rig.sysfs.paths
    rig.controller.restore()
    assert rig.cap_w() == 289 and not (rig.runtime_dir / "power-restore.json").exists()


def test_a_hung_cap_write_holds_neither_the_tick_nor_the_restore(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """power1_cap writes run on the GPU's worker within the deadline (gpuwatch.actuation): a write the
    driver never returns from costs one deadline, the card is published as blocked and paused as without
    a governor, the shutdown's restore gives up after the deadline, and `gpuwatch restore` retries."""
    import threading
    import time

    from gpuwatch.power.controller import PowerController

    rig = PowerRig(tmp_path, capture(NAVI21))
    rig.controller = PowerController(rig.sysfs, rig.runtime_dir, locate=rig.source.locate,
                                     clock=lambda: rig.now, deadline_s=0.2)
    state = rig.governing()
    assert state.mode is PowerMode.GOVERNING and not state.pause_allowed
    release = threading.Event()
    write = rig.sysfs.write

    def stuck_write(relative: str, value: str) -> None:  # the driver never returns from the write
        release.wait(30)
        write(relative, value)

    rig.sysfs.write = stuck_write  # type: ignore[method-assign]
    try:
        started = time.monotonic()
        rig.set(junction_c=104)  # hotter still: the next cut falls due at once
        first = rig.tick(rig.now + 1)
        assert "blocked" in (first.reason or "") and first.pause_allowed
        # No tick runs beside the stuck step, which still holds this GPU's state: every tick is "blocked"
        # until it returns.
        later = [rig.tick(rig.now + 1) for _ in range(3)]
        assert all("blocked" in (s.reason or "") and s.pause_allowed for s in later), later
        assert sum("power cap writes blocked" in r.getMessage() for r in caplog.records) == 1  # once per episode
        with pytest.raises(RuntimeError, match="blocked"):
            rig.controller.restore()
        assert time.monotonic() - started < 10  # one deadline per tick at most, never the 30 s write
        assert (rig.runtime_dir / "power-restore.json").exists()  # kept: gpuwatch restore tries again
    finally:
        release.set()
    rig.sysfs.write = write  # type: ignore[method-assign]
    from tests.support.waiting import wait_for

    wait_for(lambda: not rig.controller.actuator.busy(rig.card.pci_slot), "the stuck write returned")
    rig.controller.restore()
    assert rig.cap_w() == 289 and not (rig.runtime_dir / "power-restore.json").exists()


def test_every_cap_step_runs_on_the_gpus_worker(tmp_path: Path) -> None:
    """Every step runs on the GPU's worker (``Actuator.run``), a quiet tick of a cool, idle card too, and so
    does every write of a governing episode (cuts, a verify failure, the release, a user's new cap, the
    restore)."""
    import threading

    rig = PowerRig(tmp_path, capture(NAVI21))
    threads: list[str] = []
    write = rig.sysfs.write

    def recording(relative: str, value: str) -> None:
        threads.append(threading.current_thread().name)
        write(relative, value)

    rig.sysfs.write = recording  # type: ignore[method-assign]
    handed: list[int] = []
    run = rig.controller.actuator.run
    rig.controller.actuator.run = lambda calls: (handed.append(len(calls)), run(calls))[1]  # type: ignore[method-assign]
    rig.set(junction_c=70, power_w=150)
    for at in range(5):
        rig.tick(at, can_rise=True)
    assert handed == [1] * 5  # one hand-off per tick, each of the GPU's one step
    rig.governing(junction_c=99)
    rig.sysfs.ignore = True  # the firmware keeps the old value: verify failures until it gives up
    for _ in range(5):
        rig.set(junction_c=104, power_w=rig.cap_w())
        rig.tick(rig.now + 1)
    rig.sysfs.ignore = False
    rig.controller.restore()
    assert threads and all(name.startswith("gpuwatch-power-") for name in threads), threads
