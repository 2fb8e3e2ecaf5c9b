"""A trainer's output file (effects): size-capped and rotated, and a write that fails costs one log line.

The captured stdout/stderr of a run goes through one logger per log path into a RotatingFileHandler
(``log_max_bytes``, ``log_backups``). A full disk (or a removed directory) must not flood the daemon's
journal: logging's default answer to a failed write is a traceback on stderr for every line (a full disk
once put 301 of them, 6,727 lines, in the journal).

The file is in the trainer's directory, which its user owns (the heartbeat goes there): every open, the first
and each rotation's, goes through ``safefs.open_regular``, so a link, a FIFO, a hard link or a file of a
third user put in its place is refused, never written through as root (issue 46).
"""

from __future__ import annotations

import io
import logging
import logging.handlers
import os
import sys
from pathlib import Path

from gpuwatch.safefs import open_regular

log = logging.getLogger("gpuwatch.supervisor")


class OutputLog(logging.handlers.RotatingFileHandler):
    """The trainer's output file. A write that fails (a full disk, a removed directory) is counted and said
    once, in one line, never as logging's traceback per line (a full disk once put 301 of them, 6,727 lines,
    in the journal); one more line when writes work again. The output itself is lost meanwhile: the
    training goes on."""

    def __init__(self, path: Path, max_bytes: int, backups: int) -> None:
        # The log may be ours or belong to the directory's owner (the trainer's user), nobody else's.
        try:
            self._owners: tuple[int, ...] = (os.geteuid(), os.stat(path.parent).st_uid)
        except OSError:
            self._owners = (os.geteuid(),)
        super().__init__(path, maxBytes=max_bytes, backupCount=backups, encoding="utf-8")
        self.write_errors = 0  # lines lost since the file was opened
        self._failing = False

    def _open(self) -> io.TextIOWrapper:
        """logging's open, refusing what may not be appended to as root (a rotation reopens through it)."""
        fd = open_regular(self.baseFilename, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644, owners=self._owners)
        return os.fdopen(fd, "a", encoding=self.encoding, errors=self.errors)

    def emit(self, record: logging.LogRecord) -> None:
        lost = self.write_errors
        super().emit(record)  # calls handleError on a failure
        if self._failing and self.write_errors == lost:
            self._failing = False
            log.warning("trainer log %s: writable again (%d line(s) lost)", self.baseFilename, self.write_errors)

    def close(self) -> None:
        try:
            super().close()  # flushes what a full disk held back: that can fail too (the handler is closed)
        except OSError as exc:
            self.write_errors += 1
            if not self._failing:
                log.error("trainer log %s: cannot write its last output (%s)", self.baseFilename, exc)

    def handleError(self, record: logging.LogRecord) -> None:
        """logging's default prints a traceback to stderr for every record; one line for the first instead."""
        self.write_errors += 1
        if not self._failing:
            self._failing = True
            error = sys.exc_info()[1]
            log.error("trainer log %s: cannot write (%s): its output is lost until writes work again; failed "
                      "writes are counted, not logged", self.baseFilename, error if error is not None else "?")


def file_logger(path: Path, max_bytes: int, backups: int) -> logging.Logger:
    path.parent.mkdir(parents=True, exist_ok=True)
    logger = logging.getLogger(f"gpuwatch.trainer-output.{path}")
    logger.propagate = False
    logger.setLevel(logging.INFO)
    for handler in list(logger.handlers):
        handler.close()
        logger.removeHandler(handler)
    handler = OutputLog(path, max_bytes, backups)
    handler.setFormatter(logging.Formatter("%(message)s"))
    logger.addHandler(handler)
    return logger
