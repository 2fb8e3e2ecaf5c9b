"""An actuator's restore file, ``{gpu_id: {"backend": ..., ...}}``, written atomically (a temporary file, then
``os.replace``: a SIGKILL leaves the old file or the new one). ``actuation.Actuator`` holds one and names it.
Read and written through ``safefs`` (a regular file only, bounded; an exclusive temporary name), although the
daemon's runtime directory is its own (daemon/lock.py): `gpuwatch restore` may be pointed at any directory.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpuwatch.safefs import read_bounded, write_atomic

log = logging.getLogger("gpuwatch")


class RestoreFile:
    """Thread-safe: the fan controller takes every GPU on its own worker, all at the same moment, and one
    GPU's read-modify-write must neither lose another's record nor share its temporary file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.lock = threading.RLock()  # re-entered: remove() may clear(); the Actuator holds it around its own

    def load(self) -> dict[str, Any]:
        """Every record; empty when there is no file, and (logged) when it cannot be read."""
        try:
            return self.read()
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            log.error("%s unreadable (%s): restoring without it", self.path, exc)
            return {}

    def read(self) -> dict[str, Any]:
        """Every record; raises FileNotFoundError when there is none, OSError or ValueError (one line) when the
        file is there but is not a restore file (truncated, empty, a list, a link, a FIFO): `gpuwatch restore`
        then fails, naming it."""
        raw = read_bounded(self.path)
        try:
            data = json.loads(raw)
        except ValueError as exc:
            raise ValueError(f"not JSON ({exc})" if raw.strip() else "empty") from None
        if not isinstance(data, dict):
            raise ValueError(f"a JSON {type(data).__name__}, not an object of records")
        return data

    def add(self, gpu_id: str, record: dict[str, Any],
            adopt: Callable[[dict[str, Any]], dict[str, Any]] | None = None) -> dict[str, Any]:
        """Store ``record`` unless one of the same backend is there already; returns the one in force.

        ``adopt(existing)`` merges such a record with the new one instead (the fans: the original mode
        stays, the paths are the new ones); it is stored when it differs.
        """
        with self.lock:
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
        with self.lock:
            data = self.load()
            if data.pop(gpu_id, None) is None:
                return
            if data:
                self._save(data)
            else:
                self.clear()

    def identity(self) -> tuple[int, int, int] | None:
        """(inode, mtime, size) of the file, None when it is absent: every save replaces it (a new inode)."""
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return st.st_ino, st.st_mtime_ns, st.st_size

    def clear(self) -> None:
        with self.lock:
            self.path.unlink(missing_ok=True)

    def _save(self, data: dict[str, Any]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(self.path, json.dumps(data, indent=2, sort_keys=True).encode())
