#!/usr/bin/env python3
"""`make run`: gpuwatch on a simulated GPU with a supervised demo trainer, and a live status view.

Prepares config/demo.toml for this checkout (absolute paths, this Python for the trainer, a free port
when 9840 is taken, and no [[trainer]] if this build has no supervisor yet), starts
`gpuwatch run -c <that config>` in the background with its log in the runtime directory, prints where
/metrics and `gpuwatch status` are, then redraws the status every second until Ctrl-C, which stops the
daemon (trainer first, then the fans go back to the firmware) and says so.

The redrawn screen fits the terminal (80x24 too; demo/demo_screen.py lays it out): a fixed header with
/metrics and the commands to try, the status (lines too wide wrapped at a space or cut on purpose, the
least telling ones left out when two cards do not fit), and the newest daemon log lines in the rows left.

    .venv/bin/python demo/run_demo.py [--seconds N] [--plain] [more `gpuwatch run` arguments, e.g. --simulate 2]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import time
import tomllib
from pathlib import Path
from typing import Any

import tomli_w

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "demo"))  # demo_screen, also when run_demo is imported by the tests

from demo_screen import Status, screen, split_status, wrap  # noqa: E402

from gpuwatch.cli.gpu_block import gpu_block  # noqa: E402
from gpuwatch.cli.status import render  # noqa: E402
from gpuwatch.cli.text import painter  # noqa: E402
from gpuwatch.config.base import ConfigError  # noqa: E402
from gpuwatch.config.file import Config, parse_config  # noqa: E402
from gpuwatch.publish.state import read_state_file  # noqa: E402
from gpuwatch.publish.view import status_view  # noqa: E402


def prepare(source: Path, notes: list[str]) -> tuple[dict[str, Any], Config]:
    data = tomllib.loads(source.read_text())
    runtime = Path(data.get("runtime_dir", ".tmp/demo"))
    data["runtime_dir"] = str(runtime if runtime.is_absolute() else REPO / runtime)
    if "trainer" in data and "trainer" not in Config.model_fields:
        notes.append("this build has no training supervisor yet: running the fan loop without the demo trainer")
        del data["trainer"]
    launcher = _has_launcher()
    for trainer in data.get("trainer", []):
        for key in ("command", "restart_command"):
            argv = trainer.get(key) or [""]
            if argv[0] in ("python", "python3"):
                argv[0] = sys.executable
                if launcher and argv[1:2] == ["demo/train_demo.py"]:
                    # With torch, the real path: the launcher's optimizer-step hook beats and pauses.
                    argv[1:2] = ["-m", "gpuwatch.launch", "demo/train_demo.py", "--launched"]
        trainer.setdefault("cwd", str(REPO))
        if "demo/train_demo.py" in trainer.get("command", []):
            # Its steps slow down with the simulated card's clock: a power cap shows in steps/s.
            tree = Path(data.get("simulate", {}).get("tree_dir") or Path(data["runtime_dir"]) / "simulated-sysfs")
            trainer.setdefault("env", {})["GPUWATCH_DEMO_CLOCK_FILE"] = str(tree / "class/hwmon/hwmon1/freq1_input")
        if os.geteuid() == 0 and "user" not in trainer:
            # The supervisor runs a trainer as root only when told so (docs/supervisor.md).
            trainer["user"] = "root"
            notes.append("running as root: the demo trainer runs as root too")
    http = data.get("http", {})
    if http.get("enabled", True) and not _port_free(http.get("listen", "127.0.0.1"), int(http.get("port", 9840))):
        taken = http.get("port", 9840)
        http["port"] = _free_port(http.get("listen", "127.0.0.1"))
        notes.append(f"port {taken} is taken: serving on {http['port']} instead")
    return data, parse_config(data, str(source))


def _has_launcher() -> bool:
    """The torch launcher is usable: it is in this build and PyTorch is installed (never imported here)."""
    try:
        return importlib.util.find_spec("torch") is not None and importlib.util.find_spec("gpuwatch.launch") is not None
    except (ImportError, ValueError):
        return False


def simulated_cards(config: Config, extra: list[str]) -> int:
    """How many cards the daemon will simulate: ``--simulate N`` among the extra arguments, else the config's."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--simulate", nargs="?", type=int, const=0)
    known, _ = parser.parse_known_args(extra)
    return known.simulate or config.simulate.gpus


