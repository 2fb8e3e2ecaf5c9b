"""Shared by health_latency.py and cli_latency.py: a command's start measured side by side with ``python -c pass``;
and the helpers of every benchmark that need no gpuwatch import (_common.py takes them from here): the scratch
directory, stopping a daemon, the machine in words.

Each round runs every command once, one after the other, so the machine's noise hits all alike; what a command
adds to Python's own start is the median of each round's difference, and its ratio the ratio of the medians (p50)
and of the 99th percentiles (p99). Stdlib only (and tests/support/paths.py): runnable from a plain checkout.

The commands run from a normal (non-editable) install of the checkout, as users run them (``install``): a wheel
built from a copy of it (``pip wheel --no-build-isolation``: this environment's setuptools, no network), in a venv
of its own (``venv --without-pip``), its dependencies seen through a ``.pth`` line naming this environment's
site-packages. Not the development venv's editable install: its import finder loads pathlib and importlib.util
into every start. Where pip cannot build one (``--checkout``), ``python -c 'from gpuwatch.cli import main; ...'``
with the checkout on PYTHONPATH, which is what the console script runs.
"""

from __future__ import annotations

import json
import os
import platform
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.support.paths import copy_source  # noqa: E402

# A daemon's state file with 8 GPUs (navi21 captures with their telemetry: ~28 KB), for --fake-runtime-dir: the
# health check's own work without a daemon (or gpuwatch's dependencies) on the machine.
STATE_8_GPUS = Path(__file__).resolve().parent / "state-8gpus.json"
FAKE_INTERVAL_S = 60.0  # fresh for 5 intervals (publish/state.STALE_AFTER_TICKS): the stamp is renewed per round


def install(src: Path, work: Path, name: str) -> list[str]:
    """A normal install of checkout ``src`` in a venv of its own; the argv prefix that runs its `gpuwatch`."""
    source, wheels, venv = work / f"{name}-src", work / f"{name}-wheel", work / f"{name}-venv"
    source.mkdir()
    copy_source(src, source)  # pip builds in the tree (build/, *.egg-info): never in a checkout in use
    python = venv / "bin" / "python"
    step([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(wheels),
          str(source)])
    step([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    step([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps", "--no-index",
          *map(str, wheels.glob("*.whl"))])
    own = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                         capture_output=True, text=True, check=True, timeout=60).stdout.strip()
    Path(own, "gpuwatch-deps.pth").write_text(sysconfig.get_path("purelib") + "\n")
    return [str(venv / "bin" / "gpuwatch")]


def from_checkout(src: Path) -> tuple[list[str], dict[str, str]]:
    """`gpuwatch` as the console script runs it, from the checkout itself (no install): argv prefix and env. The
    package byte-compiled first, as an install is (its __pycache__, which git ignores): a checkout's modules
    compiled on every start (PYTHONDONTWRITEBYTECODE, a read-only tree) would be measured otherwise."""
    step([sys.executable, "-m", "compileall", "-q", str(src / "gpuwatch")])
    return [sys.executable, "-c", "import sys; from gpuwatch.cli import main; sys.exit(main())"], \
        {"PYTHONPATH": str(src)}


def step(argv: list[str]) -> None:
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, timeout=600)


def pin(cores: int | None) -> str:
    """Pin this process, and so every command it starts, to the first ``cores`` CPUs it may use (what ``taskset
    -c`` does, without a taskset process in every measure); what it runs on, in words."""
    allowed = sorted(os.sched_getaffinity(0))
    if cores:
        os.sched_setaffinity(0, allowed[:cores])
    return f"CPUs {','.join(map(str, sorted(os.sched_getaffinity(0))))}"


def fake_state(runtime: Path, source: Path = STATE_8_GPUS) -> None:
    """A daemon's state file in ``runtime``, stamped now (wall clock and this boot's CLOCK_BOOTTIME), healthy."""
    doc = json.loads(source.read_text())
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip() or None
    except OSError:
        boot = None
    doc["taken_unix"] = time.time()
    doc["daemon"].update(pid=os.getpid(), interval_s=FAKE_INTERVAL_S, boot_id=boot,
                         taken_boottime_s=time.clock_gettime(time.CLOCK_BOOTTIME))
    runtime.mkdir(mode=0o755, exist_ok=True)
    tmp = runtime / ".state.tmp"
    tmp.write_text(json.dumps(doc, separators=(",", ":")))
    tmp.replace(runtime / "state.json")


# What a daemon answers `pause`, `resume` and `stop` with no run named and none of the caller's (exit 2).
FAKE_CONTROL_REPLY = b'{"ok": false, "message": "no trainer and no attached run of yours (name one: NAME or PID)"}\n'


