"""NVIDIA backend (read-only): NVML via nvidia-ml-py's ``pynvml`` -> GpuReading, units converted once.

``pynvml`` is imported lazily and injected (``NvmlSource(nvml=fake)``) so tests run without a GPU and the
daemon runs without the extra installed. Choices a reader of the dashboards should know:

- Temperature: NVML exposes one GPU core temperature (the die's sensor, NVML_TEMPERATURE_GPU). It is
  published under the ``edge`` label because that is what it is closest to on amdgpu (the die's
  representative temperature, not the hotspot), and because thermal limits, status and the fan curve key
  on edge/junction/mem: ``thermal.edge_limit_c`` is the pause/alarm line for NVIDIA GPUs too. Its crit is
  the slowdown threshold (where the board starts throttling), emergency the shutdown threshold.
  HBM boards (A100/H100) also report a memory temperature, published as ``mem`` with crit from
  NVML_TEMPERATURE_THRESHOLD_MEM_MAX when the driver gives one.
- Identity is the PCI bus id normalised to the amdgpu form: NVML's ``00000000:28:00.0`` -> ``0000:28:00.0``.
- VRAM: used as nvidia-smi shows it, without the driver's reserved memory (reported apart), from the v2
  memory query where the driver has it (docs/nvidia.md).
- Fans: NVML reports a duty percent, not RPM or a pwm register, so it lands in ``fan_duty_ratio`` and
  ``pwm`` stays None; the fan controller drives amdgpu GPUs only (gpuwatch never changes NVIDIA fans).
  ``power_cap_w`` is the *enforced* limit; the power governor (gpuwatch/power/nvml_cap.py) reads and
  sets the limit that is *set*.
- An NVML call that is "not supported" on this board gives None silently; any other NVML error is
  recorded in ``GpuReading.errors`` under the field's name. A lost GPU reads as ``up=False``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, TypeVar

from gpuwatch.config.slots import canonical_pci_slot
from gpuwatch.model import GpuReading, ReadError, SourceName, TempReading, UnsupportedCard

log = logging.getLogger("gpuwatch.nvml")  # the name log lines had before the move to gpus/
T = TypeVar("T")

# PCIe generation -> per-lane transfer rate, the unit amdgpu's current_link_speed uses.
_GEN_GTS = {1: 2.5, 2: 5.0, 3: 8.0, 4: 16.0, 5: 32.0, 6: 64.0}
# nvml.h error codes, used when a (fake or old) module lacks the named constants.
_NOT_SUPPORTED, _FUNCTION_NOT_FOUND, _GPU_IS_LOST = 3, 13, 15
_FI_DEV_MEMORY_TEMP = 82
_THRESHOLD_MEM_MAX = 2  # nvidia-ml-py: NVML_TEMPERATURE_THRESHOLD_MEM_MAX = 2 (5 is ACOUSTIC_CURR)


class NvmlUnavailable(Exception):
    """pynvml is not installed or NVML cannot be initialised (no driver, no GPU)."""


@dataclass
class _Fields:
    """Collects the NVML calls of one GPU; errors other than "not supported" are recorded."""

    nvml: Any
    errors: list[ReadError] = field(default_factory=list)
    lost: bool = False

    def get(self, sensor: str, call: Callable[[], T]) -> T | None:
        if self.lost:
            return None
        try:
            return call()
        except self.nvml.NVMLError as exc:
            code = getattr(exc, "value", None)
            if code in (_const(self.nvml, "NVML_ERROR_NOT_SUPPORTED", _NOT_SUPPORTED),
                        _const(self.nvml, "NVML_ERROR_FUNCTION_NOT_FOUND", _FUNCTION_NOT_FOUND)):
                return None
            if code == _const(self.nvml, "NVML_ERROR_GPU_IS_LOST", _GPU_IS_LOST):
                self.lost = True
            self.errors.append(ReadError(sensor=sensor, error=_text(str(exc)) or type(exc).__name__))
            return None


class NvmlSource:
    """Every NVIDIA GPU NVML can see, read once per tick. Raises NvmlUnavailable from the constructor."""

    name: SourceName = "nvml"

    def __init__(self, nvml: ModuleType | Any | None = None) -> None:
        self.nvml: Any = _pynvml() if nvml is None else nvml
        try:
            self.nvml.nvmlInit()
        except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
            raise NvmlUnavailable(f"NVML cannot be initialised: {_text(str(exc)) or type(exc).__name__}") from None
        # Identity of every index seen, so a GPU that stops answering stays visible as down.
        self._known: dict[int, GpuReading] = {}

    def read_all(self) -> tuple[list[GpuReading], list[UnsupportedCard]]:
        try:
            count = int(self.nvml.nvmlDeviceGetCount())
        except self.nvml.NVMLError as exc:
            log.warning("NVML device count failed: %s", exc)
            return [r.gone(f"device count failed: {exc}") for r in self._known.values()], []
        readings = []
        for index in range(count):
            reading = self._read_index(index)
            if reading is not None:
                readings.append(reading)
        return readings, []

    def close(self) -> None:
        try:
            self.nvml.nvmlShutdown()
        except Exception:  # shutting down anyway
            pass

    def _read_index(self, index: int) -> GpuReading | None:
        try:
            handle = self.nvml.nvmlDeviceGetHandleByIndex(index)
        except self.nvml.NVMLError as exc:
            last = self._known.get(index)
            if last is None:
                log.warning("NVIDIA GPU %d cannot be opened: %s", index, exc)
                return None
            return last.gone(f"cannot open: {_text(str(exc))}")
        reading = read_gpu(self.nvml, handle, index)
        if reading.up:
            self._known[index] = reading
        return reading


def _pynvml() -> Any:
    """nvidia-ml-py's module, imported only when NVML is wanted (the extra is optional)."""
    try:
        import pynvml
    except ImportError as exc:
        raise NvmlUnavailable(f"pynvml not installed (pip install 'gpuwatch[nvidia]'): {exc}") from None
    return pynvml


