"""A stand-in for pyamdgpuinfo 2.1 (it needs /dev/dri and an amdgpu render node, which no test machine has).

Same API as the real module (``detect_gpus()``, ``get_gpu(i)``, GPUInfo's attributes and queries) and the
same failures: FileNotFoundError from ``detect_gpus`` without /dev/dri, ``RuntimeError("GPU id N not
found")``, ``RuntimeError`` from a query the driver refuses, ``RuntimeError`` from ``query_utilisation``
before polling started and while it warms up. Every call is recorded in ``calls``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

QUERY_FAILURE = "Unknown query failure (an AMDGPU call failed). This query may not be supported for this GPU"


@dataclass
class FakeGPUInfo:
    gpu_id: int
    pci_slot: str | None
    vram_used: int = 512 * 1024**2
    gtt_used: int = 64 * 1024**2
    load: float = 0.25
    graphics_pipe: float = 0.93
    memory_info: dict[str, int | None] = field(
        default_factory=lambda: {"vram_size": 512 * 1024**2, "gtt_size": 8 * 1024**3, "vram_cpu_accessible_size": 0})
    failing: set[str] = field(default_factory=set)  # query names that raise RuntimeError
    warmup_calls: int = 2  # query_utilisation raises this many times after polling starts
    calls: list[str] = field(default_factory=list)
    polling: bool = False

    @property
    def path(self) -> str:
        if self.pci_slot:
            return f"/dev/dri/by-path/pci-{self.pci_slot}-render"
        return f"/dev/dri/renderD{128 + self.gpu_id}"

    def _call(self, name: str) -> None:
        self.calls.append(name)
        if name in self.failing:
            raise RuntimeError(QUERY_FAILURE)

    def query_vram_usage(self) -> int:
        self._call("query_vram_usage")
        return self.vram_used

    def query_gtt_usage(self) -> int:
        self._call("query_gtt_usage")
        return self.gtt_used

    def query_load(self) -> float:
        self._call("query_load")
        return self.load

    def start_utilisation_polling(self, polls_per_second: int = 100, averaging_period: int = 100) -> None:
        self._call("start_utilisation_polling")
        if self.polling:
            raise RuntimeError("Utilisation polling already running")
        self.polling = True

    def stop_utilisation_polling(self) -> None:
        self.polling = False

    def query_utilisation(self) -> dict[str, float]:
        self._call("query_utilisation")
        if not self.polling:
            raise RuntimeError("Utilisation polling not running")
        if self.warmup_calls > 0:
            self.warmup_calls -= 1
            raise RuntimeError("Utilisation polling warming up")
        return {"graphics_pipe": self.graphics_pipe, "texture_addresser": 0.1}


class FakePyamdgpuinfo:
    """The module: ``gpus`` are what detect_gpus finds; ``detect_error`` what it raises instead."""

    def __init__(self, gpus: list[FakeGPUInfo] | None = None, detect_error: Exception | None = None,
                 missing: set[int] | None = None) -> None:
        self.gpus = gpus or []
        self.detect_error = detect_error
        self.missing = missing or set()  # indexes get_gpu refuses
        self.detect_calls = 0

    def detect_gpus(self) -> int:
        self.detect_calls += 1
        if self.detect_error is not None:
            raise self.detect_error
        return len(self.gpus)

    def get_gpu(self, gpu_id: int) -> Any:
        if gpu_id in self.missing or gpu_id >= len(self.gpus):
            raise RuntimeError(f"GPU id {gpu_id} not found")
        return self.gpus[gpu_id]
