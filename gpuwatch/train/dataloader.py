"""ROCm-safe DataLoader defaults: the ``spawn`` start method and persistent workers.

Forked DataLoader workers inherit a half-initialised ROCm runtime from the parent and hang or
crash; spawned ones start clean. Persistent workers keep spawn's start-up cost (a fresh interpreter
importing torch) to once per run instead of once per epoch. Arguments the script passes itself win.
"""

from __future__ import annotations

import functools
import inspect
import multiprocessing
from collections.abc import Callable
from typing import Any

from torch.utils.data import DataLoader


def apply_spawn_defaults() -> Callable[[], None]:
    """Set the start method to spawn and patch DataLoader's defaults; returns the undo function.

    Call it before anything initialises CUDA/ROCm (the launcher does it before running the script).
    """
    previous_method = multiprocessing.get_start_method(allow_none=True)
    multiprocessing.set_start_method("spawn", force=True)
    original_init = DataLoader.__init__
    signature = inspect.signature(original_init)

    @functools.wraps(original_init)
    def init_with_spawn_defaults(self: DataLoader[Any], *args: Any, **kwargs: Any) -> None:
        try:
            bound = signature.bind(self, *args, **kwargs)
        except TypeError:  # let DataLoader report the bad call itself
            return original_init(self, *args, **kwargs)
        given = bound.arguments
        if (given.get("num_workers") or 0) > 0:
            if given.get("multiprocessing_context") is None:  # None is DataLoader's own default
                given["multiprocessing_context"] = "spawn"
            if "persistent_workers" not in given:
                given["persistent_workers"] = True
        original_init(*bound.args, **bound.kwargs)

    DataLoader.__init__ = init_with_spawn_defaults  # type: ignore[method-assign]

    def undo() -> None:
        DataLoader.__init__ = original_init  # type: ignore[method-assign]
        multiprocessing.set_start_method(previous_method, force=True)

    return undo
