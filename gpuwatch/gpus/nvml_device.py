"""One NVIDIA GPU as NVML's setters see it (power/nvml_cap.py, clock/nvml_clock.py): its handle by PCI slot,
the daemon's key (NVML's bus id through ``nvml.normalise_bus_id``), and the NVMLErrors that refuse a setting for
good (nvml.h): NO_PERMISSION (not root), NOT_SUPPORTED (not on this board), INVALID_ARGUMENT (out of range).
"""

from __future__ import annotations

from typing import Any

from gpuwatch.gpus.nvml import normalise_bus_id

# The NVML_ERROR_* names of a refusal for good, and nvml.h's codes for a module that lacks the constants.
REFUSALS = {"NVML_ERROR_NO_PERMISSION": 4, "NVML_ERROR_NOT_SUPPORTED": 3, "NVML_ERROR_INVALID_ARGUMENT": 2}


class NvmlDevice:
    """The GPU at ``gpu_id`` in ``nvml`` (an initialised pynvml module, or a stand-in of it)."""

    # What ``handle`` raises when NVML has no GPU at the slot (each backend's own "try again" error).
    no_gpu: type[Exception] = LookupError

    def __init__(self, nvml: Any, gpu_id: str) -> None:
        self.nvml = nvml
        self.gpu_id = gpu_id
        self._handle: Any = None

    def handle(self) -> Any:
        """The NVML handle of this PCI slot (looked up by bus id, then kept)."""
        if self._handle is None:
            for index in range(int(self.nvml.nvmlDeviceGetCount())):
                handle = self.nvml.nvmlDeviceGetHandleByIndex(index)
                bus = self.nvml.nvmlDeviceGetPciInfo(handle).busId
                if normalise_bus_id(bus.decode() if isinstance(bus, bytes) else str(bus)) == self.gpu_id:
                    self._handle = handle
                    break
            else:
                raise self.no_gpu(f"NVML has no GPU at {self.gpu_id}")
        return self._handle

    def refusal(self, exc: Exception) -> str | None:
        """The NVML_ERROR_* name of ``exc`` (a setter's NVMLError) when it refuses for good; None: it may pass."""
        code = getattr(exc, "value", None)
        for name, fallback in REFUSALS.items():
            if code == int(getattr(self.nvml, name, fallback)):
                return name
        return None
