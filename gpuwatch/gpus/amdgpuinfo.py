"""pyamdgpuinfo: what amdgpu's ioctls add to a sysfs reading (the optional extra ``gpuwatch[amdgpuinfo]``).

pyamdgpuinfo is GPL-3.0-only: gpuwatch (MIT) never bundles or requires it; it is imported only when
installed, and is then used for two things sysfs does not give everywhere:

* ``gpu_busy_sampled_ratio``: the graphics pipe's busy bit (GRBM_STATUS GUI_ACTIVE) sampled
  ``polls_per_second`` times a second by pyamdgpuinfo's own thread and averaged over about a
  second (``start_utilisation_polling``, ``query_utilisation()["graphics_pipe"]``): steadier than
  ``gpu_busy_percent``, which is the SMU's own short average.
* VRAM and GTT use and size through AMDGPU_INFO_* where the ``mem_info_*`` files are missing (APUs of
  some kernels, partial setups), and the SMU load where ``gpu_busy_percent`` is.

Merged into the same reading, every filled field named in ``sources`` as ``amdgpuinfo``; sysfs wins
where both exist. Off, logged once, the rest of gpuwatch unaffected: module not installed, no usable
render node (``/dev/dri`` missing, no permission: pyamdgpuinfo then lists no GPU), a render node
without a PCI path (it cannot be matched to a GPU by slot), a query that fails (that query, for that
GPU). Every query is an ioctl, which wakes a runtime-suspended GPU: a GPU that is not awake is not
queried, and the polling thread keeps its GPU awake, so ``polls_per_second = 0`` is for machines
whose GPUs should sleep.
"""

from __future__ import annotations

import importlib
import logging
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from gpuwatch.gpus.source import GpuSource
from gpuwatch.gpus.telemetry import AWAKE
from gpuwatch.model import GpuReading, SourceName, UnsupportedCard

log = logging.getLogger("gpuwatch.amdgpuinfo")
SOURCE = "amdgpuinfo"
WARMUP_SLACK_S = 2.0  # beyond its averaging window, how long the poller may still say "warming up"
_MEMORY = (("vram_used_bytes", "query_vram_usage"), ("gtt_used_bytes", "query_gtt_usage"))
_SIZES = (("vram_total_bytes", "vram_size"), ("gtt_total_bytes", "gtt_size"))


class AmdgpuInfo:
    """The pyamdgpuinfo GPUs by PCI slot, opened on first use; ``module`` injects a stand-in (tests)."""

    def __init__(self, module: Any | None = None, polls_per_second: int = 10,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._module = module
        self.polls_per_second = polls_per_second
        self._clock = clock
        self._gpus: dict[str, Any] | None = None
        self._polling_since: dict[str, float] = {}
        self.off: str | None = None  # why the whole source is off
        self.failed: dict[tuple[str, str], str] = {}  # (gpu_id, query) -> why it is off

    def merge(self, readings: list[GpuReading]) -> list[GpuReading]:
        gpus = self._open()
        return [self._merge(reading, gpus[reading.gpu_id]) if reading.gpu_id in gpus else reading
                for reading in readings]

    def _open(self) -> dict[str, Any]:
        if self._gpus is not None:
            return self._gpus
        self._gpus = {}
        try:
            module = self._module or importlib.import_module("pyamdgpuinfo")
            count = int(module.detect_gpus())
        except ImportError:
            self._turn_off("pyamdgpuinfo is not installed (pip install 'gpuwatch[amdgpuinfo]')")
            return self._gpus
        except Exception as exc:  # FileNotFoundError without /dev/dri, OSError from libdrm, ...
            self._turn_off(f"no usable render node: {type(exc).__name__}: {exc}")
            return self._gpus
        for index in range(count):
            try:
                gpu = module.get_gpu(index)
            except Exception as exc:
                log.info("pyamdgpuinfo GPU %d skipped: %s", index, exc)
                continue
            if not gpu.pci_slot:
                log.info("pyamdgpuinfo GPU %d (%s) has no PCI path: cannot match it to a GPU", index, gpu.path)
                continue
            self._gpus[gpu.pci_slot] = gpu
            self._start_polling(gpu)
        if not self._gpus:
            self._turn_off("pyamdgpuinfo found no amdgpu render node it may open")
        return self._gpus

    def _turn_off(self, why: str) -> None:
        self.off = why
        log.info("pyamdgpuinfo readings off: %s", why)

    def _start_polling(self, gpu: Any) -> None:
        if self.polls_per_second <= 0:
            return
        try:
            # averaging_period counts polls: one second's worth.
            gpu.start_utilisation_polling(self.polls_per_second, self.polls_per_second)
        except Exception as exc:
            self._fail(gpu.pci_slot, "start_utilisation_polling", exc)
            return
        self._polling_since[gpu.pci_slot] = self._clock()

    def _merge(self, reading: GpuReading, gpu: Any) -> GpuReading:
        if not reading.up or reading.runtime_status not in AWAKE:
            return reading
        fields: dict[str, Any] = {}
        since = self._polling_since.get(reading.gpu_id)
        if since is not None:
            load = self._query(reading.gpu_id, "query_utilisation", lambda: gpu.query_utilisation()["graphics_pipe"],
                               warming_up=self._clock() - since < 1.0 + WARMUP_SLACK_S)
            if load is not None:
                fields["gpu_busy_sampled_ratio"] = float(load)
        for attr, query in _MEMORY:
            if getattr(reading, attr) is None:
                fields[attr] = self._query(reading.gpu_id, query, getattr(gpu, query))
        sizes = gpu.memory_info or {}
        for attr, key in _SIZES:
            if getattr(reading, attr) is None and sizes.get(key) is not None:
                fields[attr] = int(sizes[key])
        if reading.gpu_busy_ratio is None:
            fields["gpu_busy_ratio"] = self._query(reading.gpu_id, "query_load", gpu.query_load)
        fields = {attr: value for attr, value in fields.items() if value is not None}
        if not fields:
            return reading
        # Sources name values that have a usual file; the sampled load has none.
        sources = dict(reading.sources) | {attr: SOURCE for attr in fields if attr != "gpu_busy_sampled_ratio"}
        return replace(reading, **fields, sources=tuple(sorted(sources.items())))

    def _query(self, gpu_id: str, name: str, call: Callable[[], Any], warming_up: bool = False) -> Any:
        if (gpu_id, name) in self.failed:
            return None
        try:
            return call()
        except Exception as exc:  # RuntimeError("Unknown query failure ..."), or the poller not ready yet
            if not warming_up:
                self._fail(gpu_id, name, exc)
            return None

    def _fail(self, gpu_id: str, name: str, exc: Exception) -> None:
        self.failed[(gpu_id, name)] = f"{type(exc).__name__}: {exc}"
        log.info("GPU %s: pyamdgpuinfo %s off: %s", gpu_id, name, self.failed[(gpu_id, name)])


class WithAmdgpuInfo:
    """A GpuSource: another source's (amdgpu's) readings with pyamdgpuinfo's merged in."""

    name: SourceName = "amdgpu"

    def __init__(self, inner: GpuSource, info: AmdgpuInfo) -> None:
        self.inner = inner
        self.info = info

    def read_all(self) -> tuple[list[GpuReading], list[UnsupportedCard]]:
        readings, unsupported = self.inner.read_all()
        return self.info.merge(readings), unsupported
