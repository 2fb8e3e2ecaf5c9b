"""Shared helpers for the benchmark scripts: fake trees from real captures, stats, daemon processes.

Benchmarks are scripts, never tests: they print a table and ratios from one run. They may read the
captures in ``tests/fixtures/amdgpu`` (or ``--fixtures DIR``); the package itself never does.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from _startup import machine, stop, temp_dir  # noqa: E402, F401  # their home (stdlib only), for every benchmark

from gpuwatch.gpus.gpu_metrics_layouts import LAYOUTS, encode  # noqa: E402
from gpuwatch.sim.tree import FakeSysfsTree, load_capture  # noqa: E402

# A current discrete card with every hwmon file a training box reads (3 temps, fan, pwm, power caps).
DEFAULT_CAPTURE = "navi31-rx7900xtx-sapphire-nitro"


def fixtures_arg(parser: argparse.ArgumentParser) -> None:
    default = REPO / "tests/fixtures/amdgpu"
    parser.add_argument("--fixtures", type=Path, default=default, help=f"captures directory (default {default})")
    parser.add_argument("--capture", default=DEFAULT_CAPTURE, help="capture name used for every GPU")


def build_tree(root: Path, fixtures: Path, capture: str, gpus: int, telemetry: bool = False) -> list[str]:
    """A real-layout fake /sys with ``gpus`` copies of one capture; returns their hwmon dirs.

    ``telemetry``: each card also sits behind a Radeon's on-package PCIe switch below its own root
    port, every device on that path has AER files, and the card has a v1.3 gpu_metrics table: all an
    RDNA card on a recent kernel gives gpuwatch to read (docs/telemetry.md)."""
    cap = load_capture(fixtures / "cards" / f"{capture}.json")
    tree = FakeSysfsTree(root)
    hwmons = []
    for index in range(gpus):
        bus = 0x10 + 3 * index
        bridge = _radeon_switch(root, index, bus) if telemetry else "pci0000:00/0000:00:01.1"
        card = tree.add_capture(cap, card=f"card{index}", pci_slot=f"0000:{bus + 2:02x}:00.0", hwmon=f"hwmon{index}",
                                bridge=bridge)
        if telemetry:
            device = root / card.device_dir
            (device / "gpu_metrics").write_bytes(encode(LAYOUTS[(1, 3)], {
                "temperature_edge": 53, "temperature_hotspot": 61, "temperature_mem": 68, "average_socket_power": 68,
                "current_fan_speed": 1200, "indep_throttle_status": 1 << 36}))
            _aer(device)
        hwmons.append(card.hwmon_dir or "")
    return hwmons


def _radeon_switch(root: Path, index: int, bus: int) -> str:
    """Root port -> AMD upstream switch port -> AMD downstream switch port, with link and AER files."""
    path = f"pci0000:00/0000:00:{1 + index:02x}.1"
    ports = [path, f"{path}/0000:{bus:02x}:00.0", f"{path}/0000:{bus:02x}:00.0/0000:{bus + 1:02x}:00.0"]
    for depth, port in enumerate(ports):
        directory = root / "devices" / port
        directory.mkdir(parents=True, exist_ok=True)
        for name, value in (("vendor", "0x1022" if depth == 0 else "0x1002"), ("class", "0x060400"),
                            ("current_link_speed", "16.0 GT/s PCIe"), ("current_link_width", "16"),
                            ("max_link_speed", "16.0 GT/s PCIe"), ("max_link_width", "16")):
            (directory / name).write_text(value + "\n")
        _aer(directory)
    return ports[-1]


def _aer(directory: Path) -> None:
    for name, total in (("correctable", "TOTAL_ERR_COR"), ("nonfatal", "TOTAL_ERR_NONFATAL"),
                        ("fatal", "TOTAL_ERR_FATAL")):
        (directory / f"aer_dev_{name}").write_text("RxErr 0\nBadTLP 0\n" + f"{total} 0\n")


def cleanup(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


def percentile(values: Sequence[float], pct: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    rank = (len(ordered) - 1) * pct / 100.0
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_port(port: int, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"nothing listening on 127.0.0.1:{port} after {timeout_s}s")


def write_config(path: Path, sysfs_root: Path, runtime_dir: Path, extra: str = "", interval_s: float = 1.0) -> Path:
    path.write_text(
        f'sysfs_root = "{sysfs_root}"\nruntime_dir = "{runtime_dir}"\ninterval_s = {interval_s}\n'
        f'backend = "amdgpu"\nlog_level = "warning"\n{extra}'
    )
    return path


def start_daemon(config: Path, log_path: Path, env: dict[str, str] | None = None,
                 src: Path = REPO) -> subprocess.Popen[bytes]:
    """``gpuwatch run`` as its own process, exactly as systemd would start it; ``src`` runs another
    checkout's package (a baseline measured side by side in the same run)."""
    handle = open(log_path, "wb")
    return subprocess.Popen(
        [sys.executable, "-m", "gpuwatch.cli", "run", "-c", str(config)],
        cwd=src,
        stdout=handle,
        stderr=subprocess.STDOUT,
        env={**os.environ, **(env or {}), "PYTHONPATH": str(src)},
    )