# How long the banner stays before the live screen is drawn over it (Enter: at once). It used to be cleared in
# the instant it was printed, so nobody could read it (issue 50 item 9).
BANNER_S = 20.0


def banner(config: Config, config_path: Path, log_path: Path, notes: list[str], cards: int, columns: int = 80,
           hold_s: float | None = None) -> str:
    """What is printed once at the start: every line fits ``columns``; ``hold_s``: the live screen replaces it
    after this long (said in its last line)."""
    url = f"http://{config.http.listen}:{config.http.port}"
    cmd, conf = _gpuwatch(), _short(config_path)
    what = "one simulated RX 5600 XT" if cards == 1 else f"{cards} simulated RX 5600 XT cards"
    lines = [
        f"gpuwatch demo: {what} (no AMD GPU needed) and a trainer",
        f"  metrics     {url}/metrics   (also /status, /healthz)" if config.http.enabled else
        "  metrics     HTTP is off in this config",
        f"  status      {cmd} status --watch 1 -c {conf}",
        f"  processes   {cmd} status --processes -c {conf}",
        f"  sensors     {cmd} sensors -c {conf}",
        f"  GPU reset   {cmd} simulate-reset -c {conf}",
        f"  state file  {_short(config.state_file)}",
        f"  daemon log  {_short(log_path)}",
    ]
    prose = [f"The card is in a hot case. {_story(config)} After a GPU reset (the command above) the trainer "
             "restarts from its checkpoint once the card answers again. Ctrl-C stops it all: the trainer first, "
             "then the fan goes back to the firmware."]
    prose += [f"note: {note}" for note in notes]
    if hold_s is not None:
        prose.append(f"The live screen follows in {hold_s:g} s: press Enter to see it now.")
    rows = [row for line in lines for row in wrap(line, columns, indent=12)]
    rows += [row for paragraph in prose for row in wrap("  " + paragraph, columns, indent=0)]
    return "\n".join(rows) + "\n"


def _story(config: Config) -> str:
    """What happens as the card heats, with this config's power governor."""
    if config.power.mode == "govern":
        return ("The fan curve takes the fan from the firmware and lifts it as the card heats; at 100 % the power "
                "governor lowers the cap to hold the junction under its 100 °C limit, so the trainer runs a few "
                "percent slower instead of being paused (only if even the lowest cap cannot hold it is it paused).")
    return ("The fan curve takes the fan from the firmware and lifts it as the card heats; with the power governor "
            f"off ([power] mode = \"{config.power.mode}\") the trainer is paused at the junction limit (100 °C) "
            "and resumed once the card has cooled.")


def screen_header(config: Config, config_path: Path, cards: int) -> list[str]:
    """The lines that stay on top of the redrawn screen: where /metrics is and the commands to try (80
    columns from the checkout)."""
    cmd, conf = _gpuwatch(), _short(config_path)
    what = "1 simulated RX 5600 XT" if cards == 1 else f"{cards} simulated RX 5600 XT"
    url = f"http://{config.http.listen}:{config.http.port}/metrics" if config.http.enabled else "HTTP is off"
    return [f"gpuwatch demo: {what}, a supervised trainer. Ctrl-C stops it.",
            f"  metrics  {url}   (also /status)",
            f"  status   {cmd} status --processes -c {conf}",
            f"  reset    {cmd} simulate-reset -c {conf}"]


