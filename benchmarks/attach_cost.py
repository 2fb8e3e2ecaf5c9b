"""What attaching costs and how fast an attached run is paused, next to a configured trainer, in one run.

One daemon (`gpuwatch run`, a fake tree from a real capture) supervises a configured trainer (a real
child process, ``cooperative_pause = "always"``: the pause is its pause file), an attached run (a
real attach client over the control socket, tests/support/attach_client.py, its run a ``sleep`` child)
and a second attached run through the real wrapper (`gpuwatch train --runtime-dir RUN -- env python -c
LOOP`: the real pair, its pause the pause file the wrapper makes in the run's directory).

* attach: from ``connect()`` to the ``Attached`` reply, for ``--attaches`` runs attached one after
  another (each detached again); the issue's target is < 100 ms added to a run's start.
* pause latency: the junction file is set above the pause limit at t0 (a random phase of the tick);
  the configured trainer's latency ends when its pause file exists, the attached run's when its client
  has received the ``pause`` event, the wrapped run's when its wrapper's pause file exists. All three are
  measured in the same trial (the same tick decides them); then the card cools and all are resumed before
  the next trial. The wrapper's own hop is the paired difference, wrapper against the configured
  trainer's file, per trial. Target: the attached runs' p50 within one tick of the trainer's.

    .venv/bin/python benchmarks/attach_cost.py [--trials 10] [--attaches 50] [--interval-s 1]
"""

from __future__ import annotations

import argparse
import json
import os
import pwd
import random
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from _common import (
    REPO,
    build_tree,
    cleanup,
    fixtures_arg,
    machine,
    median,
    percentile,
    start_daemon,
    start_wrapper,
    stop,
    temp_dir,
    wait_state,
    write_config,
)

sys.path.insert(0, str(REPO))
from tests.support.attach_client import AttachClient  # noqa: E402

CAPTURE = "navi21-rx6900xt-sapphire-nitro"
PAUSE_C = 90.0
COOL_MC = 59000
TRAINER = "import time\nwhile True:\n    time.sleep(0.05)\n"


def poll_until(check: Callable[[], bool], timeout_s: float, step_s: float = 0.001) -> float | None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return time.monotonic()
        time.sleep(step_s)
    return None


def attach_times(sock: Path, count: int) -> list[float]:
    times = []
    for _ in range(count):
        t0 = time.monotonic()
        client = AttachClient(sock, "attach-bench", beat_s=60.0)
        times.append(time.monotonic() - t0)
        if not client.reply.ok:
            raise RuntimeError(f"attach refused: {client.reply.message}")
        client.close()
    return times


def start_wrapper_run(work: Path, run: Path) -> tuple[subprocess.Popen[bytes], Path]:
    """The real `gpuwatch train` with a sleeping loop as its command; returns it and its pause file's path."""
    wrapper = start_wrapper(work, run, "wrapped", TRAINER)
    runs = work / "xdg-wrapped" / "gpuwatch" / "runs"
    if poll_until(lambda: any(runs.glob("*")), 30.0, 0.05) is None:
        raise RuntimeError(f"the wrapper made no run directory; see {work}/wrapper-wrapped.log")
    return wrapper, next(runs.glob("*")) / "pause"


