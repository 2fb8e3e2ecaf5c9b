"""The interface every GPU source (amdgpu, nvml, the simulator's) offers the sampler.

"Source" is the reader of GPUs; "backend" is kept for fan drivers (fan/backend.py). The source's
``name`` is what the readings publish as ``backend`` ("amdgpu", "nvml"): the JSON document's and
the metrics' field name, and the config key, stay as they were.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from gpuwatch.model import GpuReading, SourceName, UnsupportedCard

C = TypeVar("C")


@dataclass(frozen=True)
class DiscoveryResult(Generic[C]):
    """Cards a source can read, and cards it found but will not read."""

    cards: tuple[C, ...]
    unsupported: tuple[UnsupportedCard, ...] = ()


class GpuSource(Protocol):
    """Reads every GPU it knows once. Must not raise for a single GPU's trouble."""

    name: SourceName

    def read_all(self) -> tuple[list[GpuReading], list[UnsupportedCard]]: ...
