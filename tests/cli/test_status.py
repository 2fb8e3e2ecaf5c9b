"""`gpuwatch status` / `sensors` as a user runs them: real processes against fake trees."""

from __future__ import annotations

import json
import os
import pty
import signal
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest

from gpuwatch.sim.tree import FakeSysfsTree
from tests.support.cli import GPUWATCH, gpuwatch, gpuwatch_process
from tests.support.trees import capture
from tests.support.waiting import wait_for


@pytest.fixture
def setup(tmp_path: Path) -> tuple[FakeSysfsTree, Path]:
    tree = FakeSysfsTree(tmp_path / "sys")
    tree.add_capture(capture("navi10-rx5700xt-sapphire"))
    tree.add_capture(capture("navi31-rx7900xtx-sapphire-nitro"))
    config = tmp_path / "gpuwatch.toml"
    config.write_text(
        f'sysfs_root = "{tree.root}"\nruntime_dir = "{tmp_path / "run"}"\ninterval_s = 0.2\n'
        "[http]\nenabled = false\n[fan]\nmode = \"monitor-only\"\n"
    )
    return tree, config


def test_status_json_without_daemon_reads_sysfs(setup: tuple[FakeSysfsTree, Path]) -> None:
    _, config = setup
    result = gpuwatch("status", "--json", "-c", str(config))
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["schema"] == 1 and doc["source"] == "sysfs" and doc["daemon"] is None
    navi10 = next(g for g in doc["gpus"] if g["gpu_id"] == "0000:28:00.0")
    assert navi10["temperatures"]["junction"] == {
        "temp_c": 58.0, "crit_c": 108.0, "crit_hyst_c": None, "emergency_c": 113.0, "limit_c": 98.0,
    }
    assert navi10["power_w"] == 29.0 and navi10["power_cap_w"] == 220.0 and navi10["fan_rpm"] == 29
    assert navi10["pwm"] == 65 and navi10["pwm_enable"] == 2 and navi10["vram_total_bytes"] is None
    text = gpuwatch("status", "-c", str(config)).stdout
    assert "daemon is not running" in text and "[0000:28:00.0] card1" in text and "\033[" not in text
    assert "vram   N/A / N/A" in text


def test_status_exit_1_when_over_limit(setup: tuple[FakeSysfsTree, Path]) -> None:
    tree, config = setup
    hwmon = next((tree.root / "class/drm/card1/device/hwmon").iterdir())
    (hwmon / "temp2_input").write_text("99000\n")  # junction limit = crit 108 - 10
    result = gpuwatch("status", "--json", "-c", str(config))
    assert result.returncode == 1
    assert next(g for g in json.loads(result.stdout)["gpus"] if g["card"] == "card1")["over_limit"] == ["junction"]


