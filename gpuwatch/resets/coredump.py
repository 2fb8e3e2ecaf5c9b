"""What an amdgpu device coredump says, in one line for the log and the status (pure).

Format (drivers/gpu/drm/amd/amdgpu/amdgpu_dev_coredump.c): a ``**** AMDGPU Device Coredump ****`` header, then
``kernel:``, ``module:``, ``time: <s>.<ns>`` (CLOCK_MONOTONIC since boot, not wall time),
``process_name: <comm> PID: <pid>`` when the guilty job's process is known, ``Ring timed out details`` with
``IP Type: <n> Ring Name: <name>``, ``[gfxhub|mmhub] Page fault observed`` with ``Faulty page starting at
address: 0x...``, and ``VRAM is lost due to GPU reset!`` when it was. Dumps before ~6.10 carry only the
header, kernel, module, time, process and the VRAM line. Anything else is ignored; a dump of another
driver yields only what matches.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_PROCESS = re.compile(r"^process_name:\s*(?P<comm>.*?)\s+PID:\s*(?P<pid>\d+)", re.M)
_RING = re.compile(r"Ring Name:\s*(?P<ring>\S+)")
_FAULT = re.compile(r"^\[(?P<hub>\w+)\] Page fault observed", re.M)
_ADDRESS = re.compile(r"Faulty page starting at address:?\s*(?P<address>0x[0-9a-fA-F]+)")
_KERNEL = re.compile(r"^kernel:\s*(?P<kernel>\S+)", re.M)
_TIME = re.compile(r"^time:\s*(?P<time>\d+(?:\.\d+)?)", re.M)


@dataclass(frozen=True)
class DumpSummary:
    kernel: str | None = None
    monotonic_s: float | None = None  # when the kernel took it, seconds since boot (CLOCK_MONOTONIC)
    process: str | None = None
    pid: int | None = None
    ring: str | None = None
    page_fault: str | None = None  # "gfxhub at 0x0000000000000000"
    vram_lost: bool = False

    def line(self) -> str:
        """e.g. ``ring gfx_0.0.0 timed out; gfxhub page fault at 0x0; VRAM lost; process python3 (pid 4242)``."""
        parts = []
        if self.ring:
            parts.append(f"ring {self.ring} timed out")
        if self.page_fault:
            parts.append(f"{self.page_fault.split(' at ')[0]} page fault at {self.page_fault.split(' at ')[-1]}")
        if self.vram_lost:
            parts.append("VRAM lost")
        if self.process:
            parts.append(f"process {self.process} (pid {self.pid})")
        return "; ".join(parts) or "no details in the dump"


def summarize(text: str) -> DumpSummary:
    process, ring, kernel, when = _PROCESS.search(text), _RING.search(text), _KERNEL.search(text), _TIME.search(text)
    fault, address = _FAULT.search(text), _ADDRESS.search(text)
    page_fault = None
    if fault:
        page_fault = f"{fault.group('hub')} at {address.group('address') if address else '?'}"
    return DumpSummary(
        kernel=kernel.group("kernel") if kernel else None,
        monotonic_s=float(when.group("time")) if when else None,
        process=process.group("comm") if process else None,
        pid=int(process.group("pid")) if process else None,
        ring=ring.group("ring") if ring else None,
        page_fault=page_fault,
        vram_lost="VRAM is lost due to GPU reset" in text,
    )
