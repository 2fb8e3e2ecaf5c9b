"""The heartbeat/pause protocol between a supervised trainer and the daemon.

The supervisor gives each trainer two paths through its environment:

* ``GPUWATCH_HEARTBEAT_FILE``: the trainer (the launcher's optimizer-step hook, or any program that
  wants to) rewrites this JSON file atomically (tmp + rename) with its progress. The daemon only reads it.
* ``GPUWATCH_PAUSE_FILE``: while this file exists the daemon asks for a cooperative pause: the trainer
  blocks at its next optimizer-step boundary and reports ``paused: true`` in its heartbeat until the
  file is gone.

This module has no dependencies beyond the standard library so that both the daemon (which never
imports torch) and the torch launcher can use it.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

HEARTBEAT_ENV = "GPUWATCH_HEARTBEAT_FILE"
PAUSE_ENV = "GPUWATCH_PAUSE_FILE"


@dataclass(frozen=True)
class Heartbeat:
    """One progress report from a trainer; times are Unix seconds (the writer's clock)."""

    pid: int
    steps_total: int
    last_step_unix: float | None
    steps_per_s: float | None
    updated_unix: float
    paused: bool = False
    epoch: int | None = None


def write_heartbeat(path: str | os.PathLike[str], heartbeat: Heartbeat) -> None:
    """Atomically replace ``path`` with ``heartbeat`` so a reader never sees half a file."""
    target = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=".hb-", dir=target.parent)
    try:
        with os.fdopen(fd, "w") as handle:
            json.dump(asdict(heartbeat), handle)
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def read_heartbeat(path: str | os.PathLike[str]) -> Heartbeat | None:
    """The last heartbeat, or None when there is none yet or it cannot be parsed."""
    try:
        raw = json.loads(Path(path).read_text())
        return Heartbeat(
            pid=int(raw["pid"]),
            steps_total=int(raw["steps_total"]),
            last_step_unix=_opt_float(raw.get("last_step_unix")),
            steps_per_s=_opt_float(raw.get("steps_per_s")),
            updated_unix=float(raw["updated_unix"]),
            paused=bool(raw.get("paused", False)),
            epoch=None if raw.get("epoch") is None else int(raw["epoch"]),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


def pause_requested(pause_file: str | os.PathLike[str] | None) -> bool:
    """True while the daemon asks the trainer to hold at its next step boundary."""
    return pause_file is not None and os.path.exists(pause_file)


def _opt_float(value: Any) -> float | None:
    return None if value is None else float(value)