def read_gpu(nvml: Any, handle: Any, index: int) -> GpuReading:
    """One full reading of one GPU; never raises for an NVML error, it records it instead."""
    f = _Fields(nvml)
    pci = f.get("pci", lambda: nvml.nvmlDeviceGetPciInfo(handle))
    gpu_id = normalise_bus_id(_text(getattr(pci, "busId", None))) if pci is not None else None
    identity: dict[str, Any] = dict(
        gpu_id=gpu_id or f"nvml{index}",
        card=f"nvidia{index}",
        backend="nvml",
        name=_text(f.get("name", lambda: nvml.nvmlDeviceGetName(handle))),
        device_id=_pci_pair(getattr(pci, "pciDeviceId", None)),
        subsystem_id=_pci_pair(getattr(pci, "pciSubSystemId", None)),
        unique_id=_text(f.get("uuid", lambda: nvml.nvmlDeviceGetUUID(handle))),
        vbios_version=_text(f.get("vbios", lambda: nvml.nvmlDeviceGetVbiosVersion(handle))),
    )
    util = f.get("utilization", lambda: nvml.nvmlDeviceGetUtilizationRates(handle))
    memory = _memory(nvml, handle, f)
    limits = f.get("power_limits", lambda: nvml.nvmlDeviceGetPowerManagementLimitConstraints(handle))
    fan_pct = f.get("fan", lambda: nvml.nvmlDeviceGetFanSpeed(handle))
    gen = f.get("pcie_gen", lambda: nvml.nvmlDeviceGetCurrPcieLinkGeneration(handle))
    max_gen = f.get("pcie_max_gen", lambda: nvml.nvmlDeviceGetMaxPcieLinkGeneration(handle))
    reading = GpuReading(
        **identity,
        temps=_temps(nvml, handle, f),
        gpu_busy_ratio=_ratio(getattr(util, "gpu", None)),
        mem_busy_ratio=_ratio(getattr(util, "memory", None)),
        vram_used_bytes=getattr(memory, "used", None),
        vram_total_bytes=getattr(memory, "total", None),
        vram_reserved_bytes=getattr(memory, "reserved", None),
        power_w=_watts(f.get("power", lambda: nvml.nvmlDeviceGetPowerUsage(handle))),
        power_cap_w=_watts(f.get("power_cap", lambda: nvml.nvmlDeviceGetEnforcedPowerLimit(handle))),
        power_cap_min_w=_watts(limits[0]) if limits else None,
        power_cap_max_w=_watts(limits[1]) if limits else None,
        power_cap_default_w=_watts(
            f.get("power_cap_default", lambda: nvml.nvmlDeviceGetPowerManagementDefaultLimit(handle))),
        sclk_hz=_hz(
            f.get("sclk", lambda: nvml.nvmlDeviceGetClockInfo(handle, _const(nvml, "NVML_CLOCK_GRAPHICS", 0)))),
        mclk_hz=_hz(f.get("mclk", lambda: nvml.nvmlDeviceGetClockInfo(handle, _const(nvml, "NVML_CLOCK_MEM", 2)))),
        fan_duty_ratio=_ratio(fan_pct),
        pcie_link_speed_gts=_GEN_GTS.get(gen) if gen is not None else None,
        pcie_link_width=f.get("pcie_width", lambda: nvml.nvmlDeviceGetCurrPcieLinkWidth(handle)),
        pcie_max_link_speed_gts=_GEN_GTS.get(max_gen) if max_gen is not None else None,
        pcie_max_link_width=f.get("pcie_max_width", lambda: nvml.nvmlDeviceGetMaxPcieLinkWidth(handle)),
        # Keyword arguments are evaluated in order, so this sees every error recorded above.
        errors=tuple(f.errors),
    )
    if f.lost:
        return GpuReading(**identity, up=False, errors=tuple(f.errors))
    return reading


