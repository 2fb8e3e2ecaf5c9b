"""Where the job receipts wait while no daemon runs: the previous daemon's last document in the runtime directory.

A killed daemon (SIGKILL, a crash, the watchdog) leaves its state file; a daemon that stops cleanly renames it
to ``state.last.json`` (``keep_last_state``) so that `gpuwatch status` still sees no daemon, as before. systemd
keeps the runtime directory across restarts (``RuntimeDirectoryPreserve=restart`` in systemd/gpuwatch.service,
automatic ones and `systemctl restart`) and removes it at `systemctl stop`. The runtime directory's lock
(daemon/lock.py) is taken before a daemon starts, so the file read here is the previous daemon's, complete:
it wrote it with a rename. ``take_back`` reads the newer of the two at the first tick, before that tick writes
the state file; what is taken back is publish/receipt_resume.py's to judge. Every failure is one log line and
empty receipts, never a stop: the fans matter more than a receipt.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

from gpuwatch.config.file import REAL_PROC_ROOT
from gpuwatch.config.runtime import LAST_STATE_FILE_NAME
from gpuwatch.publish.decode import Invalid
from gpuwatch.publish.receipt_resume import Carried, carried
from gpuwatch.publish.state import BOOT_ID_FILE, STATE_FILE_MAX_BYTES
from gpuwatch.publish.state import boot_id as read_boot_id
from gpuwatch.safefs import read_bounded

log = logging.getLogger("gpuwatch.receipts")

def boot_id(proc_root: Path) -> str | None:
    """This boot's id; a simulated proc tree (``[simulate]``) has none, the machine's /proc has."""
    for root in dict.fromkeys((proc_root, REAL_PROC_ROOT)):
        if (boot := read_boot_id(str(root / BOOT_ID_FILE))) is not None:
            return boot
    return None


def last_state_file(state_file: Path) -> Path:
    return state_file.with_name(LAST_STATE_FILE_NAME)


def keep_last_state(state_file: Path) -> None:
    """At a clean stop: the state file becomes the next daemon's receipts (a rename keeps its last tick's mtime)."""
    try:
        os.replace(state_file, last_state_file(state_file))
    except FileNotFoundError:
        pass


def take_back(state_file: Path, boot: str | None, kept: int) -> Carried | None:
    """The previous daemon's receipts, or None with one line saying why none are taken back."""
    found = []
    for path in (state_file, last_state_file(state_file)):
        try:
            found.append((path.stat().st_mtime, path))
        except OSError:
            continue
    if not found:
        log.info("no previous daemon's state in %s: job receipts start empty", state_file.parent)
        return None
    path = max(found)[1]  # the newer: a killed daemon's state file after a stopped one's kept file, or before
    try:
        taken = carried(json.loads(read_bounded(path, STATE_FILE_MAX_BYTES)), boot, kept)  # a FIFO never blocks
    except (OSError, ValueError, RecursionError) as exc:  # Invalid (Untrusted) and JSON's errors are ValueErrors
        why = exc if isinstance(exc, Invalid) else f"unreadable: {exc}"
        log.warning("job receipts not taken back from %s (%s): they start empty", path, why)
        return None
    active = sum(1 for job in taken.jobs if job.active)
    log.info("took back %d job receipt(s) (%d running) from the previous daemon's %s", len(taken.jobs), active, path)
    return taken
