"""NVML's locked graphics clocks as a ceiling backend (NVIDIA GPUs; tested against a stand-in of pynvml only).

NVML facts (nvml.h): ``nvmlDeviceSetGpuLockedClocks(handle, minMHz, maxMHz)`` keeps the graphics clock within
[min, max] (Volta and newer, root only: NO_PERMISSION otherwise, NOT_SUPPORTED on older boards);
``nvmlDeviceResetGpuLockedClocks(handle)`` gives the clocks back to the driver. The range comes from the
supported graphics clocks at the highest memory clock (``nvmlDeviceGetSupportedMemoryClocks``,
``nvmlDeviceGetSupportedGraphicsClocks``). NVML has no getter for a lock that is set, so the write is
verified by NVML's answer alone, and the original is "no lock": the record's give-back is the reset (a lock
another tool set before gpuwatch took the card cannot be seen, and is not restored: docs/power.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from gpuwatch.clock.backend import ClockRange, ClockRecord, ClockUnavailable, ClockWriteError
from gpuwatch.gpus.nvml import normalise_bus_id
from gpuwatch.model import ClockBackendName

_NOT_SUPPORTED, _NO_PERMISSION, _INVALID_ARGUMENT = 3, 4, 2


@dataclass(frozen=True)
class NvmlClockRestore:
    """The graphics clock's top found before the first lock (what the reset gives back)."""

    backend: ClassVar[str] = "nvml"
    max_mhz: int | None

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> NvmlClockRestore:
        top = data.get("max_mhz")
        return cls(top if isinstance(top, int) and top > 0 else None)

    def to_json(self) -> dict[str, Any]:
        return {"backend": self.backend, "max_mhz": self.max_mhz}

    @property
    def original_mhz(self) -> float | None:
        return None if self.max_mhz is None else float(self.max_mhz)

    def handed_back(self) -> str:
        return "graphics clocks unlocked (nvmlDeviceResetGpuLockedClocks)"


class NvmlClock:
    name: ClockBackendName = "nvml"

    def __init__(self, nvml: Any, gpu_id: str) -> None:
        self.nvml = nvml
        self.gpu_id = gpu_id
        self._handle: Any = None
        self.found: ClockRange | None = None
        self.written_mhz: float | None = None

    def handle(self) -> Any:
        if self._handle is None:
            for index in range(int(self.nvml.nvmlDeviceGetCount())):
                handle = self.nvml.nvmlDeviceGetHandleByIndex(index)
                bus = self.nvml.nvmlDeviceGetPciInfo(handle).busId
                if normalise_bus_id(bus.decode() if isinstance(bus, bytes) else str(bus)) == self.gpu_id:
                    self._handle = handle
                    break
            else:
                raise ClockWriteError(f"NVML has no GPU at {self.gpu_id}")
        return self._handle

    def probe(self) -> ClockRange:
        try:
            handle = self.handle()
            memory = max(self.nvml.nvmlDeviceGetSupportedMemoryClocks(handle))
            clocks = sorted(self.nvml.nvmlDeviceGetSupportedGraphicsClocks(handle, memory))
        except (self.nvml.NVMLError, ClockWriteError, ValueError) as exc:
            raise ClockUnavailable(f"NVML graphics clocks unreadable: {exc}") from None
        if len(clocks) < 2:
            raise ClockUnavailable("NVML lists fewer than two graphics clocks")
        self.found = ClockRange(original_mhz=float(clocks[-1]), min_mhz=float(clocks[0]))
        return self.found

    def current_mhz(self) -> float | None:
        if self.found is None:
            return None
        return self.written_mhz if self.written_mhz is not None else self.found.original_mhz

    def write(self, ceiling_mhz: float) -> float:
        assert self.found is not None, "probe before write"
        try:
            if ceiling_mhz >= self.found.original_mhz:
                self.nvml.nvmlDeviceResetGpuLockedClocks(self.handle())
                self.written_mhz = None
                return self.found.original_mhz
            self.nvml.nvmlDeviceSetGpuLockedClocks(self.handle(), round(self.found.min_mhz), round(ceiling_mhz))
        except self.nvml.NVMLError as exc:
            code = getattr(exc, "value", None)
            if code in (self._code("NVML_ERROR_NO_PERMISSION", _NO_PERMISSION),
                        self._code("NVML_ERROR_NOT_SUPPORTED", _NOT_SUPPORTED),
                        self._code("NVML_ERROR_INVALID_ARGUMENT", _INVALID_ARGUMENT)):
                raise ClockUnavailable(f"NVML refuses locked clocks: {exc}") from None
            raise ClockWriteError(f"NVML locked clocks failed: {exc}") from None
        self.written_mhz = float(round(ceiling_mhz))
        return self.written_mhz

    def record(self) -> NvmlClockRestore:
        assert self.found is not None, "probe before record"
        return NvmlClockRestore(round(self.found.original_mhz))

    def give_back(self, record: ClockRecord) -> None:
        try:
            self.nvml.nvmlDeviceResetGpuLockedClocks(self.handle())
        except self.nvml.NVMLError as exc:
            raise ClockWriteError(f"NVML locked clocks not reset: {exc}") from None
        self.written_mhz = None

    def _code(self, name: str, fallback: int) -> int:
        return int(getattr(self.nvml, name, fallback))
