"""What attaching adds to the start of a run (issue 33: target < 100 ms).

Three ways to start the same tiny command, interleaved round by round so the box's load hits them alike:

* ``exec``: ``gpuwatch train --no-attach -- CMD``, the wrapper replaces itself with the command (what
  `gpuwatch train` did before attached runs);
* ``no daemon``: ``gpuwatch train -- CMD`` with no daemon at ``--runtime-dir`` (the wrapper is the parent,
  says "not protected" and keeps trying);
* ``daemon``: ``gpuwatch train -- CMD`` with a daemon answering the attach at once (the stand-in of the
  tests, tests/support/attach_server.py, on a real unix socket; the real daemon's answer is a lookup of the
  peer's credentials and a dictionary insert).

CMD (``env python -c ...``, run as given) prints the wall clock when its interpreter starts: "to command"
is that minus the moment the benchmark started `gpuwatch train`; "whole" is until the wrapper exited.
Then the attach's own round trip (connect, Attach, Attached) from a client in this process.

    python benchmarks/attach_start.py [--rounds 15]

Exits 0 when the target is met (the median over the rounds of "daemon" minus "exec", to the command's
start, under 100 ms), 1 otherwise.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from gpuwatch.attach import Attach, decode_reply, encode  # noqa: E402
from tests.support.attach_server import AttachServer  # noqa: E402

CHILD = "import time; print(time.time(), flush=True)"
TARGET_S = 0.100


def start_once(options: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Seconds from starting `gpuwatch train` to the command's start, and to the wrapper's exit."""
    argv = [sys.executable, "-m", "gpuwatch.cli", "train", *options, "--", "env", sys.executable, "-c", CHILD]
    started = time.time()
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120)
    ended = time.time()
    if done.returncode != 0:
        raise SystemExit(f"{argv} failed ({done.returncode}): {done.stderr}")
    return float(done.stdout.split()[0]) - started, ended - started


def round_trip_s(path: Path) -> float:
    started = time.perf_counter()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.connect(str(path))
        sock.sendall(encode(Attach(pid=os.getpid(), argv=["python", "train.py"])))
        reply = b""
        while not reply.endswith(b"\n"):
            reply += sock.recv(4096)
    decode_reply(reply)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="gpuwatch-attach-") as tmp:
        base = Path(tmp)
        (base / "none").mkdir()
        (base / "daemon").mkdir()
        (base / "xdg").mkdir(mode=0o700)
        # Compiled once, as an installed package is (a PYTHONDONTWRITEBYTECODE shell would compile every module
        # on every start, and the parent's few extra modules with them); the cache outside the checkout.
        env = {k: v for k, v in os.environ.items() if not k.startswith("GPUWATCH_") and k != "PYTHONDONTWRITEBYTECODE"}
        env |= {"PYTHONPATH": str(REPO), "XDG_RUNTIME_DIR": str(base / "xdg"),
                "PYTHONPYCACHEPREFIX": str(base / "pycache")}
        variants = {"exec": ["--no-attach"], "no daemon": ["--runtime-dir", str(base / "none")],
                    "daemon": ["--runtime-dir", str(base / "daemon")]}
        times: dict[str, list[tuple[float, float]]] = {name: [] for name in variants}
        with AttachServer(base / "daemon" / "control.sock") as server:
            for options in variants.values():  # warm the page cache and the bytecode cache
                start_once(options, env)
            for _ in range(args.rounds):
                for name, options in variants.items():
                    times[name].append(start_once(options, env))
            trips = [round_trip_s(server.path) for _ in range(200)]
            attached = len(server.attached())
    print(f"gpuwatch train -- env python -c ... ({args.rounds} rounds, interleaved; load {os.getloadavg()[0]:.1f})")
    print(f"{'variant':<10} {'to command: median':>19} {'min':>9} {'whole: median':>14} {'min':>9}")
    for name, rows in times.items():
        to_command, whole = [r[0] for r in rows], [r[1] for r in rows]
        print(f"{name:<10} {statistics.median(to_command) * 1e3:>16.1f} ms {min(to_command) * 1e3:>6.1f} ms "
              f"{statistics.median(whole) * 1e3:>11.1f} ms {min(whole) * 1e3:>6.1f} ms")
    # Paired by round (the three ran back to back): the load a round met falls on all of them alike.
    added = {}
    for name, against in (("no daemon", "exec"), ("daemon", "exec"), ("daemon", "no daemon")):
        deltas = sorted(a[0] - b[0] for a, b in zip(times[name], times[against], strict=True))
        quartiles = statistics.quantiles(deltas, n=4)
        added[(name, against)] = statistics.median(deltas)
        print(f"{name} against {against}: {statistics.median(deltas) * 1e3:+.1f} ms to the command's start "
              f"(median of the rounds' differences; quartiles {quartiles[0] * 1e3:+.1f} to "
              f"{quartiles[2] * 1e3:+.1f} ms)")
    print(f"attach round trip (connect, Attach, Attached), 200 in this process: median "
          f"{statistics.median(trips) * 1e3:.2f} ms, max {max(trips) * 1e3:.2f} ms; "
          f"runs that attached during the rounds: {attached}")
    met = added[("daemon", "exec")] < TARGET_S
    print(f"target: attaching adds < {TARGET_S * 1e3:.0f} ms to the start (daemon against exec): "
          f"{'met' if met else 'NOT met'}")
    sys.exit(0 if met else 1)


if __name__ == "__main__":
    main()
