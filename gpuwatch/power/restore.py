"""Give power caps back when the daemon cannot: the power restore file and its part of `gpuwatch restore`.

Before the governor first lowers a GPU's cap it records the cap it found in
``<runtime_dir>/power-restore.json`` (``{pci slot: {"backend": "hwmon", "cap_uw": ...}}`` or
``{"backend": "nvml", "limit_mw": ...}``), and removes the record once that cap is back. `gpuwatch restore`
(systemd's ExecStopPost, so it runs after a SIGKILL, a watchdog kill or a crash too) writes every recorded
cap back through the same backends the daemon uses, verified by a readback. Without a record it writes
nothing: a cap gpuwatch never lowered is the user's, and the board's default is not necessarily the
original (tests/fixtures/amdgpu: 120 W set on a 304 W board).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpuwatch.gpus.amdgpu import AmdCard, discover
from gpuwatch.power.backend import VERIFY_TOLERANCE_W, CapBackend, CapUnavailable, CapWriteError
from gpuwatch.power.hwmon_cap import HwmonCap
from gpuwatch.power.nvml_cap import NvmlCap
from gpuwatch.restore_file import Handback, RestoreFile
from gpuwatch.sysfs import Sysfs

log = logging.getLogger("gpuwatch.power")

FILE_NAME = "power-restore.json"
NvmlLoader = Callable[[], Any]  # returns an initialised pynvml module, raises when there is none


def restore_file(runtime_dir: Path) -> RestoreFile:
    return RestoreFile(runtime_dir / FILE_NAME)


def restore_caps(sysfs: Sysfs, records: RestoreFile, load_nvml: NvmlLoader) -> Handback:
    """Write every recorded cap back: a line per cap given back (its record removed), one per problem."""
    result = Handback()
    problems = result.problems
    cards: dict[str, AmdCard] | None = None
    nvml: Any = None
    for gpu_id, record in sorted(records.load().items()):
        kind = record.get("backend") if isinstance(record, dict) else None
        cap: CapBackend
        if kind == HwmonCap.name:
            if cards is None:
                cards = {card.gpu_id: card for card in discover(sysfs).cards}
            original = HwmonCap.original_in(record)
            cap = HwmonCap(sysfs, gpu_id, _finder(cards, record), check_access=False)
        elif kind == NvmlCap.name:
            original = NvmlCap.original_in(record)
            try:
                nvml = nvml or load_nvml()
            except Exception as exc:
                problems.append(f"{gpu_id}: NVML unavailable, power limit not restored: {exc}")
                continue
            cap = NvmlCap(nvml, gpu_id)
        else:
            problems.append(f"{gpu_id}: unknown power restore record {record!r}")
            continue
        if original is None:
            problems.append(f"{gpu_id}: power restore record without a cap: {record!r}")
            continue
        problem = give_back(cap, original)
        if problem:
            problems.append(f"{gpu_id}: {problem}")
        else:
            log.info("GPU %s: power cap back to %g W", gpu_id, original)
            result.done.append(f"{gpu_id}: power cap back to its original {original:g} W")
            records.remove(gpu_id)
    return result


def give_back(cap: CapBackend, original_w: float) -> str | None:
    """Write ``original_w`` and read it back; the problem when it did not stick."""
    try:
        back = cap.write(original_w)
    except (CapUnavailable, CapWriteError) as exc:
        return f"power cap not restored to {original_w:g} W: {exc}"
    if abs(back - original_w) >= VERIFY_TOLERANCE_W:
        return f"power cap reads {back:g} W after restoring {original_w:g} W"
    return None


def _finder(cards: dict[str, AmdCard], record: dict[str, Any]) -> Callable[[str], AmdCard | None]:
    """The card by PCI slot as discovered now (its hwmon index may have changed since the record was
    written); the recorded path when the slot is not found."""

    def locate(gpu_id: str) -> AmdCard | None:
        if gpu_id in cards:
            return cards[gpu_id]
        path = record.get("path")
        if not isinstance(path, str) or "/" not in path:
            return None
        hwmon_dir = path.rsplit("/", 1)[0]
        return AmdCard(gpu_id=gpu_id, card="?", device_dir=hwmon_dir, hwmon_dir=hwmon_dir, device_id=None,
                       subsystem_id=None)

    return locate