def _gpuwatch() -> str:
    """The command to type: this checkout's venv's gpuwatch (`make run` made it), else the one on PATH."""
    venv = REPO / ".venv/bin/gpuwatch"
    return _short(venv) if venv.exists() else "gpuwatch"


def _short(path: Path) -> str:
    """``path`` relative to where the demo was started, when it lies below it (shorter lines)."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="gpuwatch demo on a simulated GPU")
    parser.add_argument("--config", type=Path, default=REPO / "config/demo.toml")
    parser.add_argument("--seconds", type=float, default=0, help="stop after this long (0: until Ctrl-C)")
    parser.add_argument("--plain", action="store_true", help="no screen redraw (default when not a terminal)")
    parser.add_argument("--banner-s", type=float, default=BANNER_S,
                        help="seconds the banner stays before the live screen (Enter: at once; default %(default)g)")
    args, extra = parser.parse_known_args(argv)  # the rest goes to `gpuwatch run`, e.g. --simulate 2
    notes: list[str] = []
    try:
        data, config = prepare(args.config, notes)
    except (ConfigError, OSError, tomllib.TOMLDecodeError) as exc:
        print(f"run_demo: {exc}", file=sys.stderr)
        return 2
    runtime = config.resolved_runtime_dir
    runtime.mkdir(parents=True, exist_ok=True)
    config_path, log_path = runtime / "demo.toml", runtime / "daemon.log"
    config_path.write_text("# generated by demo/run_demo.py from config/demo.toml\n" + tomli_w.dumps(data))
    cards = simulated_cards(config, extra)
    redraw = not args.plain and sys.stdout.isatty()
    columns = shutil.get_terminal_size().columns if sys.stdout.isatty() else 80
    print(banner(config, config_path, log_path, notes, cards, columns, args.banner_s if redraw else None), flush=True)
    top = screen_header(config, config_path, cards)
    with open(log_path, "w") as log:
        # Its own session: a Ctrl-C in this terminal reaches only the demo, which stops the daemon with
        # one SIGTERM (the daemon would otherwise get the SIGINT and the SIGTERM).
        daemon = subprocess.Popen([sys.executable, "-m", "gpuwatch", "run", "-c", str(config_path), *extra],
                                  stdout=log, stderr=subprocess.STDOUT, cwd=REPO, start_new_session=True)
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(True))
    started = last_print = time.monotonic()
    try:
        if redraw:
            _hold_banner(args.banner_s, stop, daemon)
        while not stop and daemon.poll() is None:
            if args.seconds and time.monotonic() - started >= args.seconds:
                break
            if redraw:
                size = shutil.get_terminal_size()
                rows = screen(top, status_parts(config), _log_lines(log_path), size.columns, size.lines)
                print("\033[H\033[2J" + "\n".join(rows), end="", flush=True)
            elif time.monotonic() - last_print >= 5:
                print(_status(config) + "\n".join(_log_lines(log_path)[-6:]) + "\n", flush=True)
                last_print = time.monotonic()
            time.sleep(1.0)
        if not redraw:
            print(_status(config) + "\n".join(_log_lines(log_path)[-6:]) + "\n", flush=True)
    except KeyboardInterrupt:
        pass
    finally:
        stopping_at = _log_size(log_path)
        code = _stop(daemon)
    print("\n\ngpuwatch demo stopped: " + handed_back(log_path, stopping_at, config_path))
    print(f"Daemon log: {_short(log_path)}")
    if code not in (0, -signal.SIGTERM):
        print(f"The daemon exited with code {code}; the end of its log:\n{_tail(log_path, 15)}", file=sys.stderr)
        return 1
    return 0


def _hold_banner(seconds: float, stop: list[bool], daemon: subprocess.Popen[bytes]) -> None:
    """Leave the banner to be read: ``seconds``, or until Enter (a line on stdin), a stop or the daemon's end."""
    deadline = time.monotonic() + seconds
    while not stop and daemon.poll() is None and (left := deadline - time.monotonic()) > 0:
        try:
            ready, _, _ = select.select([sys.stdin], [], [], min(left, 0.5))
        except (OSError, ValueError):  # no stdin to wait on: wait out the time
            time.sleep(min(left, 0.5))
            continue
        if ready:
            sys.stdin.readline()  # the Enter (or an end of input: nobody to wait for)
            return


