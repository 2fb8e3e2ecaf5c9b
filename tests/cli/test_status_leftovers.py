"""Issue 32 points 5 and 12: `status` warns of what a killed daemon left behind (exit 1, `gpuwatch restore` named),
exits 1 with a clear line when it finds no GPU, and shows only the GPUs named with `--gpu SLOT|INDEX`."""

from __future__ import annotations

import json
import resource
import subprocess
from pathlib import Path

import pytest

from gpuwatch.sim.tree import FakeSysfsTree
from tests.support.cli import GPUWATCH, gpuwatch
from tests.support.trees import capture
from tests.support.waiting import wait_for

NAVI31, NAVI10 = "0000:03:00.0", "0000:28:00.0"  # listed in this order: index 0, 1


@pytest.fixture
def setup(tmp_path: Path) -> tuple[FakeSysfsTree, Path]:
    tree = FakeSysfsTree(tmp_path / "sys")
    tree.add_capture(capture("navi10-rx5700xt-sapphire"))
    tree.add_capture(capture("navi31-rx7900xtx-sapphire-nitro"))
    config = tmp_path / "gpuwatch.toml"
    config.write_text(f'sysfs_root = "{tree.root}"\nruntime_dir = "{tmp_path / "run"}"\n[http]\nenabled = false\n')
    return tree, config


def test_a_killed_daemons_manual_fan_and_lowered_cap_are_said_and_exit_1(tmp_path: Path) -> None:
    """The report's scenario: the daemon lowered the cap and drove the fan, then was SIGKILLed. `status` used to
    read the cards directly, say nothing and exit 0."""
    tree, run_dir = tmp_path / "tree", tmp_path / "run"
    config = tmp_path / "gpuwatch.toml"
    config.write_text(f'runtime_dir = "{run_dir}"\ninterval_s = 0.05\n[http]\nenabled = false\n'
                      f'[simulate]\nenabled = true\ntree_dir = "{tree}"\ntime_scale = 50.0\ncooling_scale = 0.4\n')
    hwmon = tree / "class/hwmon/hwmon1"
    original_uw = int((hwmon / "power1_cap").read_text()) if (hwmon / "power1_cap").exists() else 150_000_000
    daemon = subprocess.Popen([GPUWATCH, "run", "-c", str(config)], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL,
                              preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_CORE, (0, 0)))
    try:
        wait_for(lambda: int((hwmon / "power1_cap").read_text()) < original_uw, "the governor to lower the cap", 60,
                 ignore=(OSError, ValueError))
        daemon.kill()
        daemon.wait(timeout=30)
    finally:
        if daemon.poll() is None:
            daemon.kill()
            daemon.wait()
    assert (hwmon / "pwm1_enable").read_text().strip() == "1"  # nobody gave the fan back
    for sensor in hwmon.glob("temp*_input"):  # a cold card: only what was left behind may fail the status
        sensor.write_text("40000\n")

    result = gpuwatch("status", "-c", str(config))
    assert result.returncode == 1, result.stdout + result.stderr
    text = result.stdout
    assert f"LEFT BEHIND: no daemon runs, yet {run_dir / 'fan-restore.json'} holds a fan taken from the firmware " \
           f"({NAVI10})" in text
    assert f"{run_dir / 'power-restore.json'} holds a lowered power cap ({NAVI10})" in text
    assert f"LEFT BEHIND: {NAVI10}: fan in manual mode (pwm1_enable 1) and no daemon drives it" in text
    assert "run `gpuwatch restore` to give them back" in text
    as_json = gpuwatch("status", "--json", "-c", str(config))
    assert as_json.returncode == 1 and json.loads(as_json.stdout)["daemon"] is None  # stdout stays the document
    assert "gpuwatch: no daemon runs, yet" in as_json.stderr

    assert gpuwatch("restore", "-c", str(config)).returncode == 0
    after = gpuwatch("status", "-c", str(config))
    assert after.returncode == 0, after.stdout
    assert "LEFT BEHIND" not in after.stdout


def test_a_fan_in_manual_mode_without_a_daemon_is_said_and_exits_1(setup: tuple[FakeSysfsTree, Path]) -> None:
    tree, config = setup
    hwmon = next((tree.root / "class/drm/card1/device/hwmon").iterdir())
    assert gpuwatch("status", "-c", str(config)).returncode == 0  # the firmware's fans (pwm1_enable 2)
    (hwmon / "pwm1_enable").write_text("1\n")
    result = gpuwatch("status", "-c", str(config))
    assert result.returncode == 1
    assert f"LEFT BEHIND: {NAVI10}: fan in manual mode (pwm1_enable 1) and no daemon drives it" in result.stdout
    assert "`gpuwatch restore`" in result.stdout


