"""Renders a status document (publish/document.py) as gpustat/nvidia-smi style text, and its exit code.

Pure: takes the document, ``now`` and whether to colour; the CLI decides the colour (TTY only).
"""

from __future__ import annotations

import time

from gpuwatch.cli.gpu_block import gpu_block
from gpuwatch.cli.text import BOLD, DIM, RED, YELLOW, Paint, duration, painter, safe_strings
from gpuwatch.cli.trainer_rows import trainer_gpu_lines, trainer_line, trainer_log_line
from gpuwatch.publish.light_view import light_view

# publish/document.py imports the config's models (pydantic), model.py builds some 35 dataclasses: annotations only,
# the renderers read the light view (issue 52)
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

    from gpuwatch.model import StatusView
    from gpuwatch.publish.document import StatusDocument

EXIT_OK, EXIT_ALARM, EXIT_USAGE = 0, 1, 2


NO_GPU = ("no GPU found: no amdgpu card in the sysfs tree read and no NVIDIA GPU through NVML "
          "(--sysfs-root DIR reads another tree; `gpuwatch run --simulate` simulates cards)")
LEFTOVERS_FIX = "  run `gpuwatch restore` to give them back (systemd's ExecStopPost does it after a crash)"


def shown_view(doc: StatusDocument) -> StatusView:
    """The view the text renders (its strings made safe: run names, reasons, job ids, commands are any local
    user's), built once per reading: ``render_view``, ``view_exit_code`` and cli/process_table.py take it. The
    light view (publish/light_view.py): the renderers read model's dataclasses (publish/view.py) the same way."""
    return light_view(safe_strings(doc))


def exit_code(doc: StatusDocument, leftovers: Sequence[str] = ()) -> int:
    """``view_exit_code`` of a document."""
    return view_exit_code(light_view(doc), leftovers)


def view_exit_code(view: StatusView, leftovers: Sequence[str] = ()) -> int:
    """1 when no GPU is found, a GPU is over a limit, down, its fan in failsafe or uncontrolled, recovering from a
    reset, a trainer failed or left a process stuck, the daemon reports a failure, or ``leftovers`` (cli/leftovers.py:
    what a daemon that did not stop cleanly left behind) is not empty."""
    if (view.daemon and view.daemon.failures) or leftovers or not view.gpus:
        return EXIT_ALARM
    for gpu in view.gpus:
        fan = gpu.fan_controller
        fan_bad = bool(fan and (fan.mode in ("failsafe", "uncontrolled") or fan.stalled))
        if gpu.over_limit or not gpu.up or fan_bad or (gpu.reset and gpu.reset.recovering):
            return EXIT_ALARM
    # An attached run that failed is its user's script exiting non-zero, not the box needing attention.
    if any((t.phase == "failed" and t.origin != "attached") or t.stuck_pids for t in view.trainers):
        return EXIT_ALARM
    return EXIT_OK


def select_gpus(doc: StatusDocument, wanted: Sequence[str]) -> StatusDocument:
    """``status|sensors --gpu GPU`` (repeatable): only those GPUs, their processes and unsupported cards; GPU is
    what ``config.base.resolve_gpu`` reads (an index counts the GPUs in the order status lists them, from 0).
    ValueError names what exists."""
    from gpuwatch.config.slots import gpus_listed, resolve_gpu  # here: re under it, for --gpu alone (issue 52)

    gpus = doc.get("gpus", [])
    here = [(gpu["gpu_id"], gpu["card"]) for gpu in gpus]
    slots = set()
    for item in wanted:
        slot = resolve_gpu(item, here)
        if slot not in dict(here):
            raise ValueError(f"{item}: no such GPU here (index, slot, card: {gpus_listed(here)})")
        slots.add(slot)
    chosen = dict(doc)
    chosen["gpus"] = [gpu for gpu in gpus if gpu["gpu_id"] in slots]
    chosen["processes"] = [p for p in doc.get("processes", []) if p.get("gpu_id") in slots]
    chosen["unsupported"] = [card for card in doc.get("unsupported", []) if card.get("gpu_id") in slots]
    return chosen


def render(doc: StatusDocument, now: float | None = None, color: bool = False, note: str | None = None,
           leftovers: Sequence[str] = (), logs: str = "gpuwatch logs", width: int | None = None) -> str:
    """``render_view`` of a document."""
    return render_view(shown_view(doc), now, color, note, leftovers, logs, width)


def render_view(view: StatusView, now: float | None = None, color: bool = False, note: str | None = None,
                leftovers: Sequence[str] = (), logs: str = "gpuwatch logs", width: int | None = None) -> str:
    """``logs``: the command a trainer's log hint names, as it must be typed to reach this daemon (with its ``-c
    FILE`` when the status was read through one: the demo's daemon, a daemon with a runtime_dir of its own).
    ``width``: the terminal's columns, which the trainers' lines are fitted to (None: as wide as they are)."""
    now = time.time() if now is None else now
    paint = painter(color)
    lines = [_header(view, now, paint)]
    if note:
        lines.append(paint(note, YELLOW))
    lines.extend(paint(f"LEFT BEHIND: {line}", RED) for line in leftovers)
    if leftovers:
        lines.append(paint(LEFTOVERS_FIX, RED))
    if not view.gpus:
        lines.append(paint(NO_GPU, RED))
    for gpu in view.gpus:
        lines.extend(gpu_block(gpu, paint))
    for card in view.unsupported:
        lines.append(paint(f"[{card.gpu_id or '?'}] {card.card}  driver {card.driver or '?'}: "
                           "not supported, not read", DIM))
    for trainer in view.trainers:
        lines.append(trainer_line(trainer, now, paint, width))
        lines.extend(trainer_gpu_lines(trainer, paint, width))
        if trainer.log_path:  # where to look when it failed (`gpuwatch logs NAME` prints it)
            lines.append(trainer_log_line(trainer, logs, width))
    return "\n".join(lines) + "\n"


def _header(view: StatusView, now: float, paint: Paint) -> str:
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(view.taken_unix or now))
    daemon = view.daemon
    if daemon:
        state = (f"daemon running (pid {daemon.pid}, up {duration(now - daemon.started_unix)}, "
                 f"every {daemon.interval_s:g}s)")
        for failure in daemon.failures:
            state += "  " + paint(f"FAILURE: {failure}", RED)
    else:
        state = f"read from {_sources(view)}"
    return f"{paint('gpuwatch', BOLD)}  {stamp}  {state}"


def _sources(view: StatusView) -> str:
    """What a direct reading came from: sysfs for amdgpu, NVML for NVIDIA GPUs."""
    names = {"nvml": "NVML"}
    found = dict.fromkeys(names.get(gpu.backend, "sysfs") for gpu in view.gpus)
    return " and ".join(found) or "sysfs"
