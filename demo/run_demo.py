#!/usr/bin/env python3
"""`make run`: gpuwatch on a simulated GPU with a supervised demo trainer, and a live status view.

Prepares config/demo.toml for this checkout (absolute paths, this Python for the trainer, a free port
when 9840 is taken, and no [[trainer]] if this build has no supervisor yet), starts
`gpuwatch run -c <that config>` in the background with its log in the runtime directory, prints where
/metrics and `gpuwatch status` are, then redraws the status every second until Ctrl-C, which stops the
daemon (trainer first, then the fans go back to the firmware).

    .venv/bin/python demo/run_demo.py [--seconds N] [--plain] [more `gpuwatch run` arguments, e.g. --simulate 2]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
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

from gpuwatch.cli.status import render  # noqa: E402
from gpuwatch.config import Config, ConfigError, parse_config  # noqa: E402
from gpuwatch.publish.state import read_state_file  # noqa: E402


def prepare(source: Path, notes: list[str]) -> tuple[dict[str, Any], Config]:
    data = tomllib.loads(source.read_text())
    runtime = Path(data.get("runtime_dir", ".tmp/demo"))
    data["runtime_dir"] = str(runtime if runtime.is_absolute() else REPO / runtime)
    if "trainer" in data and "trainer" not in Config.model_fields:
        notes.append("this build has no training supervisor yet: running the fan loop without the demo trainer")
        del data["trainer"]
    launcher = _has_launcher()
    for trainer in data.get("trainer", []):
        if trainer.get("command", [""])[0] in ("python", "python3"):
            trainer["command"][0] = sys.executable
            if launcher and trainer["command"][1:2] == ["demo/train_demo.py"]:
                # With torch, the real path: the launcher's optimizer-step hook beats and pauses.
                trainer["command"][1:2] = ["-m", "gpuwatch.launch", "demo/train_demo.py", "--launched"]
        trainer.setdefault("cwd", str(REPO))
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


def banner(config: Config, config_path: Path, log_path: Path, notes: list[str]) -> str:
    url = f"http://{config.http.listen}:{config.http.port}"
    gpuwatch = REPO / ".venv/bin/gpuwatch"
    cmd = gpuwatch if gpuwatch.exists() else "gpuwatch"
    lines = [
        "gpuwatch demo: one simulated RX 5600 XT (no AMD GPU needed) in a hot case, a supervised trainer",
        f"  metrics      {url}/metrics   (also {url}/status, {url}/healthz)" if config.http.enabled else
        "  metrics      HTTP is off in this config",
        f"  status       {cmd} status --watch 1 -c {config_path}",
        f"  state file   {config.state_file}",
        f"  daemon log   {log_path}",
        f"  fake sysfs   {config.simulated_tree_dir}   (try: {cmd} sensors --sysfs-root {config.simulated_tree_dir})",
        "  Watch the fan curve raise the fan as the card heats; at the 100 °C junction limit the trainer",
        "  is paused, and resumed once the card has cooled. Ctrl-C stops everything.",
    ]
    lines += [f"  note: {note}" for note in notes]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="gpuwatch demo on a simulated GPU")
    parser.add_argument("--config", type=Path, default=REPO / "config/demo.toml")
    parser.add_argument("--seconds", type=float, default=0, help="stop after this long (0: until Ctrl-C)")
    parser.add_argument("--plain", action="store_true", help="no screen redraw (default when not a terminal)")
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
    head = banner(config, config_path, log_path, notes)
    print(head, flush=True)
    redraw = not args.plain and sys.stdout.isatty()
    with open(log_path, "w") as log:
        daemon = subprocess.Popen([sys.executable, "-m", "gpuwatch", "run", "-c", str(config_path), *extra],
                                  stdout=log, stderr=subprocess.STDOUT, cwd=REPO)
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(True))
    started = last_print = time.monotonic()
    try:
        while not stop and daemon.poll() is None:
            if args.seconds and time.monotonic() - started >= args.seconds:
                break
            view = _view(config, log_path)
            if redraw:
                print("\033[H\033[2J" + head + "\n" + view, end="", flush=True)
            elif time.monotonic() - last_print >= 5:
                print(view, flush=True)
                last_print = time.monotonic()
            time.sleep(1.0)
        if not redraw:
            print(_view(config, log_path), flush=True)
    except KeyboardInterrupt:
        pass
    finally:
        code = _stop(daemon)
    print(f"\ngpuwatch demo stopped. Daemon log: {log_path}")
    if code not in (0, -signal.SIGTERM):
        print(_tail(log_path, 15), file=sys.stderr)
        return 1
    return 0


def _view(config: Config, log_path: Path) -> str:
    doc = read_state_file(config.state_file)
    status = render(doc, color=sys.stdout.isatty()) if doc else "waiting for the daemon's first tick...\n"
    return status + "\n-- daemon log --\n" + _tail(log_path, 6) + "\n"


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
