"""The interface every GPU backend (amdgpu, nvml, simulated) offers the sampler."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from gpuwatch.model import GpuReading, UnsupportedCard

C = TypeVar("C")


@dataclass(frozen=True)
class DiscoveryResult(Generic[C]):
    """Cards a backend can read, and cards it found but will not read."""

    cards: tuple[C, ...]
    unsupported: tuple[UnsupportedCard, ...] = ()


class GpuBackend(Protocol):
    """Reads every GPU it knows once. Must not raise for a single GPU's trouble."""

    name: str

    def read_all(self) -> tuple[list[GpuReading], list[UnsupportedCard]]: ...
