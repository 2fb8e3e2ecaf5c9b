"""The `make run` demo: the demo trainer speaks the heartbeat/pause protocol, and run_demo starts,
shows the simulated GPU and stops everything it started."""

from __future__ import annotations

import fcntl
import os
import pty
import select
import signal
import socket
import struct
import subprocess
import sys
import termios
import time
import tomllib
from dataclasses import replace
from pathlib import Path
from typing import Any

import pyte
import pytest
import tomli_w

from gpuwatch.cli.gpu_block import gpu_block
from gpuwatch.cli.status import render
from gpuwatch.cli.text import painter
from gpuwatch.config.file import parse_config
from gpuwatch.daemon.loop import Daemon
from gpuwatch.heartbeat import HEARTBEAT_ENV, PAUSE_ENV, read_heartbeat
from gpuwatch.model import GpuResetState, TrainerPhase, TrainerState
from gpuwatch.publish.document import to_document
from gpuwatch.publish.state import read_state_file
from gpuwatch.publish.view import status_view
from tests.support.paths import REPO
from tests.support.waiting import wait_for


def test_demo_trainer_beats_and_holds_while_paused(tmp_path: Path) -> None:
    heartbeat, pause = tmp_path / "hb.json", tmp_path / "pause"
    env = os.environ | {HEARTBEAT_ENV: str(heartbeat), PAUSE_ENV: str(pause)}
    proc = subprocess.Popen([sys.executable, str(REPO / "demo/train_demo.py"), "--step-s", "0.01",
                             "--backend", "python"], env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert wait_for(lambda: (hb := read_heartbeat(heartbeat)) is not None and hb.steps_total >= 3)
        pause.touch()
        assert wait_for(lambda: (hb := read_heartbeat(heartbeat)) is not None and hb.paused)
        held = read_heartbeat(heartbeat).steps_total  # type: ignore[union-attr]
        time.sleep(0.3)
        assert read_heartbeat(heartbeat).steps_total == held  # type: ignore[union-attr]
        pause.unlink()
        assert wait_for(lambda: (hb := read_heartbeat(heartbeat)) is not None and hb.steps_total > held)
        assert read_heartbeat(heartbeat).pid == proc.pid  # type: ignore[union-attr]
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=10)
    assert proc.returncode == 0
    assert "paused by gpuwatch" in out and "resumed" in out


def _run_demo() -> Any:
    sys.path.insert(0, str(REPO / "demo"))
    try:
        import run_demo  # type: ignore[import-not-found]
    finally:
        sys.path.remove(str(REPO / "demo"))
    return run_demo


def _layout() -> Any:
    """demo/demo_screen.py, the screen's layout (run_demo imports it)."""
    _run_demo()
    return sys.modules["demo_screen"]


def test_demo_config_is_valid_once_prepared() -> None:
    run_demo = _run_demo()
    notes: list[str] = []
    data, config = run_demo.prepare(REPO / "config/demo.toml", notes)
    assert config.simulating and config.simulate.cooling_scale < 1
    assert Path(data["runtime_dir"]).is_absolute()
    for trainer in data.get("trainer", []):
        assert trainer["command"][0] == sys.executable
    assert parse_config(data) == config


def test_the_banner_counts_the_simulated_cards() -> None:
    run_demo = _run_demo()
    config = parse_config({"simulate": {"enabled": True}})
    for extra, cards, said in (([], 1, "one simulated RX 5600 XT "),
                               (["--simulate", "2"], 2, "2 simulated RX 5600 XT cards"),
                               (["--simulate"], 1, "one simulated")):
        assert run_demo.simulated_cards(config, extra) == cards
        assert said in run_demo.banner(config, Path("demo.toml"), Path("daemon.log"), [], cards).splitlines()[0]


@pytest.mark.parametrize("mode", ["govern", "off"])
def test_the_banner_tells_what_happens_at_the_limit_and_fits_80_columns(mode: str) -> None:
    """With the governor (the demo's config) the cap is lowered and the trainer keeps running; only with
    [power] mode = "off" is it paused at the limit."""
    run_demo = _run_demo()
    config = parse_config({"simulate": {"enabled": True}, "power": {"mode": mode}})
    text = run_demo.banner(config, Path(".tmp/demo/demo.toml"), Path(".tmp/demo/daemon.log"),
                           ["running as root: the demo trainer runs as root too"], 2)
    assert all(len(line) <= 80 for line in text.splitlines()), text
    prose = " ".join(line.strip() for line in text.splitlines())
    if mode == "govern":
        assert "governor lowers the cap" in prose and "instead of being paused" in prose
        assert "the trainer is paused" not in prose
    else:
        assert "the trainer is paused at the junction limit" in prose
    assert ":9840/metrics" in text and "simulate-reset -c .tmp/demo/demo.toml" in text