def fake_control(runtime: Path) -> socket.socket:
    """A control socket in ``runtime`` answering every request as a daemon with nothing to act on: the commands'
    own work (connect, send, read the answer) without a daemon. Served by a thread of this process until the
    returned socket is closed."""
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(runtime / "control.sock"))
    server.listen(64)

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:  # closed: the run is over
                return
            with conn:
                data = b""
                while b"\n" not in data:
                    chunk = conn.recv(4096)
                    if not chunk:
                        break
                    data += chunk
                conn.sendall(FAKE_CONTROL_REPLY)

    threading.Thread(target=serve, name="fake-control", daemon=True).start()
    return server


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, float, int]:
    """Wall seconds, CPU seconds (user + system, of the command and what it waited for) and the exit code."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False, env=env)
    took = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return took, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, done.returncode


Samples = dict[str, list[float]]


def side_by_side(commands: dict[str, list[str]], env: dict[str, str], runs: int,
                 each_round: object = None) -> tuple[Samples, Samples, dict[str, set[int]]]:
    """``runs`` rounds of every command, in order (the first is the reference: ``python -c pass``), after one
    round that warms the page cache; ``each_round()`` before each (a fresh stamp)."""
    for argv in commands.values():
        timed(argv, env)
    seconds: dict[str, list[float]] = {name: [] for name in commands}
    cpu: dict[str, list[float]] = {name: [] for name in commands}
    codes: dict[str, set[int]] = {name: set() for name in commands}
    for _ in range(runs):
        if callable(each_round):
            each_round()
        for name, argv in commands.items():
            took, used, code = timed(argv, env)
            seconds[name].append(took)
            cpu[name].append(used)
            codes[name].add(code)
    return seconds, cpu, codes


def percentile(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    rank = (len(ordered) - 1) * pct / 100.0
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def table(seconds: dict[str, list[float]], cpu: dict[str, list[float]], codes: dict[str, set[int]],
          limit: float | None = None) -> bool:
    """Print one row per command against the first (``python -c pass``); whether every p99 ratio but a baseline's is
    within ``limit`` (None: no target). CPU is user + system time (getrusage of the children): on a machine loaded by
    others it varies far less than the wall time, which waits for a core."""
    names = list(seconds)
    base, base_cpu = seconds[names[0]], cpu[names[0]]
    print(f"{'command':34} {'p50 ms':>7} {'p99 ms':>7} {'max ms':>7} {'own p50':>8} {'p50 x':>6} {'p99 x':>6} "
          f"{'CPU p50 ms':>10} {'CPU x':>6}  exit")
    met = True
    for name in names:
        values = seconds[name]
        p99_ratio = percentile(values, 99) / percentile(base, 99)
        own = statistics.median(a - b for a, b in zip(values, base, strict=True)) * 1000
        ratios = "" if values is base else \
            f"{own:8.1f} {statistics.median(values) / statistics.median(base):6.2f} {p99_ratio:6.2f}"
        cpu_ratio = "" if values is base else f"{statistics.median(cpu[name]) / statistics.median(base_cpu):6.2f}"
        print(f"{name:34} {statistics.median(values) * 1000:7.1f} {percentile(values, 99) * 1000:7.1f} "
              f"{max(values) * 1000:7.1f} {ratios or ' ' * 22} {statistics.median(cpu[name]) * 1000:10.1f} "
              f"{cpu_ratio or ' ' * 6}  {'/'.join(map(str, sorted(codes[name])))}")
        if values is not base and limit is not None and p99_ratio > limit and not name.startswith("baseline"):
            met = False
    return met


def temp_dir(prefix: str) -> Path:
    """A scratch directory on tmpfs when there is one: real sysfs and /run (the state file's home under systemd)
    are in-memory filesystems, and an ext4 /tmp's journaled rename alone was a sixth of a tick.
    ``GPUWATCH_BENCH_TMP`` chooses another place."""
    base = os.environ.get("GPUWATCH_BENCH_TMP")
    if base is None and os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK):
        base = "/dev/shm"
    return Path(tempfile.mkdtemp(prefix=f"gpuwatch-bench-{prefix}-", dir=base))


def stop(proc: subprocess.Popen[bytes], timeout_s: float = 10.0) -> None:
    """A daemon (or any process a benchmark started) stopped: SIGTERM, SIGKILL after ``timeout_s``."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def finish(daemon: subprocess.Popen[bytes] | None, work: Path) -> None:
    """The end of a run, however it ends: its daemon stopped (when one was started), its scratch removed."""
    if daemon is not None:
        stop(daemon)
    shutil.rmtree(work, ignore_errors=True)


def machine(where: str | None = None) -> str:
    """The CPU, its cores (``where``: what this process may run on, ``pin``), Python and the load, in words."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    cores = f"{os.cpu_count()} cores" + (f" ({where})" if where else "")
    return f"{cpu}, {cores}, Python {platform.python_version()}, load avg {os.getloadavg()[0]:.2f}"