def test_status_reads_running_daemon_state(setup: tuple[FakeSysfsTree, Path], tmp_path: Path) -> None:
    _, config = setup
    daemon = subprocess.Popen([GPUWATCH, "run", "-c", str(config)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        state = tmp_path / "run/state.json"
        def published() -> bool:
            assert daemon.poll() is None, daemon.stderr.read() if daemon.stderr else ""
            return state.exists()

        wait_for(published, "the daemon's state file", 20)
        doc = json.loads(gpuwatch("status", "--json", "-c", str(config)).stdout)
        assert doc["source"] == "daemon" and doc["daemon"]["pid"] == daemon.pid
        assert len(doc["gpus"]) == 2
        text = gpuwatch("status", "-c", str(config)).stdout
        assert f"daemon running (pid {daemon.pid}" in text
        header, note = gpuwatch("sensors", "-c", str(config)).stdout.splitlines()[:2]
        assert "read from sysfs" in header and "not running" not in header
        assert note.startswith(f"gpuwatch daemon running (pid {daemon.pid}); these values are read directly")
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=20)
    assert not state.exists()
    assert "daemon is not running" in gpuwatch("status", "-c", str(config)).stdout


def test_colours_only_on_a_tty(setup: tuple[FakeSysfsTree, Path]) -> None:
    _, config = setup
    assert "\033[31m" not in gpuwatch("status", "-c", str(config)).stdout
    assert "\033[32m" in gpuwatch("status", "--color", "always", "-c", str(config)).stdout
    # README: an explicit --color always wins over NO_COLOR; NO_COLOR turns off the automatic colours.
    no_color = {**os.environ, "NO_COLOR": "1"}
    assert "\033[32m" in gpuwatch("status", "--color", "always", "-c", str(config), env=no_color).stdout
    env = {k: v for k, v in os.environ.items() if k != "NO_COLOR"}
    assert b"\033[32m" in _on_a_tty([GPUWATCH, "status", "-c", str(config)], env)
    assert b"\033[" not in _on_a_tty([GPUWATCH, "status", "-c", str(config)], {**env, "NO_COLOR": "1"})


def _on_a_tty(argv: list[str], env: dict[str, str]) -> bytes:
    """What ``argv`` prints when its stdout is a terminal."""
    leader, follower = pty.openpty()
    proc = subprocess.Popen(argv, stdout=follower, stderr=subprocess.DEVNULL, env=env)
    os.close(follower)
    output = b""
    while True:
        try:
            chunk = os.read(leader, 4096)
        except OSError:
            break
        if not chunk:
            break
        output += chunk
    proc.wait(timeout=30)
    os.close(leader)
    return output


@pytest.mark.parametrize("runner_sigint", [signal.default_int_handler, signal.SIG_IGN],
                         ids=["runner-default", "runner-ignores-sigint"])
def test_watch_refreshes_until_interrupted(setup: tuple[FakeSysfsTree, Path], runner_sigint: Any) -> None:
    """Ctrl-C ends ``--watch`` with 130, also when the test runner itself was started with SIGINT ignored
    (``nohup make test &``: a background job's SIGINT is ignored, and that is inherited across exec)."""
    _, config = setup
    previous = signal.signal(signal.SIGINT, runner_sigint)
    try:
        proc = gpuwatch_process("status", "--watch", "0.1", "-c", str(config))
    finally:
        signal.signal(signal.SIGINT, previous)
    out = Lines(proc)
    try:
        wait_for(lambda: out.text().count("[0000:28:00.0]") >= 2, "two refreshes", 30, detail=out.text)
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=20)
    finally:
        proc.kill()
        proc.wait()
    out.join()
    assert out.text().count("[0000:28:00.0]") >= 2 and proc.returncode == 130


def test_watch_keeps_its_threads_across_refreshes(setup: tuple[FakeSysfsTree, Path]) -> None:
    """Every refresh reads the two cards through the same reader threads: after 30 refreshes the
    process has a handful of threads, not a new set per refresh (it once built fresh GPU sources each
    time, whose per-GPU reader threads idle 30 s before they end: about 27 more threads a second)."""
    _, config = setup
    proc = gpuwatch_process("status", "--watch", "0.1", "-c", str(config))
    out = Lines(proc)
    try:
        wait_for(lambda: out.text().count("[0000:28:00.0]") >= 30, "30 refreshes", 120, detail=out.text)
        threads = len(os.listdir(f"/proc/{proc.pid}/task"))
    finally:
        proc.kill()
        proc.wait()
    out.join()
    # The main thread, one reader per card, one for discovery (gpuwatch.deadline): 30 refreshes once made 60+.
    assert threads <= 6, f"{threads} threads after 30 refreshes"


def test_json_watch_prints_json_lines(setup: tuple[FakeSysfsTree, Path]) -> None:
    _, config = setup
    proc = gpuwatch_process("status", "--json", "--watch", "0.1", "-c", str(config))
    out = Lines(proc)
    wait_for(lambda: len(out.lines) >= 2, "two documents", 30, detail=out.text)
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=20)
    out.join()
    docs = [json.loads(line) for line in out.lines]  # one compact document per line
    assert all(doc["schema"] == 1 and len(doc["gpus"]) == 2 for doc in docs)