def _status(config: Config) -> str:
    """The plain status (no colours: --plain is for logs and pipes)."""
    doc = read_state_file(config.state_file)
    return render(doc, logs=_logs(config)) if doc else "waiting for the daemon's first tick...\n"


def status_parts(config: Config) -> Status:
    """The status, as the redrawn screen lays it out (demo_screen.py), coloured on a terminal."""
    doc = read_state_file(config.state_file)
    if not doc:
        return Status(head=["waiting for the daemon's first tick..."])
    color = sys.stdout.isatty()
    sizes = [len(gpu_block(gpu, painter(color))) for gpu in status_view(doc).gpus]
    return split_status(render(doc, color=color, logs=_logs(config)), sizes)


def _logs(config: Config) -> str:
    """The status's log hint as it works from this checkout: the demo's config finds its trainer."""
    return f"{_gpuwatch()} logs -c {_short(config.resolved_runtime_dir / 'demo.toml')}"


# "2026-11-23 17:52:52,518 INFO gpuwatch.fan: GPU 0000:28:00.0: ..." -> "17:52:52 GPU 0000:28:00.0: ..."
_LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\d (\d\d:\d\d:\d\d),\d+ (\w+) [\w.-]+: (.*)$")


def _log_lines(path: Path, last: int = 40) -> list[str]:
    """The newest daemon log lines, shortened for the screen: time of day, level when it is not INFO."""
    lines = []
    for line in _tail(path, last).splitlines():
        match = _LOG_LINE.match(line)
        if match:
            stamp, level, message = match.groups()
            line = f"{stamp} {message}" if level == "INFO" else f"{stamp} {level} {message}"
        lines.append(line)
    return lines


_CAP_BACK = re.compile(r"power cap (back to its original|[\d.]+ W -> [\d.]+ W)")


def handed_back(log_path: Path, since: int, config_path: Path) -> str:
    """What the daemon's stop did to the fans and power caps, from what it logged after ``since`` (bytes into
    its log)."""
    try:
        with open(log_path, "rb") as log:
            took = any("took the fan" in line for line in log.read(since).decode(errors="replace").splitlines())
            said = log.read().decode(errors="replace").splitlines()
    except OSError:
        took, said = False, []
    messages = [m.group(3) for line in said if (m := _LOG_LINE.match(line))]
    fans = [text for text in messages if "fan handed back" in text]
    if fans:  # and the caps the governor lowered, put back (power/controller.py's lines)
        caps = [text for text in messages if _CAP_BACK.search(text)]
        return "the trainer was stopped first, then\n" + "\n".join(f"  {line}" for line in fans + caps)
    if not took and not any("took the fan" in line for line in said):
        # A start that failed (a bad argument, a config the daemon refuses...): it never wrote a fan.
        return "the daemon stopped before it took the fan: nothing to hand back"
    problems = [line for line in said if "restore" in line or "fans-auto" in line]
    return "\n".join([f"the fan was not handed back: run `{_gpuwatch()} restore -c {_short(config_path)}`",
                      *problems])


def _log_size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _stop(daemon: subprocess.Popen[bytes]) -> int | None:
    if daemon.poll() is None:
        daemon.send_signal(signal.SIGTERM)
        try:
            daemon.wait(timeout=60)
        except subprocess.TimeoutExpired:
            daemon.kill()
            daemon.wait()
    return daemon.returncode


def _tail(path: Path, lines: int) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def _port_free(host: str, port: int) -> bool:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def _free_port(host: str) -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
