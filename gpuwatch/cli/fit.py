"""A status line fitted to the terminal's width (pure but for ``terminal_width``): its fields, each with the rank at
which it goes when the line is too wide; what is still too wide is cut with "…". The trainers' lines of `gpuwatch
status` (cli/trainer_rows.py). Apart from cli/text.py, which every command loads at its start (issue 52): only a
status rendered as text needs this."""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from gpuwatch.cli.text import Paint

MIN_WIDTH = 40  # narrower than this, a line is cut rather than emptied of everything but its name


class Field:
    """A piece of a line, with its leading separator (``"  pid 4242"``). ``drop``: the order in which pieces go
    when the line is too wide, the highest first (0: never; the line is cut instead). A plain class: dataclasses'
    import alone is more than `gpuwatch status`'s budget over Python's start (issue 52)."""

    __slots__ = ("text", "drop", "colour")

    def __init__(self, text: str, drop: int = 0, colour: str | None = None) -> None:
        self.text, self.drop, self.colour = text, drop, colour


def terminal_width(environ: Mapping[str, str] | None = None, fd: int = 1) -> int | None:
    """The columns to fit a status to where ``fd`` is a terminal: ``COLUMNS`` where set, else the terminal's (as
    shutil.get_terminal_size reads them). None where it is not: a pipe or a file gets whole lines, as
    ``systemctl`` and ``ps`` give them (a script greps the user or the pid of a run), whatever ``COLUMNS`` says
    (GNU readline exports it into every child of an interactive Python, pytest's too)."""
    try:
        columns = os.get_terminal_size(fd).columns
    except OSError:  # ENOTTY: not a terminal
        return None
    try:
        return int((os.environ if environ is None else environ).get("COLUMNS", "")) or columns
    except ValueError:
        return columns or None


def fit(fields: Sequence[Field], width: int | None, paint: Paint) -> str:
    """The fields as one line of at most ``width`` columns (None: as wide as they are): the least important go
    first (the highest ``drop``; of equals, the first listed), then those gone that fit again come back, the most
    important first; what is left too wide is cut, ending in ``…``."""
    kept = [field for field in fields if field.text]
    if width is not None:
        width = max(width, MIN_WIDTH)
        by_drop = sorted(range(len(kept)), key=lambda index: -kept[index].drop)
        gone: set[int] = set()
        used = sum(len(field.text) for field in kept)
        for index in by_drop:
            if used <= width or kept[index].drop == 0:
                break
            gone.add(index)
            used -= len(kept[index].text)
        for index in reversed(by_drop):
            if index in gone and used + len(kept[index].text) <= width:
                gone.discard(index)
                used += len(kept[index].text)
        kept = [field for index, field in enumerate(kept) if index not in gone]
        if used > width:
            kept = _cut(kept, width)
    return "".join(paint(field.text, field.colour) if field.colour else field.text for field in kept)


def _cut(fields: list[Field], width: int) -> list[Field]:
    cut: list[Field] = []
    room = width
    for field in fields:
        if len(field.text) < room or (len(field.text) == room and field is fields[-1]):
            cut.append(field)
            room -= len(field.text)
            continue
        cut.append(Field(field.text[:room - 1] + "…", field.drop, field.colour))
        break
    return cut
