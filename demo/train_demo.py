#!/usr/bin/env python3
"""A small training job for `make run`: shows up in gpuwatch with its steps/s, pauses and resumes.

With PyTorch installed it trains a tiny CNN on random CPU data (`make run` then starts it through the
launcher, `python -m gpuwatch.launch ... --launched`, whose optimizer-step hook reports the steps);
without it, a pure-Python stand-in does a little arithmetic per "step". Either way the steps reach
gpuwatch's heartbeat/pause protocol (gpuwatch/heartbeat.py): $GPUWATCH_HEARTBEAT_FILE is rewritten
after every step and the job holds at the next step boundary while $GPUWATCH_PAUSE_FILE exists. It is
deliberately light (a few steps per second) because the heat comes from the simulated GPU, not from this
machine's CPU. With $GPUWATCH_DEMO_CLOCK_FILE (the simulated card's hwmon freq1_input, set by `make run`)
a step takes as much longer as the card's clock is below its top, so a power cap shows as fewer steps/s
(docs/simulator.md).

    python demo/train_demo.py [--steps N] [--step-s SECONDS] [--checkpoint-dir DIR] [--resume CHECKPOINT]

With --checkpoint-dir it saves its step count every --checkpoint-every steps (step-<N>.json, written
atomically, the newest three kept), and --resume continues from one: what gpuwatch's restart_command
with {last_checkpoint} does after a crash, a hang or a GPU reset.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout without installing

from gpuwatch.heartbeat import HEARTBEAT_ENV, PAUSE_ENV, Heartbeat, pause_requested, write_heartbeat  # noqa: E402

CLOCK_ENV = "GPUWATCH_DEMO_CLOCK_FILE"
FULL_CLOCK_HZ = 1750e6  # the simulated RX 5600 XT's top sclk (gpuwatch/sim/navi10.py)


def slowdown(clock_file: str | None) -> float:
    """How much longer a step takes at the GPU's clock now than at its top (1-4; 1 without a clock)."""
    if not clock_file:
        return 1.0
    try:
        hz = int(Path(clock_file).read_text().strip())
    except (OSError, ValueError):
        return 1.0
    return min(4.0, max(1.0, FULL_CLOCK_HZ / max(hz, 1)))


def torch_step() -> Callable[[], float] | None:
    try:
        import torch  # type: ignore[import-not-found]
        from torch import nn  # type: ignore[import-not-found]
    except ImportError:
        return None
    torch.set_num_threads(1)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(4), nn.Flatten(),
                          nn.Linear(8 * 16, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    loss_fn = nn.CrossEntropyLoss()

    def one_step() -> float:
        images, labels = torch.randn(16, 3, 32, 32), torch.randint(0, 10, (16,))
        optimizer.zero_grad()
        loss = loss_fn(model(images), labels)
        loss.backward()
        optimizer.step()
        return float(loss.item())

    return one_step


def python_step() -> Callable[[], float]:
    weights = [random.uniform(-1, 1) for _ in range(64)]

    def one_step() -> float:
        # A toy least-squares fit: enough work to be a "step", little enough to stay out of the way.
        loss = 0.0
        for _ in range(200):
            x = [random.uniform(-1, 1) for _ in range(8)]
            error = sum(w * xi for w, xi in zip(weights, x, strict=False)) - math.sin(x[0])
            loss += error * error
            for i, xi in enumerate(x):
                weights[i] -= 0.01 * error * xi
        return loss / 200

    return one_step


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=0, help="stop after N steps (0: run until stopped)")
    parser.add_argument("--step-s", type=float, default=0.2, help="seconds per step (sleep after the compute)")
    parser.add_argument("--backend", choices=("auto", "torch", "python"), default="auto")
    parser.add_argument("--launched", action="store_true",
                        help="run by `python -m gpuwatch.launch`: its optimizer-step hook beats and pauses, not us")
    parser.add_argument("--checkpoint-dir", type=Path, help="save DIR/step-<N>.json every --checkpoint-every steps")
    parser.add_argument("--checkpoint-every", type=int, default=50)
    parser.add_argument("--resume", type=Path, help="continue from this checkpoint (gpuwatch's {last_checkpoint})")
    args = parser.parse_args(argv)

    step = torch_step() if args.backend in ("auto", "torch") else None
    if step is None and args.backend == "torch":
        print("train_demo: PyTorch is not installed", file=sys.stderr)
        return 2
    kind = "torch CNN" if step is not None else "pure-Python stand-in"
    step = step or python_step()
    heartbeat_file, pause_file = os.environ.get(HEARTBEAT_ENV), os.environ.get(PAUSE_ENV)
    clock_file = os.environ.get(CLOCK_ENV)
    if args.launched and kind == "torch CNN":
        heartbeat_file = pause_file = None  # one writer per heartbeat file: the launcher's hook
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(True))
    print(f"train_demo: {kind}, pid {os.getpid()}, heartbeat {heartbeat_file or '-'}", flush=True)

    steps, rate, last_unix, epoch = 0, None, None, 0
    if args.resume:
        steps = int(json.loads(args.resume.read_text())["step"])
        print(f"train_demo: resumed from {args.resume} at step {steps}", flush=True)
    while not stop and (args.steps == 0 or steps < args.steps):
        if pause_requested(pause_file):
            # Hold at the step boundary, saying so, until the daemon removes the pause file.
            print(f"train_demo: paused by gpuwatch at step {steps}", flush=True)
            while pause_requested(pause_file) and not stop:
                _beat(heartbeat_file, steps, last_unix, rate, epoch, paused=True)
                time.sleep(0.2)
            print(f"train_demo: resumed at step {steps}", flush=True)
            last_unix = None  # the pause is not a slow step
            continue
        started = time.time()
        loss = step()
        time.sleep(max(0.0, args.step_s * slowdown(clock_file) - (time.time() - started)))
        now = time.time()
        if last_unix is not None:
            instant = 1.0 / max(1e-6, now - last_unix)
            rate = instant if rate is None else 0.8 * rate + 0.2 * instant
        steps, last_unix = steps + 1, now
        epoch = steps // 500
        _beat(heartbeat_file, steps, last_unix, rate, epoch, paused=False)
        if args.checkpoint_dir and steps % args.checkpoint_every == 0:
            _checkpoint(args.checkpoint_dir, steps)
        if steps % 25 == 0:
            print(f"train_demo: step {steps} loss {loss:.4f} {rate or 0:.1f} steps/s", flush=True)
    print(f"train_demo: stopping after {steps} steps", flush=True)
    return 0


def _checkpoint(directory: Path, steps: int, keep: int = 3) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    partial = directory / f".step-{steps:08d}.json.partial"
    partial.write_text(json.dumps({"step": steps}))
    os.replace(partial, directory / f"step-{steps:08d}.json")  # a checkpoint is whole or absent
    for old in sorted(directory.glob("step-*.json"))[:-keep]:
        old.unlink(missing_ok=True)


def _beat(path: str | None, steps: int, last_unix: float | None, rate: float | None, epoch: int, paused: bool) -> None:
    if path:
        write_heartbeat(path, Heartbeat(pid=os.getpid(), steps_total=steps, last_step_unix=last_unix,
                                        steps_per_s=rate, updated_unix=time.time(), paused=paused, epoch=epoch))


if __name__ == "__main__":
    sys.exit(main())
