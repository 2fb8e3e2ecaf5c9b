"""One NVIDIA GPU as NVML's setters see it: its handle by PCI slot, and the answers that refuse a setting for good.

The power limit (power/nvml_cap.py) and the locked clocks (clock/nvml_clock.py) are NVML backends of one shape:
both find their GPU by the PCI slot the daemon keys on (NVML's bus id through ``nvml.normalise_bus_id``; NVML's
indices are not stable across driver loads), keep the handle, and read a setter's NVMLError the same way
(nvml.h): NO_PERMISSION (not root), NOT_SUPPORTED (not on this board) and INVALID_ARGUMENT (out of range) will
not go away, so the backend is unavailable; any other error may be gone on the next tick.
"""

from __future__ import annotations

from typing import Any, Literal

from gpuwatch.gpus.nvml import normalise_bus_id

Refusal = Literal["no permission", "not supported", "invalid argument"]
# nvml.h return codes (used when a module lacks the named constants).
_REFUSALS: dict[Refusal, tuple[str, int]] = {
    "no permission": ("NVML_ERROR_NO_PERMISSION", 4),
    "not supported": ("NVML_ERROR_NOT_SUPPORTED", 3),
    "invalid argument": ("NVML_ERROR_INVALID_ARGUMENT", 2),
}


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

    def refusal(self, exc: Exception) -> Refusal | None:
        """Which refusal for good ``exc`` (an NVMLError of a setter) is; None: one that may pass."""
        code = getattr(exc, "value", None)
        for refusal, (name, fallback) in _REFUSALS.items():
            if code == int(getattr(self.nvml, name, fallback)):
                return refusal
        return None