def test_no_gpu_found_exits_1_with_a_clear_line(tmp_path: Path) -> None:
    tree = FakeSysfsTree(tmp_path / "sys")
    (tree.root / "class/drm").mkdir(parents=True, exist_ok=True)
    config = tmp_path / "gpuwatch.toml"
    config.write_text(f'sysfs_root = "{tree.root}"\nruntime_dir = "{tmp_path / "run"}"\nbackend = "amdgpu"\n')
    result = gpuwatch("status", "-c", str(config))
    assert result.returncode == 1
    assert "no GPU found: no amdgpu card in the sysfs tree read and no NVIDIA GPU through NVML" in result.stdout
    assert gpuwatch("status", "--json", "-c", str(config)).returncode == 1


def test_exit_code_and_render_of_leftovers_are_pure() -> None:
    from gpuwatch.cli.status import exit_code, render

    doc = {"gpus": [{"gpu_id": NAVI10, "card": "card1", "up": True, "over_limit": [], "fan_controller": None}],
           "daemon": None, "taken_unix": 0.0}
    assert exit_code(doc) == 0  # type: ignore[arg-type]
    assert exit_code(doc, ["something left behind"]) == 1  # type: ignore[arg-type]
    assert exit_code({**doc, "gpus": []}) == 1  # type: ignore[arg-type]
    text = render(doc, now=0.0, leftovers=["x"])  # type: ignore[arg-type]
    assert "LEFT BEHIND: x\n  run `gpuwatch restore`" in text


def test_a_running_daemons_restore_files_are_not_leftovers(tmp_path: Path) -> None:
    from gpuwatch.cli.leftovers import leftovers

    (tmp_path / "fan-restore.json").write_text(json.dumps({NAVI10: {"backend": "pwm1"}}))
    doc = {"daemon": {"pid": 1}, "gpus": [{"gpu_id": NAVI10, "pwm_enable": 1, "fan_controller": {"mode": "curve"}}]}
    assert leftovers(doc, tmp_path) == []  # type: ignore[arg-type]
    alone = {"daemon": None, "gpus": []}
    assert leftovers(alone, tmp_path) == [  # type: ignore[arg-type]
        f"no daemon runs, yet {tmp_path / 'fan-restore.json'} holds a fan taken from the firmware ({NAVI10}): "
        "it was not given back"]


@pytest.mark.parametrize(("chosen", "slots"), [
    (["1"], [NAVI10]),
    ([NAVI10], [NAVI10]),
    (["28:00.0"], [NAVI10]),  # lspci's form, as every command reads --gpu (issue 50 item 8)
    (["card1"], [NAVI10]),
    (["1", NAVI31], [NAVI31, NAVI10]),
    (["1", NAVI10], [NAVI10]),
])
def test_status_gpu_shows_only_the_gpus_named(setup: tuple[FakeSysfsTree, Path], chosen: list[str],
                                              slots: list[str]) -> None:
    _, config = setup
    args = [arg for item in chosen for arg in ("--gpu", item)]
    doc = json.loads(gpuwatch("status", "--json", *args, "-c", str(config)).stdout)
    assert [gpu["gpu_id"] for gpu in doc["gpus"]] == slots
    text = gpuwatch("status", *args, "-c", str(config)).stdout
    assert [slot for slot in (NAVI31, NAVI10) if f"[{slot}]" in text] == slots
    assert [gpu["gpu_id"] for gpu in json.loads(gpuwatch("sensors", "--json", *args, "-c", str(config)).stdout)[
        "gpus"]] == slots


@pytest.mark.parametrize("item, why", [
    ("2", "no GPU with index 2 here"), ("0000:99:00.0", "no such GPU here"), ("99:00.0", "no such GPU here"),
    ("card7", "no DRM card card7 here"),
])
def test_status_gpu_of_no_such_gpu_is_a_usage_error(setup: tuple[FakeSysfsTree, Path], item: str, why: str) -> None:
    _, config = setup
    result = gpuwatch("status", "--gpu", item, "-c", str(config))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.startswith("usage: gpuwatch status")
    assert f"--gpu {item}: {why} (index, slot, card: 0 {NAVI31} card0, 1 {NAVI10} card1)" in result.stderr


def test_status_gpu_is_not_for_remote(setup: tuple[FakeSysfsTree, Path]) -> None:
    _, config = setup
    result = gpuwatch("status", "--remote", "box1", "--gpu", "0", "-c", str(config))
    assert result.returncode == 2 and "not with --remote" in result.stderr


def test_status_watch_into_a_pipe_writes_no_escape_codes(setup: tuple[FakeSysfsTree, Path]) -> None:
    """Issue 50 item 15: `status --watch 1 | head` got ESC[H ESC[2J in the pipe; a reading after a blank line now."""
    _, config = setup
    done = subprocess.run(["bash", "-c", f"{GPUWATCH} status --watch 0.1 --color never -c {config} | head -n 400"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "\x1b" not in done.stdout, done
    readings = done.stdout.split("\n\ngpuwatch  ")
    assert len(readings) >= 2 and readings[0].startswith("gpuwatch  "), done.stdout
