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

from gpuwatch.actuation.setting import SettingUnavailable, SettingWriteError
from gpuwatch.clock.backend import ClockRange, ClockRecord
from gpuwatch.gpus.nvml_device import NvmlDevice
from gpuwatch.model import ClockBackendName


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


class NvmlClock(NvmlDevice):
    name: ClockBackendName = "nvml"
    no_gpu = SettingWriteError

    def __init__(self, nvml: Any, gpu_id: str) -> None:
        super().__init__(nvml, gpu_id)
        self.found: ClockRange | None = None
        self.written_mhz: float | None = None

    def probe(self) -> ClockRange:
        try:
            handle = self.handle()
            memory = max(self.nvml.nvmlDeviceGetSupportedMemoryClocks(handle))
            clocks = sorted(self.nvml.nvmlDeviceGetSupportedGraphicsClocks(handle, memory))
        except (self.nvml.NVMLError, SettingWriteError, ValueError) as exc:
            raise SettingUnavailable(f"NVML graphics clocks unreadable: {exc}") from None
        if len(clocks) < 2:
            raise SettingUnavailable("NVML lists fewer than two graphics clocks")
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
            if self.refusal(exc):
                raise SettingUnavailable(f"NVML refuses locked clocks: {exc}") from None
            raise SettingWriteError(f"NVML locked clocks failed: {exc}") from None
        self.written_mhz = float(round(ceiling_mhz))
        return self.written_mhz

    def record(self) -> NvmlClockRestore:
        assert self.found is not None, "probe before record"
        return NvmlClockRestore(round(self.found.original_mhz))

    def give_back(self, record: ClockRecord) -> None:
        try:
            self.nvml.nvmlDeviceResetGpuLockedClocks(self.handle())
        except self.nvml.NVMLError as exc:
            raise SettingWriteError(f"NVML locked clocks not reset: {exc}") from None
        self.written_mhz = None
