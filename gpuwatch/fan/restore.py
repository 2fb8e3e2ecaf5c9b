"""Hand fans back to the firmware when the daemon cannot: the fans' part of `gpuwatch restore` (and of
`gpuwatch fans-auto`, its first name).

The controller records each GPU's original fan mode in ``<runtime_dir>/fan-restore.json`` before its
first write. `gpuwatch restore` (systemd ExecStopPost, so it runs after a SIGKILL or crash too)
restores from that file with the same typed records the controller restores with; without a file it
sets every amdgpu fan to automatic. It never writes ``pwm1_enable=0``, which means full speed, not
automatic (SYSFS_FACTS §4.4, K-FANNONE).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from gpuwatch.fan.backend import RestoreRecord
from gpuwatch.fan.gpu_od import GpuOdRestore
from gpuwatch.fan.pwm1 import AUTO, MANUAL, Pwm1Restore
from gpuwatch.gpus.amdgpu import discover
from gpuwatch.restore_file import Handback, RestoreFile
from gpuwatch.sysfs import Sysfs, SysfsError

log = logging.getLogger("gpuwatch.fan")

# The file's "backend" key -> its record type.
RECORDS: dict[str, Callable[[Mapping[str, Any]], RestoreRecord]] = {
    Pwm1Restore.backend: Pwm1Restore.from_json,
    GpuOdRestore.backend: GpuOdRestore.from_json,
}


def fans_auto(sysfs: Sysfs, restore_file: RestoreFile) -> Handback:
    """Restore every fan from the restore file, else every amdgpu fan left in manual mode."""
    records = restore_file.load()
    result = Handback()
    if records:
        for gpu_id, record in sorted(records.items()):
            _restore_record(sysfs, gpu_id, record, result)
    else:
        _all_auto(sysfs, result)
    if not result.problems:
        restore_file.clear()
    return result


def _restore_record(sysfs: Sysfs, gpu_id: str, stored: Any, result: Handback) -> None:
    backend = stored.get("backend") if isinstance(stored, dict) else None
    parse = RECORDS.get(backend) if isinstance(backend, str) else None
    if parse is None:
        result.problems.append(f"{gpu_id}: unknown restore record {stored!r}")
        return
    _give_back(sysfs, gpu_id, parse(stored), result)


def _give_back(sysfs: Sysfs, gpu_id: str, record: RestoreRecord, result: Handback) -> None:
    try:
        problem = record.restore(sysfs)
    except SysfsError as exc:
        problem = str(exc)
    if problem:
        result.problems.append(f"{gpu_id}: {problem}")
        return
    log.info("GPU %s: fan handed back to the firmware (%s)", gpu_id, record.handed_back())
    result.done.append(f"{gpu_id}: fan handed back to the firmware ({record.handed_back()})")


def _all_auto(sysfs: Sysfs, result: Handback) -> None:
    """No restore file: the boot default curve on every writable fan_curve, pwm1_enable 2 where it is 1."""
    for card in discover(sysfs).cards:
        curve = f"{card.device_dir}/gpu_od/fan_ctrl/fan_curve"
        try:
            if sysfs.exists(curve) and sysfs.writable(curve):
                _give_back(sysfs, card.gpu_id, GpuOdRestore(curve), result)
            if card.hwmon_dir and sysfs.read(f"{card.hwmon_dir}/pwm1_enable") == str(MANUAL):
                _give_back(sysfs, card.gpu_id, Pwm1Restore(f"{card.hwmon_dir}/pwm1_enable", AUTO), result)
        except SysfsError as exc:
            result.problems.append(f"{card.gpu_id}: {exc}")
