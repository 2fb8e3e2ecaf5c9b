"""What a held job says in its own output (pure): one line when held, one when released, one when stale.

Issue 38: a job held by its pause file printed nothing, and when whoever made the file was gone (the
daemon killed) it stalled without a word. Rank 0 of a job (or the single process) now prints who asks
and why and how the hold ends, then how long it lasted; and once, when the pause file has not been
refreshed for ``heartbeat.PAUSE_STALE_S`` (the daemon touches it every ``PAUSE_REFRESH_S`` while it
asks), that whoever asked is gone and how to go on. The lines are built here from the caller's
readings (``now`` included); ``hooks.py`` and ``job.py`` print them.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field

from gpuwatch.heartbeat import PAUSE_STALE_S

PREFIX = "gpuwatch: "


@dataclass
class HoldNotice:
    pause_file: str | os.PathLike[str] | None
    step: int
    started_s: float  # monotonic
    stale_said: bool = field(default=False)  # this process found its pause file stale (said or told the job)
    stale_printed: bool = field(default=False)  # rank 0 printed the job's stale line

    def held(self, paused_by: str) -> str:
        """One short line: who asks and why, and how it ends. The pause file's path is for the stale line, the
        one case where the user may have to act on it (it made this line 300 characters long)."""
        return (f"{PREFIX}training held at step {self.step} by {paused_by}; it goes on when the daemon resumes it "
                "(`gpuwatch resume NAME` ends a manual pause)")

    def released(self, now_s: float) -> str:
        return f"{PREFIX}training released after {now_s - self.started_s:.1f} s held, at step {self.step}"

    def stale(self, age_s: float | None, where: str = "") -> str | None:
        """The stale line, once per hold, when the pause file is ``PAUSE_STALE_S`` old or older."""
        if self.stale_said or age_s is None or age_s < PAUSE_STALE_S:
            return None
        self.stale_said = True
        return stale_line(self.pause_file, age_s, where)


def stale_line(pause_file: str | os.PathLike[str] | None, age_s: float, where: str = "") -> str:
    place = f" on {where}" if where else ""
    return (f"{PREFIX}the pause file {pause_file}{place} has not been refreshed for {age_s:.0f} s: whoever asked "
            f"for the pause is gone (the daemon stopped?); the training stays held until the file is removed")


def say(line: str | None) -> None:
    if line is not None:
        print(line, file=sys.stderr, flush=True)
