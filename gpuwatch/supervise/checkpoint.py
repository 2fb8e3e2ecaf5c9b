"""Finds the newest *complete* checkpoint matching a glob, for `{last_checkpoint}` in restart commands.

A trainer killed mid-save leaves a truncated file; resuming from it crashes or, worse, silently loads
garbage. A candidate counts only if it is non-empty, its size and mtime are unchanged across two looks
(it is not being written right now) and, for torch files (.pt/.pth/.ckpt, zip archives since torch 1.6),
the zip central directory at the end of the file is intact. Older candidates are tried when the newest fails.
"""

from __future__ import annotations

import glob
import logging
import os
import time
import zipfile
from pathlib import Path

from gpuwatch.config.trainer import TrainerConfig

log = logging.getLogger("gpuwatch.checkpoint")
_supervisor_log = logging.getLogger("gpuwatch.supervisor")

ZIP_SUFFIXES = {".pt", ".pth", ".ckpt", ".zip"}


def newest_complete_checkpoint(pattern: str, cwd: Path | None = None, settle_s: float = 0.2) -> Path | None:
    """The newest complete file matching ``pattern`` (relative to ``cwd``; ``**`` allowed), else None."""
    base = cwd or Path.cwd()
    full = pattern if os.path.isabs(pattern) else str(base / pattern)
    candidates = []
    for name in glob.glob(full, recursive=True):
        try:
            st = os.stat(name)
        except OSError:
            continue
        if os.path.isfile(name):
            candidates.append((st.st_mtime, name, st.st_size))
    if not candidates:
        return None
    candidates.sort(reverse=True)
    looked = {name: (mtime, size) for mtime, name, size in candidates}
    time.sleep(settle_s)
    for _mtime, name, _size in candidates:
        problem = incomplete_reason(Path(name), looked[name])
        if problem is None:
            return Path(name)
        log.warning("checkpoint %s skipped: %s", name, problem)
    return None


def incomplete_reason(path: Path, first_look: tuple[float, int] | None = None) -> str | None:
    """Why ``path`` is not a usable checkpoint, or None when it is complete."""
    try:
        st = path.stat()
    except OSError as exc:
        return f"cannot stat: {exc.strerror}"
    if st.st_size == 0:
        return "empty file"
    if first_look is not None and (st.st_mtime, st.st_size) != first_look:
        return "still being written (size or mtime changed)"
    if path.suffix.lower() in ZIP_SUFFIXES:
        try:
            with zipfile.ZipFile(path) as archive:
                if not archive.namelist():
                    return "empty zip archive"
        except (zipfile.BadZipFile, OSError) as exc:
            return f"not a complete zip archive (torch checkpoint truncated?): {exc}"
    return None


def spawn_argv(cfg: TrainerConfig, resume: bool) -> list[str]:
    """What a run starts: ``restart_command`` with ``{last_checkpoint}`` when resuming and a complete
    checkpoint exists, else the original ``command``."""
    if not resume or not cfg.restart_command:
        return list(cfg.command)
    checkpoint = None
    if cfg.checkpoint_glob:
        checkpoint = newest_complete_checkpoint(cfg.checkpoint_glob, cfg.cwd)
    if checkpoint is None and any("{last_checkpoint}" in arg for arg in cfg.restart_command):
        _supervisor_log.warning("trainer %s: no complete checkpoint matches %r: starting with the original command",
                                cfg.name, cfg.checkpoint_glob)
        return list(cfg.command)
    _supervisor_log.info("trainer %s: resuming from %s", cfg.name, checkpoint)
    return [arg.replace("{last_checkpoint}", str(checkpoint)) for arg in cfg.restart_command]