@pytest.mark.parametrize("args", [
    ("status", "--json", "--watch", "0.1"),
    ("status", "--watch", "0.1"),
    ("sensors", "--json"),
    ("check-config",),
])
def test_a_closed_pipe_ends_quietly(setup: tuple[FakeSysfsTree, Path], args: tuple[str, ...]) -> None:
    """`gpuwatch ... | head -1`: the reader goes away; no traceback, and the exit a shell shows for SIGPIPE."""
    _, config = setup
    target = [str(config)] if args[0] == "check-config" else ["-c", str(config)]
    proc = subprocess.Popen([GPUWATCH, *args, *target], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    proc.stdout.close()  # nobody reads: the first write fails with EPIPE
    _, err = proc.communicate(timeout=30)
    assert (proc.returncode, err) == (141, "")


@pytest.mark.parametrize("watch", ["-1", "0", "soon", "nan"])
def test_watch_needs_a_positive_period(setup: tuple[FakeSysfsTree, Path], watch: str) -> None:
    _, config = setup
    result = gpuwatch("status", "--watch", watch, "-c", str(config))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.startswith("usage: gpuwatch status") and "--watch" in result.stderr.splitlines()[-1]


def test_plain_status_marks_a_sensor_over_its_limit_and_shows_the_limits(setup: tuple[FakeSysfsTree, Path]) -> None:
    tree, config = setup
    hwmon = next((tree.root / "class/drm/card1/device/hwmon").iterdir())
    (hwmon / "temp2_input").write_text("99000\n")  # junction limit = crit 108 - 10
    result = gpuwatch("status", "-c", str(config))
    assert result.returncode == 1
    block = result.stdout.split("[0000:28:00.0] card1")[1].splitlines()
    assert block[1] == "  temp   edge 58°C  junction 99°C OVER LIMIT  mem 62°C"
    assert block[2] == "  limit  pause at edge 90°C  junction 98°C  mem 100°C"
    assert block[3] == "  crit   edge 100°C  junction 108°C  mem 105°C"


def test_the_crit_line_names_every_sensor_and_leaves_out_those_without_one(tmp_path: Path) -> None:
    """Issue 32 point 10: ``crit 100/110/105/-/-/-°C`` named no sensor; the gpu_metrics-only VR sensors have none."""
    from gpuwatch.cli.status import render
    from gpuwatch.publish.document import to_document
    from tests.support.published import example_state

    doc = to_document(example_state(tmp_path / "sys"), "daemon")
    assert set(doc["gpus"][0]["temperatures"]) >= {"vrgfx", "vrsoc", "vrmem"}  # the six sensors of the report
    lines = render(doc, now=doc["taken_unix"]).splitlines()
    assert "  crit   edge 100°C  junction 110°C  mem 100°C" in lines
    assert not any("/" in line for line in lines if line.startswith("  crit "))
    assert all(len(line) <= 80 for line in lines if line.startswith(("  limit ", "  crit ")))


def test_status_and_sensors_read_the_simulated_tree_of_a_simulating_config(tmp_path: Path) -> None:
    """A config with [simulate] means its simulated cards to every command, as it does to the daemon."""
    config = tmp_path / "sim.toml"
    config.write_text(f'runtime_dir = "{tmp_path / "run"}"\n[simulate]\nenabled = true\ngpus = 2\n')
    absent = gpuwatch("sensors", "-c", str(config))
    assert "simulated cards: " in absent.stdout and "absent: the simulator lays it out" in absent.stdout
    from gpuwatch.config.file import load_config
    from gpuwatch.sim.start import start_simulator

    start_simulator(load_config(config))  # the tree a daemon would lay out (it stays after a SIGKILL)
    for command in ("status", "sensors"):
        doc = json.loads(gpuwatch(command, "--json", "-c", str(config)).stdout)
        assert [gpu["gpu_id"] for gpu in doc["gpus"]] == ["0000:28:00.0", "0000:2b:00.0"]
    assert "simulated cards: " + str(tmp_path / "run/simulated-sysfs") in gpuwatch("status", "-c", str(config)).stdout


class Lines:
    """A child's stdout read on a thread as it comes (a pipe that is never read would block the child)."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.lines: list[str] = []
        assert proc.stdout is not None
        self._thread = threading.Thread(target=self.lines.extend, args=(proc.stdout,), daemon=True)
        self._thread.start()

    def text(self) -> str:
        return "".join(self.lines)

    def join(self) -> None:
        self._thread.join(timeout=20)


def test_status_shows_the_governed_cap_and_why_not(tmp_path: Path) -> None:
    from gpuwatch.cli.status import render
    from gpuwatch.publish.document import to_document
    from tests.support.published import example_state

    doc = to_document(example_state(tmp_path / "sys"), "daemon")
    text = render(doc, now=doc["taken_unix"])
    assert " / cap 245/289 W, governed   sclk " in text  # the power line
    assert "  govern power cap not governed: power1_cap refuses writes (EACCES)" in text
    assert text.count("  govern ") == 1  # only where it cannot govern: the screen stays short


@pytest.mark.parametrize(("mode", "cap"), [
    ("idle", "cap 289 W   sclk 2500 MHz  mclk 1000 MHz  energy 12.345 kWh"),
    ("governing", "cap 245/289 W, governed   sclk 2500 MHz  energy 12.345 kWh"),
    ("floor", "cap 174/289 W, at floor   sclk 2500 MHz  energy 12.345 kWh"),
    ("dry-run", "cap 289 W, would set 245 W   sclk 2500 MHz  energy 12.345 kWh"),
])
def test_the_power_line_keeps_within_80_columns_on_a_big_card(tmp_path: Path, mode: str, cap: str) -> None:
    """A 289 W card at its top clock after a long run: the widest power line make run's 80x24 screen may get."""
    from gpuwatch.cli.status import render
    from gpuwatch.publish.document import to_document
    from tests.support.published import example_state

    doc = to_document(example_state(tmp_path / "sys"), "daemon")
    gpu = doc["gpus"][0]
    held = {"idle": 289.0, "governing": 245.0, "floor": 174.0, "dry-run": 289.0}[mode]
    gpu.update(power_w=245.0, power_cap_w=held, sclk_hz=2500e6, mclk_hz=1000e6, energy_joules=12.345 * 3.6e6)
    assert gpu["power_governor"] is not None
    gpu["power_governor"].update(mode=mode, cap_w=held, target_cap_w=245.0, original_cap_w=289.0)
    line = next(line for line in render(doc, now=doc["taken_unix"]).splitlines() if line.startswith("  power  "))
    assert line == f"  power  245 W / {cap}"
    assert len(line) <= 80


def test_trainer_lines_show_a_jobs_ranks(tmp_path: Path) -> None:
    from gpuwatch.cli.status import render
    from gpuwatch.publish.document import to_document
    from tests.support.published import NOW_UNIX, example_state

    doc = to_document(example_state(tmp_path / "sys"), "daemon")
    lines = render(doc, NOW_UNIX).splitlines()
    resnet = next(line for line in lines if line.startswith("trainer resnet"))
    bert = next(line for line in lines if line.startswith("trainer bert"))
    assert "  2 ranks (job: 4)" in resnet  # two of the job's four ranks run here
    assert bert.endswith("2/2 ranks held  (junction over limit)"), bert
    trainer = doc["trainers"][0]
    trainer["phase"], trainer["ranks_held"], trainer["reason"] = "pausing", 1, "pausing: hot"  # one still to hold
    pausing = next(line for line in render(doc, NOW_UNIX).splitlines() if line.startswith("trainer resnet"))
    assert pausing.endswith("  1/2 ranks held (job: 4)  (pausing: hot)"), pausing


@pytest.mark.parametrize("mode, code", [("curve", 0), ("failsafe", 1), ("uncontrolled", 1)])
def test_exit_code_of_a_fan_mode(mode: str, code: int) -> None:
    from gpuwatch.cli.status import exit_code

    document = {"gpus": [{"up": True, "over_limit": [], "fan_controller": {"mode": mode, "stalled": False}}]}
    assert exit_code(document) == code  # type: ignore[arg-type]


@pytest.mark.parametrize("interval_s, age_s, stuck", [
    (10.0, 30.0, False),  # 3 ticks of a 10 s daemon: fresh (stale after 5 x 10 s + 2 s)
    (0.2, 10.0, True),  # 50 ticks of a 0.2 s daemon: stuck (stale after 3 s)
    (1.0, 3.0, False),
    (1.0, 30.0, True),
])
def test_status_calls_the_daemon_stuck_by_its_own_interval(tmp_path: Path, interval_s: float, age_s: float,
                                                          stuck: bool) -> None:
    """The state file of a live daemon (this process's pid) taken age_s ago: status adds the "stuck"
    failure, and with it exit 1, only past 5 of that daemon's ticks + 2 s."""
    import time

    from gpuwatch.cli.show import daemon_document
    from gpuwatch.cli.status import exit_code
    from gpuwatch.config.file import parse_config
    from gpuwatch.publish.document import to_document
    from tests.support.published import example_state

    doc = to_document(example_state(tmp_path / "sys"), "daemon")
    assert doc["daemon"]
    doc["daemon"].update(pid=os.getpid(), interval_s=interval_s, failures=[])
    # One healthy GPU and no trainer: a document without a GPU exits 1 for that alone ("no GPU found").
    doc["gpus"] = [gpu for gpu in doc["gpus"] if exit_code({**doc, "gpus": [gpu], "trainers": []}) == 0][:1]
    doc["trainers"] = []
    assert doc["gpus"]
    doc["taken_unix"] = time.time() - age_s
    config = parse_config({"runtime_dir": str(tmp_path / "run")})
    config.state_file.parent.mkdir(parents=True)
    config.state_file.write_text(json.dumps(doc))
    found = daemon_document(config)
    assert found is not None
    failures = found[0]["daemon"]["failures"]
    assert [f.endswith("the control loop is stuck") for f in failures] == ([True] if stuck else [])
    assert exit_code(found[0]) == (1 if stuck else 0)
