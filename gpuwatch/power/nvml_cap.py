"""NVML's power management limit as a cap backend (NVIDIA GPUs; tested against a stand-in of pynvml only).

NVML facts (nvml.h; read on an H100, docs/nvidia.md), all in milliwatts:

* ``nvmlDeviceGetPowerManagementLimit``: the limit that is *set*. That is the one found at start and
  restored. ``nvmlDeviceGetEnforcedPowerLimit`` (what the sampler publishes as ``power_cap_w``) is the
  effective limit after every limiter, out-of-band ones included: restoring it could make a temporary
  BMC limit permanent.
* ``nvmlDeviceGetPowerManagementLimitConstraints`` -> (min, max); ``...DefaultLimit``.
* ``nvmlDeviceSetPowerManagementLimit(handle, mW)`` needs root: others get NO_PERMISSION; INVALID_ARGUMENT
  out of range; NOT_SUPPORTED on boards without it. All three mean the governor is unavailable there.
* The limit does not survive a reboot or a driver unload, but it does survive the daemon: after a crash
  ``gpuwatch restore`` puts the original back from the restore file.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from gpuwatch.actuation.setting import SettingUnavailable, SettingWriteError
from gpuwatch.gpus.nvml_device import NvmlDevice
from gpuwatch.model import GpuReading, PowerCapBackendName
from gpuwatch.power.backend import CapRange

MW_PER_W = 1000


@dataclass(frozen=True)
class NvmlCapRestore:
    """The power management limit found before the first write (the set one, not the enforced one)."""

    backend: ClassVar[str] = "nvml"
    limit_mw: int | None

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> NvmlCapRestore:
        limit = data.get("limit_mw")
        return cls(limit if isinstance(limit, int) and limit > 0 else None)

    def to_json(self) -> dict[str, Any]:
        return {"backend": self.backend, "limit_mw": self.limit_mw}

    @property
    def original_w(self) -> float | None:
        return None if self.limit_mw is None else self.limit_mw / MW_PER_W

    def handed_back(self) -> str:
        return f"power cap back to its original {self.original_w:g} W"


class NvmlCap(NvmlDevice):
    name: PowerCapBackendName = "nvml"
    cap_in_reading = False  # the reading has the enforced limit; the set one is asked of NVML
    no_gpu = SettingWriteError

    def probe(self) -> CapRange:
        try:
            handle = self.handle()
            limit_mw = self.nvml.nvmlDeviceGetPowerManagementLimit(handle)
            low_mw, high_mw = self.nvml.nvmlDeviceGetPowerManagementLimitConstraints(handle)
            default_mw = self.nvml.nvmlDeviceGetPowerManagementDefaultLimit(handle)
        except (self.nvml.NVMLError, SettingWriteError) as exc:
            raise SettingUnavailable(f"NVML power limit unreadable: {exc}") from None
        return CapRange(cap_w=limit_mw / MW_PER_W, min_w=low_mw / MW_PER_W, max_w=high_mw / MW_PER_W,
                        default_w=default_mw / MW_PER_W)

    def current_w(self, gpu: GpuReading) -> float | None:
        try:
            return float(self.nvml.nvmlDeviceGetPowerManagementLimit(self.handle())) / MW_PER_W
        except (self.nvml.NVMLError, SettingWriteError):
            return None

    def write(self, cap_w: float) -> float:
        handle = self.handle()
        try:
            self.nvml.nvmlDeviceSetPowerManagementLimit(handle, round(cap_w * MW_PER_W))
        except self.nvml.NVMLError as exc:
            refusal = self.refusal(exc)
            if refusal:
                hint = " (setting it needs root)" if refusal == "NVML_ERROR_NO_PERMISSION" else ""
                raise SettingUnavailable(f"NVML refuses the power limit: {exc}{hint}") from None
            raise SettingWriteError(f"NVML power limit write failed: {exc}") from None
        try:
            return float(self.nvml.nvmlDeviceGetPowerManagementLimit(handle)) / MW_PER_W
        except self.nvml.NVMLError as exc:
            raise SettingWriteError(f"NVML power limit unreadable after the write: {exc}") from None

    def record(self, original_w: float) -> NvmlCapRestore:
        return NvmlCapRestore(round(original_w * MW_PER_W))
