"""`gpuwatch status --remote`: several machines in one table, their exit code and JSON (pure).

Takes what cli/remote.py fetched (one HostResult per host) and renders one row per GPU of every host;
a host that could not be read is one row saying why, a host whose daemon is stale or reports a failure
gets a row for that. The exit code applies `gpuwatch status`'s rules (cli/status.exit_code) to every
host, and a host that cannot be read or is stale is an alarm too: a machine nobody can see is not fine.
"""

from __future__ import annotations

import time
from typing import Any

from gpuwatch.cli.remote import HostResult
from gpuwatch.cli.status import EXIT_ALARM, EXIT_OK, exit_code
from gpuwatch.cli.text import BOLD, GREEN, RED, RESET, YELLOW, safe_strings, state_text
from gpuwatch.derived import fan_duty
from gpuwatch.model import PublishedGpu, TrainerState
from gpuwatch.publish.light_view import light_view

HEADER = ("HOST", "GPU", "JUNC°C", "EDGE°C", "MEM°C", "FAN", "POWER", "TRAINERS", "STATE")
BAD_PHASES = {"failed"}
# Phases that hold a GPU's training without being an alarm: shown next to "ok", in yellow.
HELD = {"pausing": "training paused", "paused": "training paused", "backoff": "trainer restarting"}


def host_exit_code(result: HostResult) -> int:
    if result.document is None or result.stale:
        return EXIT_ALARM
    return exit_code(result.document)


def fleet_exit_code(results: list[HostResult]) -> int:
    return max((host_exit_code(r) for r in results), default=EXIT_OK)


def to_json(results: list[HostResult], now: float) -> dict[str, Any]:
    """One document for every host: its status document (schema 1) or the reason there is none."""
    return {
        "schema": 1,
        "taken_unix": now,
        "exit_code": fleet_exit_code(results),
        "hosts": [{"host": r.host, "url": r.url, "exit_code": host_exit_code(r), "error": r.error, "stale": r.stale,
                   "status": r.document} for r in results],
    }


def render(results: list[HostResult], now: float | None = None, color: bool = False) -> str:
    now = time.time() if now is None else now
    rows: list[tuple[list[str], str | None]] = []  # cells, colour of the STATE cell
    for result in results:
        rows.extend(_host_rows(result))
    rows = [(safe_strings(cells), colour) for cells, colour in rows]  # names, reasons: any user's strings
    table = [list(HEADER), *(cells for cells, _ in rows)]
    widths = [max(len(r[i]) for r in table) for i in range(len(HEADER) - 1)]

    def line(cells: list[str], colour: str | None) -> str:
        state = f"{colour}{cells[-1]}{RESET}" if color and colour else cells[-1]
        return "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=False)) + "  " + state

    unreadable = sum(r.document is None for r in results)
    gpus = sum(len(r.document.get("gpus", ())) for r in results if r.document is not None)  # older: none
    title = (f"gpuwatch  {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(now))}  {_count(len(results), 'host')}, "
             f"{_count(gpus, 'GPU')}")
    if unreadable:
        title += f", {unreadable} unreadable"
    head = f"{BOLD}{title}{RESET}" if color else title
    return "\n".join([head, line(table[0], None), *(line(cells, colour) for cells, colour in rows)]) + "\n"


def _host_rows(result: HostResult) -> list[tuple[list[str], str | None]]:
    host = result.host
    if result.document is None:
        return [([host, *["-"] * 7, f"ERROR {result.error}"], RED)]
    doc = light_view(result.document)  # as `gpuwatch status` reads it (publish/light_view.py)
    trainers = list(doc.trainers)
    rows = [_gpu_row(host, gpu, trainers) for gpu in doc.gpus]
    if not rows:
        rows.append(([host, "-", "-", "-", "-", "-", "-", _trainers(trainers, None), "no GPU found"], None))
    if result.stale:
        rows.append(([host, *["-"] * 7, f"STALE {result.stale}"], RED))
    for failure in doc.daemon.failures if doc.daemon else ():
        rows.append(([host, *["-"] * 7, f"FAILURE {failure}"], RED))
    return rows


def _problems(gpu: PublishedGpu, on_gpu: list[TrainerState]) -> list[str]:
    """What makes a GPU's row an alarm, in the order its STATE cell lists them."""
    fan = gpu.fan_controller
    problems = []
    if not gpu.up:
        problems.append("DOWN")
    if gpu.over_limit:
        problems.append("over limit: " + ",".join(gpu.over_limit))
    if fan and fan.mode == "failsafe":
        problems.append("fan failsafe")
    if fan and fan.stalled:
        problems.append("FAN STALLED")
    return problems + [f"trainer {t.name} failed" for t in on_gpu if t.phase in BAD_PHASES]


def _held(on_gpu: list[TrainerState]) -> list[str]:
    """Why the GPU's training is held though nothing is wrong (each reason once, in a stable order)."""
    return sorted({HELD[state_text(t.phase)] for t in on_gpu if t.phase in HELD})


def _watts(power: float | None) -> str:
    return "-" if power is None else f"{power:.0f}W"


def _gpu_row(host: str, gpu: PublishedGpu, trainers: list[TrainerState]) -> tuple[list[str], str | None]:
    """One GPU of a host; its STATE: the problems (red), else suspended, else ok and why training is held."""
    on_gpu = _on_gpu(trainers, gpu.gpu_id)
    problems = _problems(gpu, on_gpu)
    if problems:
        state, colour = "; ".join(problems), RED
    elif gpu.suspended:
        state, colour = "suspended", None
    elif held := _held(on_gpu):
        state, colour = ", ".join(["ok", *held]), YELLOW
    else:
        state, colour = "ok", GREEN
    rpm, duty = gpu.fan_rpm, fan_duty(gpu.pwm_ratio, gpu.fan_duty_ratio)
    fan_text = " ".join(p for p in (None if rpm is None else f"{rpm}rpm",
                                     None if duty is None else f"{duty * 100:.0f}%") if p) or "-"
    power = gpu.power_w
    return ([host, gpu.gpu_id, _temp(gpu, "junction"), _temp(gpu, "edge"), _temp(gpu, "mem"), fan_text,
             _watts(power), _trainers(trainers, gpu.gpu_id), state], colour)


def _temp(gpu: PublishedGpu, label: str) -> str:
    reading = gpu.temperatures.get(label)
    value = reading.temp_c if reading else None
    return "-" if value is None else f"{value:.0f}"


def _on_gpu(trainers: list[TrainerState], gpu_id: str | None) -> list[TrainerState]:
    """The trainers using ``gpu_id`` (a trainer with no gpus uses them all); every one for None."""
    return [t for t in trainers if gpu_id is None or not t.gpus or gpu_id in t.gpus]


def _trainers(trainers: list[TrainerState], gpu_id: str | None) -> str:
    return ", ".join(f"{t.name} {state_text(t.phase)}" for t in _on_gpu(trainers, gpu_id)) or "-"


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")
