"""A training loop without torch that speaks gpuwatch's heartbeat/pause protocol (gpuwatch/heartbeat.py), for
the wrapper's tests: it steps every ``--step-s``, writes its heartbeat each step, holds at the step boundary
while the pause file exists (its heartbeat says ``paused``), and exits with ``--exit-code`` after ``--steps``
(0: never). It records each start in ``--starts`` (one line per start: its argv), so a test sees restarts."""

from __future__ import annotations

import argparse
import os
import sys
import time

from gpuwatch.heartbeat import HEARTBEAT_ENV, PAUSE_ENV, Heartbeat, write_heartbeat


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=0)
    parser.add_argument("--step-s", type=float, default=0.02)
    parser.add_argument("--exit-code", type=int, default=0)
    parser.add_argument("--starts")
    args, rest = parser.parse_known_args()
    if args.starts:
        with open(args.starts, "a") as out:
            out.write(" ".join(sys.argv[1:]) + "\n")
    beat_file, pause_file = os.environ[HEARTBEAT_ENV], os.environ[PAUSE_ENV]
    step = 0
    while args.steps == 0 or step < args.steps:
        held = False
        while os.path.exists(pause_file):
            if not held:
                write_heartbeat(beat_file, Heartbeat(os.getpid(), step, time.time(), None, time.time(), paused=True))
                held = True
            time.sleep(0.02)
        time.sleep(args.step_s)
        step += 1
        write_heartbeat(beat_file, Heartbeat(os.getpid(), step, time.time(), None, time.time()))
    return args.exit_code


if __name__ == "__main__":
    sys.exit(main())