def attached_names(state: Path) -> set[str]:
    try:
        return {t["name"] for t in json.loads(state.read_text())["trainers"] if t.get("origin") == "attached"}
    except (OSError, ValueError, KeyError):
        return set()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--attaches", type=int, default=50)
    parser.add_argument("--interval-s", type=float, default=1.0)
    fixtures_arg(parser)
    args = parser.parse_args()
    work = temp_dir("attach")
    try:
        (hwmon,) = build_tree(work / "sys", args.fixtures, CAPTURE, 1)
        run = work / "run"
        run.mkdir()
        extra = (
            '[http]\nenabled = false\n[fan]\nmode = "monitor-only"\n'
            f"[thermal]\njunction_limit_c = {PAUSE_C}\nhysteresis_c = 5\n"
            "[attached]\ndebounce_s = 0\nmin_pause_s = 0\n"
            '[[trainer]]\nname = "configured"\n'
            f"command = {json.dumps([sys.executable, '-c', TRAINER])}\n"
            'debounce_s = 0\nmin_pause_s = 0\ncooperative_pause = "always"\ngrace_s = 2\n'
            f'user = "{pwd.getpwuid(os.geteuid()).pw_name}"\n'
        )
        config = write_config(work / "gpuwatch.toml", work / "sys", run, extra, args.interval_s)
        temp = work / "sys" / hwmon / "temp2_input"
        temp.write_text(f"{COOL_MC}\n")
        daemon = start_daemon(config, work / "daemon.log")
        try:
            wait_state(run / "state.json", daemon)
            attach_s = attach_times(run / "control.sock", args.attaches)
            client = AttachClient(run / "control.sock", "attached")
            wrapper, wrapped_pause = start_wrapper_run(work, run)
            pause_file = run / "trainers" / "configured" / "pause"
            configured_s, attached_s, wrapped_s = [], [], []
            try:
                if poll_until(lambda: "wrapped" in attached_names(run / "state.json"), 60.0, 0.05) is None:
                    raise RuntimeError(f"the wrapper did not attach; see {work}/wrapper-wrapped.log")
                for trial in range(args.trials):
                    time.sleep(random.uniform(0, args.interval_s))
                    seen = len(client.events)
                    t0 = time.monotonic()
                    temp.write_text(f"{int((PAUSE_C + 1) * 1000)}\n")
                    hits: dict[str, float] = {}
                    deadline = t0 + 10 * args.interval_s
                    while len(hits) < 3 and time.monotonic() < deadline:
                        now = time.monotonic()
                        if "configured" not in hits and pause_file.exists():
                            hits["configured"] = now - t0
                        if "attached" not in hits and any(e.event == "pause" for e in client.events[seen:]):
                            hits["attached"] = now - t0
                        if "wrapped" not in hits and wrapped_pause.exists():
                            hits["wrapped"] = now - t0
                        time.sleep(0.001)
                    configured_s.append(hits.get("configured", float("inf")))
                    attached_s.append(hits.get("attached", float("inf")))
                    wrapped_s.append(hits.get("wrapped", float("inf")))
                    temp.write_text(f"{COOL_MC}\n")
                    resumed = poll_until(lambda: not pause_file.exists() and not client.held
                                         and not wrapped_pause.exists(), 20 * args.interval_s)
                    if resumed is None:
                        raise RuntimeError(f"trial {trial}: not resumed after cooling; see {work}/daemon.log")
                    time.sleep(2 * args.interval_s)  # the trainer back to running (min_pause_s 0)
            finally:
                client.close()
                stop(wrapper, timeout_s=15)
        finally:
            stop(daemon, timeout_s=15)
        print(f"machine: {machine()}")
        print(f"tick {args.interval_s} s; {args.attaches} attaches; {args.trials} pause trials, t0 at a random "
              "phase of the tick\n")
        print(f"{'measure':<34} {'n':>4} {'p50 ms':>8} {'p95 ms':>8} {'max ms':>8}")
        rows = (("attach: connect -> Attached", attach_s), ("pause: configured (pause file)", configured_s),
                ("pause: attached (pause event)", attached_s),
                ("pause: wrapped (wrapper's file)", wrapped_s),
                ("wrapper's hop (paired)", [w - c for w, c in zip(wrapped_s, configured_s, strict=True)]))
        for name, values in rows:
            print(f"{name:<34} {len(values):>4} {median(values) * 1e3:>8.1f} {percentile(values, 95) * 1e3:>8.1f} "
                  f"{max(values) * 1e3:>8.1f}")
        ok = (percentile(attach_s, 95) < 0.100 and median(attached_s) <= median(configured_s) + args.interval_s
              and median(wrapped_s) <= median(configured_s) + args.interval_s)
        print("\nattach p95 < 100 ms and the attached runs' pause p50 within one tick of the trainer's:",
              "yes" if ok else "NO")
        return 0 if ok else 1
    finally:
        cleanup(work)


if __name__ == "__main__":
    sys.exit(main())
