"""Hand fans back to the firmware when the daemon cannot: the restore file and `gpuwatch fans-auto`.

The controller records each GPU's original fan mode in ``<runtime_dir>/fan-restore.json`` before its
first write. `gpuwatch fans-auto` (systemd ExecStopPost, so it runs after a SIGKILL or crash too)
restores from that file; without one it sets every amdgpu fan to automatic. It never writes
``pwm1_enable=0``, which means full speed, not automatic (SYSFS_FACTS §4.4, K-FANNONE).
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

from gpuwatch.amdgpu import discover
from gpuwatch.fan import AUTO, MANUAL, restore_pwm1
from gpuwatch.fanod import restore_gpu_od
from gpuwatch.sysfs import Sysfs, SysfsError

log = logging.getLogger("gpuwatch.fan")


class RestoreFile:
    """``{gpu_id: {"backend": "pwm1"|"gpu_od", "path": ..., ...}}`` written atomically."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def load(self) -> dict[str, dict[str, Any]]:
        try:
            data = json.loads(self.path.read_text())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            log.error("%s unreadable (%s): falling back to automatic for every fan", self.path, exc)
            return {}
        return data if isinstance(data, dict) else {}

    def add(self, gpu_id: str, record: dict[str, Any]) -> dict[str, Any]:
        """Record ``record`` unless one is there already; returns the record in force.

        A record left by a killed daemon holds the true original (e.g. ``pwm1_enable`` 2), where
        this start would read the "manual" that the killed daemon left behind.
        """
        data = self.load()
        existing = data.get(gpu_id)
        if isinstance(existing, dict) and existing.get("backend") == record.get("backend"):
            return existing
        data[gpu_id] = record
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(json.dumps(data, indent=2, sort_keys=True))
        os.replace(tmp, self.path)
        return record

    def clear(self) -> None:
        self.path.unlink(missing_ok=True)


def fans_auto(sysfs: Sysfs, restore_file: RestoreFile) -> list[str]:
    """Restore every fan; returns the problems (empty = all handed back)."""
    records = restore_file.load()
    problems: list[str] = []
    if records:
        for gpu_id, record in sorted(records.items()):
            problems += _restore_record(sysfs, gpu_id, record)
    else:
        problems += _all_auto(sysfs)
    if not problems:
        restore_file.clear()
    return problems


def _restore_record(sysfs: Sysfs, gpu_id: str, record: dict[str, Any]) -> list[str]:
    path = str(record.get("path") or "")
    try:
        if record.get("backend") == "pwm1":
            mode = record.get("pwm1_enable")
            mode = mode if mode in (MANUAL, AUTO) else AUTO
            if not restore_pwm1(sysfs, path.rsplit("/", 1)[0], int(mode)):
                return [f"{gpu_id}: pwm1_enable did not read back {mode}"]
        elif record.get("backend") == "gpu_od":
            restore_gpu_od(sysfs, path)
            if record.get("zero_rpm_enable") == 1 and record.get("zero_rpm_path"):
                sysfs.write(str(record["zero_rpm_path"]), "1\n")
                sysfs.write(str(record["zero_rpm_path"]), "c\n")
        else:
            return [f"{gpu_id}: unknown restore record {record!r}"]
    except SysfsError as exc:
        return [f"{gpu_id}: {exc}"]
    log.info("GPU %s: fan handed back to the firmware (%s)", gpu_id, record.get("backend"))
    return []


def _all_auto(sysfs: Sysfs) -> list[str]:
    problems = []
    for card in discover(sysfs).cards:
        curve = f"{card.device_dir}/gpu_od/fan_ctrl/fan_curve"
        try:
            if sysfs.exists(curve) and sysfs.writable(curve):
                restore_gpu_od(sysfs, curve)
            if card.hwmon_dir and sysfs.read(f"{card.hwmon_dir}/pwm1_enable") == str(MANUAL):
                if not restore_pwm1(sysfs, card.hwmon_dir, AUTO):
                    problems.append(f"{card.gpu_id}: pwm1_enable did not read back {AUTO}")
        except SysfsError as exc:
            problems.append(f"{card.gpu_id}: {exc}")
    return problems
