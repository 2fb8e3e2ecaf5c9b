"""New device coredumps of our GPUs: found, copied to a kept directory, dismissed.

Kernel facts (drivers/base/devcoredump.c): each dump is ``class/devcoredump/devcd<K>``
(K from a counter since boot, never reused) with a root-only ``data`` (reported size 0: read to EOF) and
a ``failing_device`` link to the PCI device, so its basename is the GPU's slot. The kernel keeps one dump
per device: later resets make no new one until it is dismissed (any write to ``data``) or 5 minutes
pass. So a dump is copied before anything else, then dismissed (``resets.dismiss_dumps``), and the
directory keeps the newest ``resets.dumps_kept``. One listdir per tick, usually of an empty directory.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path

from gpuwatch.resets.coredump import DumpSummary, summarize
from gpuwatch.sysfs import Sysfs, SysfsError

log = logging.getLogger("gpuwatch.resets")
CLASS = "class/devcoredump"


@dataclass(frozen=True)
class Dump:
    name: str  # devcd<K>
    gpu_id: str
    path: Path | None  # the kept copy; None when it could not be read (not root) or kept
    summary: DumpSummary
    problem: str | None = None


class DevCoredumps:
    def __init__(self, sysfs: Sysfs, keep_dir: Path, keep: int = 10, max_bytes: int = 16 << 20,
                 dismiss: bool = True) -> None:
        self.sysfs = sysfs
        self.keep_dir = keep_dir
        self.keep = keep
        self.max_bytes = max_bytes
        self.dismiss = dismiss
        self._seen: set[str] = set()

    def poll(self, gpu_ids: set[str]) -> list[Dump]:
        """Dumps that appeared since the last poll for one of ``gpu_ids`` (other devices' are ignored)."""
        names = [n for n in self.sysfs.list(CLASS) if n.startswith("devcd")]
        self._seen &= set(names)  # K is never reused: forgetting a dismissed dump is safe
        found = []
        for name in names:
            if name in self._seen:
                continue
            failing = self.sysfs.resolve(f"{CLASS}/{name}/failing_device")
            if failing is None:
                continue  # before "devcoredump: Send uevent once devcd is ready" the link may come later
            self._seen.add(name)
            gpu_id = failing.rstrip("/").rsplit("/", 1)[-1].lower()
            if gpu_id in gpu_ids:
                found.append(self._take(name, gpu_id))
        return found

    def _take(self, name: str, gpu_id: str) -> Dump:
        try:
            data = self.sysfs.read_all(f"{CLASS}/{name}/data", self.max_bytes)
        except SysfsError as exc:
            return Dump(name, gpu_id, None, DumpSummary(), f"cannot read the dump ({exc.reason}; needs root)")
        if data is None:
            return Dump(name, gpu_id, None, DumpSummary(), "the dump vanished before it was read")
        summary = summarize(data.decode("utf-8", "replace"))
        path, problem = self._keep(name, gpu_id, data), None
        if path is None:
            problem = f"could not keep a copy in {self.keep_dir}"
        if self.dismiss and path is not None:
            try:
                self.sysfs.write(f"{CLASS}/{name}/data", "1")
            except SysfsError as exc:
                log.warning("cannot dismiss %s: %s (the next reset of %s may make no dump)", name, exc.reason, gpu_id)
        return Dump(name, gpu_id, path, summary, problem)

    def _keep(self, name: str, gpu_id: str, data: bytes) -> Path | None:
        if self.keep <= 0:
            return None
        stamp = time.strftime("%Y%m%d-%H%M%S")
        path = self.keep_dir / f"{stamp}-{gpu_id.replace(':', '_')}-{name}.txt"
        try:
            self.keep_dir.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
            kept = sorted(self.keep_dir.glob("*-devcd*.txt"), key=lambda p: p.stat().st_mtime)
            for old in kept[: max(0, len(kept) - self.keep)]:
                old.unlink(missing_ok=True)
        except OSError as exc:
            log.error("cannot keep %s in %s: %s", name, self.keep_dir, exc.strerror)
            return None
        return path
