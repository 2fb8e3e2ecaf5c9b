"""What a daemon that did not stop cleanly left behind, as `gpuwatch status` warns of it (issue 32 point 5).

Without a live daemon nothing should hold a fan or a power cap: a restore file in the runtime directory
(``actuation.restore_file_path``: written before the first write, removed once given back) means a daemon
was killed before it gave something back, and a fan in manual mode (``pwm1_enable`` 1) means nobody drives
it. Both are said, with ``gpuwatch restore`` as the fix, and make `status` exit 1. A running daemon owns
its restore files and its fans, so nothing is said while one runs.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path

from gpuwatch.actuation.actuator import restore_file_path
from gpuwatch.publish.document import StatusDocument
from gpuwatch.publish.view import status_view
from gpuwatch.safefs import read_bounded

# What each actuator's restore file holds, in words (its name is ``restore_file_path``'s).
WHAT = {"fan": "a fan taken from the firmware", "power": "a lowered power cap",
        "clock": "a lowered shader clock ceiling"}


def leftovers(doc: StatusDocument, runtime_dir: Path) -> list[str]:
    """The warnings for ``doc`` (a reading) and the restore files in ``runtime_dir``: empty while a daemon runs."""
    if doc.get("daemon"):
        return []
    from gpuwatch.supervise.unmanaged_stops import describe_recorded  # processes a killed daemon left SIGSTOPped

    return leftover_lines(doc, restore_records(runtime_dir)) + describe_recorded(runtime_dir)


def restore_records(runtime_dir: Path) -> dict[Path, list[str]]:
    """Each restore file in ``runtime_dir`` and the GPUs it holds a record of (an unreadable one: none named)."""
    pattern = restore_file_path(runtime_dir, "*").name
    found: dict[Path, list[str]] = {}
    for path in sorted(runtime_dir.glob(pattern)):
        try:
            data = json.loads(read_bounded(path))  # safefs: never blocked by a FIFO, never a huge read
        except FileNotFoundError:  # given back meanwhile
            continue
        except (OSError, ValueError):
            data = {}
        found[path] = sorted(data) if isinstance(data, dict) else []
    return found


def leftover_lines(doc: StatusDocument, records: Mapping[Path, Sequence[str]]) -> list[str]:
    """One line per restore file and per fan left in manual mode (pure; ``doc`` is a reading without a daemon)."""
    lines = []
    for path, gpus in records.items():
        kind = path.name.removesuffix(restore_file_path(Path(), "").name)  # "fan-restore.json" -> "fan"
        what = WHAT.get(kind, f"a change of {kind}")
        held = f" ({', '.join(gpus)})" if gpus else ""
        lines.append(f"no daemon runs, yet {path} holds {what}{held}: it was not given back")
    for gpu in status_view(doc).gpus:
        if gpu.pwm_enable == 1 and not gpu.fan_controller:
            lines.append(f"{gpu.gpu_id}: fan in manual mode (pwm1_enable 1) and no daemon drives it")
    return lines
