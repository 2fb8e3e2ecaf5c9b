"""The one way tests wait for something another process or thread does: poll, bounded in time."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_for(
    check: Callable[[], T],
    what: str = "the condition",
    timeout_s: float = 10.0,
    *,
    interval_s: float = 0.05,
    ignore: tuple[type[Exception], ...] = (),
    detail: Callable[[], str] | None = None,
) -> T:
    """Call ``check`` until it returns something truthy and return that; fail after ``timeout_s``.

    Exceptions of the ``ignore`` types count as "not yet" (a file half written, a port not open yet);
    ``detail`` adds context to the failure (a log's tail, the last state seen).
    """
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            value = check()
        except ignore:
            pass
        else:
            if value:
                return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout_s:g}s waiting for {what}"
                                 + (f"\n{detail()}" if detail else ""))
        time.sleep(interval_s)
