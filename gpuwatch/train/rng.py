"""Leave the script's random streams as they were: a context that saves and restores every generator.

A seeded script must compute exactly what it computes without gpuwatch (issue 32: the conv2d
probe's ``torch.randn`` at the first convolution moved the global generator, and a seeded run's
loss at step 10 went from 2.163 to 2.256). Whatever gpuwatch runs inside the script's process
(the fallback probe, the autotuner's trials) runs inside ``untouched_rng()``: torch's CPU generator,
every initialised CUDA/ROCm device's generator, Python's ``random`` and NumPy's global state when
the script imported NumPy (it is never imported here).
"""

from __future__ import annotations

import random
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch


@contextmanager
def untouched_rng() -> Iterator[None]:
    cpu = torch.random.get_rng_state()
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None
    python = random.getstate()
    numpy: Any = sys.modules.get("numpy")
    numpy_state = numpy.random.get_state() if numpy is not None else None
    try:
        yield
    finally:
        torch.random.set_rng_state(cpu)
        if cuda is not None:
            torch.cuda.set_rng_state_all(cuda)
        random.setstate(python)
        if numpy is not None:
            numpy.random.set_state(numpy_state)
