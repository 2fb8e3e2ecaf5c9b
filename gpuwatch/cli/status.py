"""Renders a status document (publish/document.py) as gpustat/nvidia-smi style text, and its exit code.

Pure: takes the document, ``now`` and whether to colour; the CLI decides the colour (TTY only).
"""

from __future__ import annotations

import time

from gpuwatch.cli.gpu_block import gpu_block
from gpuwatch.cli.text import BOLD, DIM, RED, YELLOW, Paint, duration, painter
from gpuwatch.cli.trainer_rows import trainer_gpu_lines, trainer_line
from gpuwatch.publish.schema import StatusDocument

EXIT_OK, EXIT_ALARM, EXIT_USAGE = 0, 1, 2


def exit_code(doc: StatusDocument) -> int:
    """1 when a GPU is over a limit, down, its fan in failsafe or uncontrolled, recovering from a reset, a trainer
    failed or left a process stuck, or the daemon reports a failure."""
    daemon = doc.get("daemon")
    if daemon and daemon.get("failures"):
        return EXIT_ALARM
    for gpu in doc.get("gpus", []):
        fan = gpu.get("fan_controller")
        fan_bad = bool(fan and (fan.get("mode") in ("failsafe", "uncontrolled") or fan.get("stalled")))
        reset = gpu.get("reset")
        if gpu.get("over_limit") or not gpu.get("up", True) or fan_bad or (reset and reset.get("recovering")):
            return EXIT_ALARM
    if any(t.get("phase") == "failed" or t.get("stuck_pids") for t in doc.get("trainers", [])):
        return EXIT_ALARM
    return EXIT_OK


def render(doc: StatusDocument, now: float | None = None, color: bool = False, note: str | None = None) -> str:
    now = time.time() if now is None else now
    paint = painter(color)
    lines = [_header(doc, now, paint)]
    if note:
        lines.append(paint(note, YELLOW))
    if not doc.get("gpus"):
        lines.append("no GPU found")
    for gpu in doc.get("gpus", []):
        lines.extend(gpu_block(gpu, paint))
    for card in doc.get("unsupported", []):
        lines.append(paint(f"[{card.get('gpu_id') or '?'}] {card['card']}  driver {card.get('driver') or '?'}: "
                           "not supported, not read", DIM))
    for trainer in doc.get("trainers", []):
        lines.append(trainer_line(trainer, now, paint))
        lines.extend(trainer_gpu_lines(trainer, paint))
    return "\n".join(lines) + "\n"


def _header(doc: StatusDocument, now: float, paint: Paint) -> str:
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(doc.get("taken_unix") or now))
    daemon = doc.get("daemon")
    if daemon:
        state = (f"daemon running (pid {daemon['pid']}, up {duration(now - daemon['started_unix'])}, "
                 f"every {daemon['interval_s']:g}s)")
        for failure in daemon.get("failures") or []:
            state += "  " + paint(f"FAILURE: {failure}", RED)
    else:
        state = f"read from {_sources(doc)}"
    return f"{paint('gpuwatch', BOLD)}  {stamp}  {state}"


def _sources(doc: StatusDocument) -> str:
    """What a direct reading came from: sysfs for amdgpu, NVML for NVIDIA GPUs."""
    names = {"nvml": "NVML"}
    found = dict.fromkeys(names.get(gpu.get("backend") or "", "sysfs") for gpu in doc.get("gpus", []))
    return " and ".join(found) or "sysfs"