def test_a_fan_not_handed_back_names_the_restore_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run_demo = _run_demo()
    monkeypatch.chdir(REPO)
    log = tmp_path / "daemon.log"
    took = "2026-11-23 17:52:40,100 INFO gpuwatch.fan: GPU 0000:28:00.0: took the fan at 27 % from the firmware\n"
    log.write_text(took + "2026-11-23 17:52:52,518 ERROR gpuwatch.fan: GPU 0000:28:00.0: restore failed: EACCES\n")
    said = run_demo.handed_back(log, len(took), REPO / ".tmp/demo/demo.toml")
    assert said.splitlines()[0].startswith("the fan was not handed back: run `")
    assert "restore -c .tmp/demo/demo.toml`" in said and "fans-auto" not in said.splitlines()[0]
    assert "restore failed: EACCES" in said


def test_the_goodbye_says_the_cap_went_back_too(tmp_path: Path) -> None:
    """Issue 50 item 9: the last screen said the fan was handed back, but not that the cap went 129 -> 150 W."""
    run_demo = _run_demo()
    log = tmp_path / "daemon.log"
    took = "2026-11-23 17:52:40,100 INFO gpuwatch.fan: GPU 0000:28:00.0: took the fan at 27 % from the firmware\n"
    log.write_text(took + "2026-11-23 17:52:52,518 INFO gpuwatch.power: GPU 0000:28:00.0: power cap 129 W -> 150 W\n"
                   "2026-11-23 17:52:52,519 INFO gpuwatch: GPU 0000:28:00.0: fan handed back to the firmware "
                   "(pwm1_enable 2, automatic)\n")
    assert run_demo.handed_back(log, len(took), REPO / ".tmp/demo/demo.toml").splitlines() == [
        "the trainer was stopped first, then",
        "  GPU 0000:28:00.0: fan handed back to the firmware (pwm1_enable 2, automatic)",
        "  GPU 0000:28:00.0: power cap 129 W -> 150 W"]


def _status_of(tmp_path: Path, cards: int, reset: bool = False) -> Any:
    """A real daemon tick's status on ``cards`` simulated cards, a running trainer beside it, as the demo's
    screen gets it; ``reset``: each card just reset, its leftover still in D state."""
    layout = _layout()
    config = parse_config({"runtime_dir": str(tmp_path), "simulate": {"enabled": True, "gpus": cards},
                           "http": {"enabled": False}})
    daemon = Daemon(config)
    state = daemon.tick()
    daemon.shutdown()
    trainer = TrainerState(name="demo", phase=TrainerPhase.RUNNING, pid=4242, started_unix=state.snapshot.taken_unix,
                           steps_per_s=4.98, last_step_age_s=0.0, reason="resumed")
    resets = tuple(GpuResetState(gpu_id=gpu.gpu_id, resets_total=1, last_reset_unix=state.snapshot.taken_unix,
                                 last_source="devcoredump", last_summary="ring gfx_0.0.0 timed out; gfxhub page fault "
                                 "at 0x0000000000001000; VRAM lost; process python (pid 4242)",
                                 dump_path=str(tmp_path / "gpu-resets/20261126-204149-0000_28_00.0-devcd1.txt"),
                                 recovering=True, stuck_pids=(4195405,))
                   for gpu in state.snapshot.gpus) if reset else ()
    snapshot = replace(state.snapshot, resets=resets)
    doc = to_document(replace(state, snapshot=snapshot, trainers=(trainer,)), source="daemon")
    sizes = [len(gpu_block(gpu, painter(True))) for gpu in status_view(doc).gpus]
    return layout.split_status(render(doc, color=True), sizes)


