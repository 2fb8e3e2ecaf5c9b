"""The pieces of text every status view is made of (pure): the palette, N/A, percentages, units, sizes, durations."""

from __future__ import annotations

TYPE_CHECKING = False  # typing's import was a fifth of `gpuwatch pause`'s own time (issue 52): annotations only
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any, TypeAlias, TypeVar

    J = TypeVar("J")

RED, YELLOW, GREEN, BOLD, DIM, RESET = "\033[31m", "\033[33m", "\033[32m", "\033[1m", "\033[2m", "\033[0m"
NA = "N/A"

Paint: TypeAlias = "Callable[[str, str | None], str]"  # text, colour (None: plain) -> text


def safe(text: object) -> str:
    """A string someone else chose (a run's name, a reason, a job id, a command line, a process name), made safe
    for a terminal: every character that is not printable (ESC and the other C0/C1 controls, which would move
    the cursor, clear the screen or retitle the window; a lone surrogate, which a UTF-8 stdout cannot encode)
    written as its Python escape (``\\x1b``, ``\\ud800``). The one home: every renderer of such text uses it."""
    text = str(text)
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text)


def safe_strings(value: J) -> J:
    """A JSON document (a published state, a receipt) with every string in it (keys too) made ``safe``: what the
    text renderers print comes from documents any local user's run can put strings into."""
    result: Any
    if isinstance(value, str):
        result = safe(value)
    elif isinstance(value, dict):  # a number, a bool or None as it is, without a call (`status`'s time, issue 52)
        result = {safe(k) if isinstance(k, str) else k: v if type(v) in _PLAIN else safe_strings(v)
                  for k, v in value.items()}
    elif isinstance(value, list):
        result = [v if type(v) in _PLAIN else safe_strings(v) for v in value]
    else:
        result = value
    return result  # type: ignore[no-any-return]


_PLAIN = frozenset((int, float, bool, type(None)))


def painter(color: bool) -> Paint:
    """The one colour switch: the CLI decides it (a TTY, --color), the renderers only name colours."""
    def paint(text: str, code: str | None) -> str:
        return f"{code}{text}{RESET}" if color and code else text

    return paint


def state_text(state: str | None) -> str:
    """A state (a fan's mode, a trainer's phase) as published: model's enums are ``str`` ones, whose ``str()`` is
    ``FanMode.CURVE``; the light view (publish/light_view.py) holds the plain value. N/A: an older or partial
    document (None)."""
    return NA if state is None else str.__str__(state)


def pct(ratio: float | None) -> str:
    return NA if ratio is None else f"{ratio * 100:.0f}%"


def num(value: float | None, unit: str, digits: int = 0) -> str:
    return NA if value is None else f"{value:.{digits}f} {unit}".replace(" °C", "°C")


def energy(joules: float | None) -> str:
    """`  energy 0.012 kWh`, or nothing where no energy is known (a suffix for a line)."""
    if joules is None:
        return ""
    kwh = joules / 3.6e6
    return f"  energy {'<0.001' if 0 < kwh < 0.001 else f'{kwh:.3f}'} kWh"


def mhz(hz: float | None) -> float | None:
    return None if hz is None else hz / 1e6


def size(value: int | None) -> str:
    """Bytes as GiB from 1 GiB up, else MiB."""
    if value is None:
        return NA
    if value >= 1 << 30:
        return f"{value / (1 << 30):.1f} GiB"
    return f"{value / (1 << 20):.0f} MiB"


def duration(seconds: float) -> str:
    """The two largest units only (`2d03h`, `1h05m`, `4m09s`): the lines stay short."""
    seconds = max(0, int(seconds))
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d{hours:02d}h"
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{secs:02d}s"