def normalise_bus_id(bus_id: str | None) -> str | None:
    """NVML's ``00000000:28:00.0`` (8-digit domain, upper case) -> sysfs/amdgpu's ``0000:28:00.0``, by the config's
    one slot rule (a VMD domain 00010000 keeps its digits: sysfs prints 10000:...); anything else as given."""
    if not bus_id:
        return None
    try:
        return canonical_pci_slot(bus_id)
    except ValueError:
        return bus_id.strip().lower()


def _temps(nvml: Any, handle: Any, f: _Fields) -> tuple[TempReading, ...]:
    def threshold(sensor: str, name: str, fallback: int) -> float | None:
        value = f.get(sensor, lambda: nvml.nvmlDeviceGetTemperatureThreshold(handle, _const(nvml, name, fallback)))
        return float(value) if value else None

    core = f.get("temp", lambda: nvml.nvmlDeviceGetTemperature(handle, _const(nvml, "NVML_TEMPERATURE_GPU", 0)))
    temps = [
        TempReading(
            label="edge",
            temp_c=None if core is None else float(core),
            crit_c=threshold("temp_slowdown", "NVML_TEMPERATURE_THRESHOLD_SLOWDOWN", 1),
            emergency_c=threshold("temp_shutdown", "NVML_TEMPERATURE_THRESHOLD_SHUTDOWN", 0),
        )
    ]
    mem = _memory_temp(nvml, handle, f)
    if mem is not None:
        temps.append(TempReading(
            label="mem", temp_c=mem,
            crit_c=threshold("mem_temp_max", "NVML_TEMPERATURE_THRESHOLD_MEM_MAX", _THRESHOLD_MEM_MAX),
        ))
    return tuple(temps)


def _memory(nvml: Any, handle: Any, f: _Fields) -> Any:
    """VRAM as nvidia-smi shows it: the v2 query reports the driver's own reservation apart (an idle
    H100: used 0, reserved 480 MiB), where v1 counts it as used. v1 where the driver or nvidia-ml-py
    has no v2 (an older pynvml takes no ``version``; an older driver answers with an NVML error)."""
    version = getattr(nvml, "nvmlMemory_v2", None)
    if version is not None:
        try:
            return nvml.nvmlDeviceGetMemoryInfo(handle, version=version)
        except (TypeError, nvml.NVMLError):
            pass
    return f.get("memory", lambda: nvml.nvmlDeviceGetMemoryInfo(handle))


def _memory_temp(nvml: Any, handle: Any, f: _Fields) -> float | None:
    """HBM temperature through the field-value API; GDDR boards answer NOT_SUPPORTED or 0."""
    if not hasattr(nvml, "nvmlDeviceGetFieldValues"):
        return None
    field_id = _const(nvml, "NVML_FI_DEV_MEMORY_TEMP", _FI_DEV_MEMORY_TEMP)
    values = f.get("mem_temp", lambda: nvml.nvmlDeviceGetFieldValues(handle, [field_id]))
    if not values:
        return None
    value = values[0]
    if getattr(value, "nvmlReturn", 0) != 0:
        return None
    raw = getattr(getattr(value, "value", None), "uiVal", None)
    return float(raw) if raw else None


def _const(nvml: Any, name: str, fallback: int) -> int:
    return int(getattr(nvml, name, fallback))


def _text(value: Any) -> str | None:
    """Old pynvml returns bytes, new returns str."""
    if value is None:
        return None
    if isinstance(value, bytes):
        value = value.decode(errors="replace")
    return str(value).strip() or None


def _pci_pair(packed: int | None) -> str | None:
    """NVML packs ``device << 16 | vendor``; amdgpu's uevent writes ``VENDOR:DEVICE``."""
    if not isinstance(packed, int) or packed <= 0:
        return None
    return f"{packed & 0xFFFF:04X}:{packed >> 16 & 0xFFFF:04X}"


def _ratio(percent: float | None) -> float | None:
    return None if percent is None else max(0.0, min(1.0, float(percent) / 100.0))


def _watts(milliwatts: float | None) -> float | None:
    return None if milliwatts is None else float(milliwatts) / 1000.0


def _hz(mhz: float | None) -> float | None:
    return None if mhz is None else float(mhz) * 1e6