def wait_state(path: Path, proc: subprocess.Popen[bytes], timeout_s: float = 30.0) -> dict:
    """The daemon's first published state file (it exists once the first tick is done)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"daemon exited with {proc.returncode}")
        try:
            return json.loads(path.read_text())
        except (FileNotFoundError, ValueError):
            time.sleep(0.05)
    raise TimeoutError(f"no state file at {path} after {timeout_s}s")


def node_exporter(sysfs_root: Path, port: int, log_path: Path,
                  web_config: Path | None = None, binary: str | None = None) -> subprocess.Popen[bytes]:
    """Debian's prometheus-node-exporter (or ``binary``) reading the same fake tree, hwmon and drm collectors
    only (``web_config``: its --web.config.file, TLS and basic auth)."""
    return subprocess.Popen(
        [
            binary or shutil.which("prometheus-node-exporter") or "/usr/bin/prometheus-node-exporter",
            f"--path.sysfs={sysfs_root}",
            "--collector.disable-defaults",
            "--collector.hwmon",
            "--collector.drm",
            f"--web.listen-address=127.0.0.1:{port}",
            *([f"--web.config.file={web_config}"] if web_config is not None else []),
        ],
        stdout=open(log_path, "wb"),
        stderr=subprocess.STDOUT,
    )


def start_prometheus(work: Path, targets: dict[str, int], interval_s: float,
                     scheme_config: str = "") -> tuple[subprocess.Popen[bytes], int]:
    """Debian's Prometheus on loopback scraping each job's ``127.0.0.1:port`` every ``interval_s``
    (``scheme_config``: YAML lines for every job, e.g. TLS and basic auth); returns it and its port
    once it listens. Its TSDB and log live in ``work``."""
    binary = shutil.which("prometheus")
    if binary is None:
        raise SystemExit("prometheus is not installed (Debian: apt-get install prometheus)")
    jobs = "".join(f"  - job_name: {job}\n{scheme_config}    static_configs:\n      - targets: ['127.0.0.1:{port}']\n"
                   for job, port in targets.items())
    config = work / "prometheus.yml"
    config.write_text(f"global:\n  scrape_interval: {interval_s:g}s\n  scrape_timeout: {interval_s:g}s\n"
                      f"scrape_configs:\n{jobs}")
    port = free_port()
    proc = subprocess.Popen([binary, f"--config.file={config}", f"--storage.tsdb.path={work / 'tsdb'}",
                             f"--web.listen-address=127.0.0.1:{port}"],
                            stdout=open(work / "prometheus.log", "wb"), stderr=subprocess.STDOUT)
    try:
        wait_port(port, timeout_s=60)
    except TimeoutError:
        stop(proc)
        raise
    return proc, port


def prometheus_query(port: int, expr: str) -> dict[str, float]:
    """An instant query of the Prometheus on ``port``: job -> value."""
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(url, timeout=30) as response:
        result = json.load(response)["data"]["result"]
    return {r["metric"]["job"]: float(r["value"][1]) for r in result}


def start_wrapper(work: Path, run_dir: Path, name: str, code: str, src: Path = REPO) -> subprocess.Popen[bytes]:
    """The real ``gpuwatch train --runtime-dir RUN --name NAME -- env python -c CODE``, attached to the
    daemon of ``run_dir``, in its own session and with its own ``XDG_RUNTIME_DIR`` (``work/xdg-NAME``,
    where the wrapper makes its run's directory); ``src``: the checkout whose wrapper runs (a baseline's
    daemon gets its own: what a wrapper sends is part of what a daemon costs)."""
    xdg = work / f"xdg-{name}"
    xdg.mkdir(mode=0o700)
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUWATCH_")}
    env |= {"XDG_RUNTIME_DIR": str(xdg), "PYTHONPATH": str(src)}
    return subprocess.Popen([sys.executable, "-m", "gpuwatch.cli", "train", "--runtime-dir", str(run_dir), "--name",
                             name, "--", "env", sys.executable, "-c", code], cwd=work, env=env,
                            stdout=(work / f"wrapper-{name}.log").open("wb"), stderr=subprocess.STDOUT,
                            start_new_session=True)
