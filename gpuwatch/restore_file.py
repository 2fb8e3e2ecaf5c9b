"""A restore file: what gpuwatch found on each GPU before its first write, kept where a crash cannot lose it.

``{gpu_id: {"backend": ..., ...}}`` as JSON, written atomically (a temp file, then a rename). The fan
controller keeps ``fan-restore.json`` (each fan's original mode), the power governor ``power-restore.json``
(each cap found at start). `gpuwatch restore` (systemd ExecStopPost) reads both after any exit, and a
daemon that starts again adopts a record left by one that was killed: the record holds the true original,
where the new start would read what the killed daemon left behind.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger("gpuwatch")


class RestoreFile:
    """Thread-safe: the fan controller takes every GPU on its own worker, all at the same moment, and one
    GPU's read-modify-write must neither lose another's record nor share its temporary file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.RLock()  # re-entered: remove() may clear()

    def load(self) -> dict[str, Any]:
        """Every record; empty when there is no file, and (logged) when it cannot be read."""
        try:
            data = json.loads(self.path.read_text())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            log.error("%s unreadable (%s): restoring without it", self.path, exc)
            return {}
        return data if isinstance(data, dict) else {}

    def add(self, gpu_id: str, record: dict[str, Any],
            adopt: Callable[[dict[str, Any]], dict[str, Any]] | None = None) -> dict[str, Any]:
        """Store ``record`` unless one of the same backend is there already; returns the one in force.

        ``adopt(existing)`` merges such a record with the new one instead (the fans: the original mode
        stays, the paths are the new ones); it is stored when it differs.
        """
        with self._lock:
            data = self.load()
            existing = data.get(gpu_id)
            if isinstance(existing, dict) and existing.get("backend") == record.get("backend"):
                if adopt is None:
                    return existing
                record = adopt(existing)
                if record == existing:
                    return existing
            data[gpu_id] = record
            self._save(data)
            return record

    def remove(self, gpu_id: str) -> None:
        """Forget one GPU's record (given back); the file goes when the last one does."""
        with self._lock:
            data = self.load()
            if data.pop(gpu_id, None) is None:
                return
            if data:
                self._save(data)
            else:
                self.clear()

    def clear(self) -> None:
        with self._lock:
            self.path.unlink(missing_ok=True)

    def _save(self, data: dict[str, Any]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(json.dumps(data, indent=2, sort_keys=True))
        os.replace(tmp, self.path)


@dataclass
class Handback:
    """What a restore did (`gpuwatch restore`): one line per thing handed back, one per problem."""

    done: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