@pytest.mark.parametrize(("cards", "reset"), [(1, False), (1, True), (2, False), (2, True)])
def test_the_screen_fits_80x24_and_the_log_gets_what_is_left(tmp_path: Path, cards: int, reset: bool,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    run_demo, layout = _run_demo(), _layout()
    monkeypatch.chdir(REPO)  # `make run` runs it from the checkout: paths below it are shown relative
    config = parse_config({"simulate": {"enabled": True, "gpus": cards}})
    status = _status_of(tmp_path, cards, reset)
    top = run_demo.screen_header(config, REPO / ".tmp/demo/demo.toml", cards)
    assert all(layout.width(row) <= 80 for row in top) and ":9840/metrics" in top[1]
    log = [f"18:04:{n:02d} trainer demo: paused -> running: resumed, a line long enough to be cut in eighty columns"
           for n in range(30)]
    rows = layout.screen(top, status, log, 80, 24)
    assert len(rows) <= 24 and all(layout.width(row) <= 80 for row in rows)
    assert rows[:len(top)] == top
    wide = max(layout.width(line) for block in status.gpus for line in [*block, *status.rest])
    assert wide > 80  # the case of the issue: status lines wider than the terminal
    shown = rows[rows.index(layout.LOG_TITLE) + 1:] if layout.LOG_TITLE in rows else []
    assert shown == [layout.cut(line, 80) for line in log[len(log) - len(shown):]]  # the newest, one row each
    assert len(rows) == 24 or not shown  # the log takes every row left
    text = layout.ANSI.sub("", "\n".join(rows))
    assert "trainer demo: running" in text
    if cards == 1:  # it all fits, wrapped at spaces: nothing left out
        assert "left out" not in text and "crit" in text and len(shown) >= (0 if reset else 3)
        assert ("recovering: waiting for pid" in text) == reset and "reboot" not in text
    else:  # two cards do not fit wrapped: one row a line, cut on purpose ("…"); after a reset not even
        # that, so the least telling lines are left out, and a row says so
        assert "…" in text and text.count("  temp ") == 2 and text.count("recovering: waiting") == (2 if reset else 0)
        assert ("status lines left out to fit the terminal; `gpuwatch status` shows all" in text) == reset


def test_lines_are_wrapped_at_spaces_or_cut_on_purpose() -> None:
    layout = _layout()
    line = "  limit  pause at edge 90°C  junction 100°C  mem 100°C   crit 100/110/105/-/-/-°C"
    assert layout.wrap(line, 80) == ["  limit  pause at edge 90°C  junction 100°C  mem 100°C   crit",
                                       "      100/110/105/-/-/-°C"]
    assert layout.wrap("short", 80) == ["short"]
    assert layout.cut("abcdef", 4) == "abc…" and layout.cut("abc", 4) == "abc"
    painted = "\033[31mRECOVERING: held by pid 4194404\033[0m"
    assert layout.cut(painted, 11) == "\033[31mRECOVERING\033[0m…\033[0m"
    assert [layout.width(row) for row in layout.wrap("x" * 100 + " y", 80)] == [80, 5]


def demo_config(tmp_path: Path, time_scale: float = 30.0) -> Path:
    """config/demo.toml as it ships, with its runtime directory and checkpoints under ``tmp_path``."""
    text = (REPO / "config/demo.toml").read_text().replace(".tmp/demo/checkpoints", str(tmp_path / "checkpoints"))
    demo = tomllib.loads(text)
    demo["runtime_dir"] = str(tmp_path / "run")
    demo["http"]["port"] = 0
    demo["simulate"]["time_scale"] = time_scale
    config = tmp_path / "demo.toml"
    config.write_text(tomli_w.dumps(demo))
    return config


def test_run_demo_shows_the_simulated_gpu_and_ctrl_c_stops_it_all(tmp_path: Path) -> None:
    config = demo_config(tmp_path)
    # Its own session, like a terminal's foreground job: Ctrl-C is a SIGINT to the whole group.
    proc = subprocess.Popen([sys.executable, str(REPO / "demo/run_demo.py"), "--config", str(config), "--plain"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        wait_for((tmp_path / "run/state.json").exists, "the daemon's first tick", 60)
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=90)
    assert proc.returncode == 0, err
    assert "/metrics" in out and "status --watch 1" in out and "one simulated RX 5600 XT" in out
    assert out.splitlines()[-2:] == [
        "  GPU 0000:28:00.0: fan handed back to the firmware (pwm1_enable 2, automatic)",
        f"Daemon log: {tmp_path / 'run/daemon.log'}",
    ]
    assert "gpuwatch demo stopped: the trainer was stopped first, then" in out
    log = (tmp_path / "run/daemon.log").read_text()
    assert "simulating 1 RX 5600 XT" in log and "gpuwatch stopped" in log
    assert "took the fan at " in log and "{'" not in log  # values, not Python dicts
    signals = [line.split(": ", 1)[1] for line in log.splitlines() if "received SIG" in line]
    assert signals == ["received SIGTERM, stopping"]
    assert not (tmp_path / "run/state.json").exists()  # the daemon cleaned up on SIGTERM


def _trainer(tmp_path: Path) -> dict[str, Any]:
    doc = read_state_file(tmp_path / "run/state.json")
    return dict(doc["trainers"][0]) if doc and doc["trainers"] else {}


def _reset(tmp_path: Path) -> dict[str, Any]:
    doc = read_state_file(tmp_path / "run/state.json")
    return dict(doc["gpus"][0]["reset"] or {}) if doc and doc["gpus"] else {}


@pytest.mark.timeout(600)
def test_the_demos_gpu_reset_is_recovered_and_the_trainer_resumes_from_its_checkpoint(tmp_path: Path) -> None:
    """What the banner's `simulate-reset` line promises, on the demo's own config (a compositor on the card
    too): the card comes back, its processes leave D state, and the trainer restarts from a checkpoint."""
    config = demo_config(tmp_path, time_scale=10.0)
    text = config.read_text().replace('"--checkpoint-dir"', '"--checkpoint-every", "5", "--checkpoint-dir"')
    config.write_text(text)
    proc = subprocess.Popen([sys.executable, str(REPO / "demo/run_demo.py"), "--config", str(config), "--plain"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        wait_for(lambda: _trainer(tmp_path).get("phase") == "running" and list(
            (tmp_path / "checkpoints").glob("step-*.json")), "the demo trainer's first checkpoint", 180)
        reset = subprocess.run([sys.executable, "-m", "gpuwatch", "simulate-reset", "-c",
                                str(tmp_path / "run/demo.toml")], capture_output=True, text=True, timeout=60, cwd=REPO)
        assert reset.returncode == 0, reset.stderr
        wait_for(lambda: _reset(tmp_path).get("resets_total") == 1, "the reset to be seen", 60)
        wait_for(lambda: dict(_trainer(tmp_path).get("restarts_by_reason") or {}).get("gpu_reset") == 1
                 and _trainer(tmp_path).get("phase") == "running", "the trainer to restart after the reset", 180,
                 detail=lambda: f"{_trainer(tmp_path)}\n{_reset(tmp_path)}")
        assert _reset(tmp_path)["recovering"] is False and _reset(tmp_path)["stuck_pids"] == []
        log_path = _trainer(tmp_path)["log_path"]
        wait_for(lambda: "train_demo: resumed from" in Path(log_path).read_text(), "the resume from a checkpoint", 120)
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=90)
    assert proc.returncode == 0, err
    daemon_log = (tmp_path / "run/daemon.log").read_text()
    assert "answers again" in daemon_log and "may need a reboot" not in daemon_log


CLEAR = b"\033[H\033[2J"


class DemoTerminal:
    """run_demo in a pseudo-terminal of ``columns`` x ``lines``, its output fed to pyte terminal emulators:
    one of that size, and one as tall but far wider. A row the demo writes wider than the terminal wraps in
    the first (mid-word, where the last column falls) and shifts every row below it; in the second it
    does not: the two screens differ. A frame taller than the terminal scrolls the fixed header away."""

    def __init__(self, argv: list[str], cwd: Path, columns: int = 80, lines: int = 24) -> None:
        self.columns, self.lines = columns, lines
        master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", lines, columns, 0, 0))
        env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")} | {"TERM": "xterm-256color"}
        self.proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, cwd=cwd, env=env,
                                     start_new_session=True)
        os.close(slave)
        self.master = master
        self.raw = b""
        self.fed = 0  # bytes of raw fed to the screens (whole frames only)
        self.frames = 0
        self.screen = pyte.Screen(columns, lines)
        self.wide = pyte.Screen(columns * 5, lines)
        self.streams = [pyte.ByteStream(self.screen), pyte.ByteStream(self.wide)]

    def read(self, timeout_s: float = 0.2) -> bool:
        """Read what the demo wrote; False once it closed the terminal."""
        ready, _, _ = select.select([self.master], [], [], timeout_s)
        if not ready:
            return True
        try:
            data = os.read(self.master, 65536)
        except OSError:  # EIO: the other side is closed
            return False
        self.raw += data
        return bool(data)

    def check_frames(self) -> None:
        """Feed every whole frame written since the last call and check each, as a person would see it."""
        while (end := self.raw.find(CLEAR, self.fed + 1)) != -1:
            self.feed(self.raw[self.fed:end])
            self.fed = end
            self.frames += 1
            self.check_header()

    def feed(self, data: bytes) -> None:
        for stream in self.streams:
            stream.feed(data)
        narrow = [row.rstrip() for row in self.screen.display]
        wide = [row.rstrip() for row in self.wide.display]
        assert all(len(row) <= self.columns for row in wide), "\n".join(r for r in wide if len(r) > self.columns)
        assert narrow == wide, "a row wrapped:\n" + "\n".join(narrow)

    def check_header(self) -> None:
        shown = self.text()
        if self.frames > 1:  # a redraw: the fixed header on top, where /metrics is and the commands
            assert shown.startswith("gpuwatch demo: "), shown
            assert "/metrics" in shown.splitlines()[1] and "simulate-reset -c " in shown, shown

    def text(self) -> str:
        return "\n".join(row.rstrip() for row in self.screen.display)

    def wait_for(self, what: str, timeout_s: float) -> str:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            assert self.read(), f"the demo ended early:\n{self.raw.decode(errors='replace')[-3000:]}"
            self.check_frames()
            if self.frames > 1 and what in self.text():
                return self.text()
        raise AssertionError(f"no frame showed {what!r} in {timeout_s:g}s; the last:\n{self.text()}")

    def stop(self) -> str:
        """Ctrl-C; the rest of what it writes (the goodbye) is checked too, and returned."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGINT)
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and self.read():
            pass
        self.proc.wait(timeout=30)
        os.close(self.master)
        self.check_frames()
        self.feed(self.raw[self.fed:])
        return self.raw[self.fed:].decode(errors="replace")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.timeout(600)
@pytest.mark.parametrize("cards", [1, 2])
def test_make_run_on_an_80x24_terminal_wraps_nothing_and_keeps_its_urls_on_top(tmp_path: Path, cards: int) -> None:
    """The demo's real output, banner and redraws, on an 80x24 terminal (pyte): no row wraps mid-word or
    runs past the bottom, and /metrics and the commands stay visible above the redrawn status; with one
    card through a GPU reset too (the longest lines), with two (`--simulate 2`) as they run."""
    config = demo_config(tmp_path, time_scale=10.0)
    config.write_text(config.read_text().replace("port = 0", f"port = {_free_port()}"))
    work = tmp_path / "cwd"  # where `make run` would be started: the runtime directory lies below it
    work.mkdir()
    text = config.read_text().replace(str(tmp_path / "run"), str(work / ".tmp/demo"))
    config.write_text(text)
    argv = [sys.executable, str(REPO / "demo/run_demo.py"), "--config", str(config), "--simulate", str(cards),
            "--banner-s", "600"]
    term = DemoTerminal(argv, work)
    try:
        # Issue 50 item 9: the banner stays readable while the daemon runs (it was cleared as it was printed),
        # until its time is up or Enter is pressed.
        wait_for(lambda: term.read() and (work / ".tmp/demo/state.json").exists(), "the daemon's first tick", 180)
        wait_for(lambda: term.read() and b"press Enter" in term.raw, "the banner's last line", 60)
        assert CLEAR not in term.raw
        seen = pyte.Screen(term.columns, term.lines)
        pyte.ByteStream(seen).feed(term.raw)
        shown = "\n".join(row.rstrip() for row in seen.display)
        assert "status --watch 1" in shown and "state file" in shown and "/metrics" in shown, shown
        os.write(term.master, b"\n")
        term.wait_for("trainer demo: running", 180)
        banner = term.raw[:term.raw.find(CLEAR)].decode()
        assert "/metrics" in banner and "governor lowers the cap" in banner
        if cards == 1:
            subprocess.run([sys.executable, "-m", "gpuwatch", "simulate-reset", "-c",
                            str(work / ".tmp/demo/demo.toml")], check=True, capture_output=True, timeout=60, cwd=REPO)
            shown = term.wait_for("reset  1 since start", 120)
        else:
            shown = term.wait_for("[0000:2b:00.0]", 60)
        assert "http://127.0.0.1:" in shown.splitlines()[1]
        while term.frames < 3:  # redraws, each checked
            term.wait_for("trainer demo", 60)
    finally:
        goodbye = term.stop()
    assert term.proc.returncode == 0, term.raw.decode(errors="replace")[-3000:]
    assert term.frames >= 3
    assert "gpuwatch demo stopped: the trainer was stopped first, then" in goodbye


def test_a_failed_start_says_what_happened_and_sends_nobody_to_a_command(tmp_path: Path) -> None:
    """The daemon refuses its arguments: nothing was taken, so nothing to restore, and its error is shown."""
    config = demo_config(tmp_path)
    done = subprocess.run([sys.executable, str(REPO / "demo/run_demo.py"), "--config", str(config), "--plain",
                           "--no-such-option"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert "gpuwatch demo stopped: the daemon stopped before it took the fan: nothing to hand back" in done.stdout
    assert "fans-auto" not in done.stdout + done.stderr and " restore " not in done.stdout
    assert done.stderr.startswith("The daemon exited with code 2; the end of its log:")
    assert "--no-such-option" in done.stderr
