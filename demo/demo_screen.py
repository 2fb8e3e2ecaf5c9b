"""The layout of `make run`'s live screen (pure): which rows one redraw shows in a terminal of a given size.

Nothing is left to the terminal's own wrapping, which breaks a line at the last column, mid-word, and
pushes the rows below it (and at the bottom, the fixed header above it) out of place. Every row fits:

* the fixed header (what the demo is, where /metrics is, the commands to try) stays on top, each of its
  lines cut to the width (it is written to fit 80 columns from the checkout);
* a status line too wide is wrapped at a space, its continuation indented; when the wrapped status does
  not fit the rows left, every status line is cut to one row instead ("…" where it was cut); when even
  that does not fit (``--simulate 2`` at 80x24), the GPU blocks' least telling lines (the static limits,
  VRAM, busy...) are left out, and one row says how many and where to see them all;
* the newest daemon log lines take the rows that are left, each cut to one row (the whole log is in the
  daemon log file).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

ELLIPSIS = "…"
ANSI = re.compile(r"\033\[[0-9;]*m")
RESET = "\033[0m"
LOG_TITLE = "-- daemon log --"
# The GPU block's lines left out first when two cards do not fit (gpuwatch/cli/gpu_block.py's labels):
# the limits do not change while it runs, and the temperatures, fan and control lines tell the story.
DROP_ORDER = ("limit", "vram", "busy", "ctrl", "power", "fan")


@dataclass(frozen=True)
class Status:
    """`gpuwatch status`'s text, in its parts: the header line, one block per GPU, the rest (trainers)."""

    head: list[str]
    gpus: list[list[str]] = field(default_factory=list)
    rest: list[str] = field(default_factory=list)


def split_status(text: str, block_sizes: Sequence[int]) -> Status:
    """``render``'s text, cut into its parts; ``block_sizes``: how many lines each GPU's block has."""
    lines = text.rstrip("\n").splitlines()
    blocks, at = [], 1
    for size in block_sizes:
        blocks.append(lines[at:at + size])
        at += size
    return Status(head=lines[:1], gpus=blocks, rest=lines[at:])


def width(text: str) -> int:
    return len(ANSI.sub("", text))


def cut(row: str, columns: int) -> str:
    """``row`` in one row of ``columns``: as it is when it fits, else cut with "…" (colours closed)."""
    if width(row) <= columns:
        return row
    out, room = [], max(0, columns - 1)
    for token in re.split(f"({ANSI.pattern})", row):
        if ANSI.fullmatch(token):
            out.append(token)
        else:
            out.append(token[:room])
            room -= len(out[-1])
    return "".join(out) + (ELLIPSIS if columns > 0 else "") + (RESET if ANSI.search(row) else "")


def wrap(row: str, columns: int, indent: int = 4) -> list[str]:
    """``row`` wrapped at its spaces into rows of ``columns``, continuations indented ``indent`` more than
    the row; a word wider than a row is cut."""
    lead = len(row) - len(row.lstrip(" "))
    pad = " " * min(lead + indent, columns // 2)
    rows: list[str] = []
    current = row[:lead]
    for space, word in re.findall(r"(\s*)(\S+)", row[lead:]):
        if width(current) + len(space) + width(word) <= columns:
            current += space + word
        elif width(current) <= len(pad) and not current.strip():
            current = cut(current + word, columns)
        else:
            rows.append(current)
            current = cut(pad + word, columns)
    rows.append(current)
    return rows


def screen(top: list[str], status: Status, log: list[str], columns: int, lines: int) -> list[str]:
    """The rows of one redraw: never more than ``lines``, none wider than ``columns``."""
    rows = [cut(row, columns) for row in top]
    room = lines - len(rows)
    body = _body(status, lambda row: wrap(row, columns))
    if len(body) > room:
        body = _body(status, lambda row: [cut(row, columns)])
    if len(body) > room:
        body = _compact(status, columns, room)
    rows += body
    left = lines - len(rows) - 1  # one row for the log's title
    if left > 0 and log:
        rows += [LOG_TITLE, *(cut(line, columns) for line in log[-left:])]
    return rows[:lines]


def _body(status: Status, fit: Callable[[str], list[str]], gpus: list[list[str]] | None = None) -> list[str]:
    lines = [*status.head, *(line for block in (status.gpus if gpus is None else gpus) for line in block),
             *status.rest]
    return [row for line in lines for row in fit(line)]


def _compact(status: Status, columns: int, room: int) -> list[str]:
    """One row per line, the GPU blocks' lines of ``DROP_ORDER`` left out (in that order, from every
    block) until the status and one row saying so fit ``room``."""
    blocks = [list(block) for block in status.gpus]
    total = sum(len(block) for block in blocks)
    for label in DROP_ORDER:
        blocks = [[line for line in block if _label(line) != label] for block in blocks]
        if len(_body(status, lambda row: [row], blocks)) + 1 <= room:
            break
    left_out = total - sum(len(block) for block in blocks)
    body = [cut(row, columns) for row in _body(status, lambda row: [row], blocks)]
    note = cut(f"  ({left_out} status lines left out to fit the terminal; `gpuwatch status` shows all)", columns)
    if len(body) + 1 > room:  # a terminal too small for even that: the first rows, then the note
        body = body[:max(0, room - 1)]
    return [*body, note][:room] if room > 0 else []


def _label(line: str) -> str:
    words = ANSI.sub("", line).split()
    return words[0] if line.startswith("  ") and words else ""
