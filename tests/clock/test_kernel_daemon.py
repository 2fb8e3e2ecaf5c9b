"""Real processes (issue 49's "Done when", on our own kernel emulation): `gpuwatch run` on a simulated Navi 31-like
card whose firmware refuses a GfxclkFmax under an unprinted 2150 MHz and drops a forced performance level at
every OD commit, in a hot case (the fan stuck, the cap at its floor at once). The rung keeps the lowest ceiling
the card takes (published as its floor), the user's forced ``high`` is written back after every commit, a
maximum the user commits meanwhile is kept, and every exit (SIGTERM, SIGINT; SIGKILL or the watchdog's SIGABRT,
then `gpuwatch restore`) leaves exactly the user's settings: their maximum and their level."""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest

from gpuwatch.sim.kernel import KernelSysfs
from tests.support.daemon_process import hot_simulator, signalled_once
from tests.support.stack import GPUWATCH

DEVICE = "class/drm/card0/device"
# Under the ~2283 MHz the power-limited card runs at (sim/physics.operating_clock_ratio), where the law starts:
# a minimum above it would refuse the first step, which turns the rung off for the card (test_kernel_behaviour).
FMAX_MIN_MHZ, USER_MHZ = 2150, 2400


def _clock(run_dir: Path) -> dict[str, Any]:
    gpus = json.loads((run_dir / "state.json").read_text())["gpus"]
    clock: dict[str, Any] = gpus[0]["clock_ceiling"] or {}
    return clock


class Scenario:
    """The user's side while the daemon runs: the forced level set once the tree is there, the floor awaited,
    then the user's own maximum committed, awaited as the daemon's new original, and the level set again."""

    def __init__(self, tmp_path: Path) -> None:
        hot = hot_simulator(tmp_path, "navi31",
                            f'[simulate.kernel]\nfmax_min_mhz = {FMAX_MIN_MHZ}\ncommit_sets_level = "auto"\n')
        self.tree, self.run_dir, self.config = hot.tree, hot.run_dir, hot.config
        self.level = self.tree / DEVICE / "power_dpm_force_performance_level"
        self.step = "level"
        self.floor_seen: dict[str, Any] = {}
        self.level_after_commits: str | None = None

    def ready(self) -> bool:
        """Advanced from the wait loop (each step once its condition holds); True when all are done."""
        if self.step == "level":
            self.level.write_text("high\n")  # the user's forced level (raises until the tree is laid out)
            self.step = "floor"
        if self.step == "floor":
            clock = _clock(self.run_dir)
            if clock.get("card_floor_mhz") != FMAX_MIN_MHZ or clock.get("ceiling_mhz") != FMAX_MIN_MHZ:
                return False
            self.floor_seen, self.level_after_commits = clock, self.level.read_text().strip()
            user = KernelSysfs(self.tree)  # the user (LACT, a script) on the same table
            user.write(f"{DEVICE}/pp_od_clk_voltage", f"s 1 {USER_MHZ}\n")
            user.write(f"{DEVICE}/pp_od_clk_voltage", "c\n")
            self.step = "user"
        if self.step == "user":
            if _clock(self.run_dir).get("original_mhz") != USER_MHZ:
                return False
            # The user's own commit dropped their level too (the board does it to every commit): they set it
            # again once gpuwatch has taken their maximum, as LACT does after its commits (LACT #298).
            self.level.write_text("high\n")
            self.step = "done"
        return self.step == "done"

    def od_max_mhz(self) -> int | None:
        return KernelSysfs(self.tree).od_max_mhz(DEVICE)


KILLED = (signal.SIGKILL, signal.SIGABRT)  # no restore of its own: ExecStopPost's `gpuwatch restore` gives back


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, *KILLED],
                         ids=["SIGTERM", "SIGINT", "SIGKILL", "SIGABRT-watchdog"])
def test_the_rung_as_the_kernel_behaves_and_the_users_settings_on_every_exit(tmp_path: Path, sig: int) -> None:
    scenario = Scenario(tmp_path)
    status, err = signalled_once(scenario.config, scenario.ready, "the floor, then the user's maximum kept", 120, sig)
    log = err.decode(errors="replace")
    # The lowest ceiling the card took held, published as the card's own floor; a hot card may pause below it.
    assert scenario.floor_seen["mode"] == "floor" and scenario.floor_seen["pause_allowed"], scenario.floor_seen
    assert "is this card's lowest shader clock ceiling" in log or sig in KILLED
    assert scenario.level_after_commits == "high"  # written back after every commit that dropped it
    if sig in KILLED:
        assert status == -sig
        assert scenario.od_max_mhz() == FMAX_MIN_MHZ  # nobody gave it back yet
        record = json.loads((scenario.run_dir / "clock-restore.json").read_text())
        assert list(record.values()) == [{"backend": "od_table", "sclk_max_mhz": USER_MHZ}]
        done = subprocess.run([*GPUWATCH, "restore", "-c", str(scenario.config)], capture_output=True, timeout=60)
        assert done.returncode == 0, done.stderr.decode()
        assert f"shader clock ceiling back to its original {USER_MHZ} MHz" in done.stdout.decode()
    else:
        assert status == 0, log[-3000:]
        assert "Traceback" not in log, log[-3000:]
    # Exactly the user's settings: their maximum in force, their level, no record left.
    assert scenario.od_max_mhz() == USER_MHZ
    assert scenario.level.read_text().strip() == "high"
    assert not (scenario.run_dir / "clock-restore.json").exists()
