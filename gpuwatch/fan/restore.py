"""The fans as an actuator kind: their restore records and how a stored one is given back.

The controller records each GPU's original fan mode in ``<runtime_dir>/fan-restore.json`` before its
first write (gpuwatch.actuation). Giving it back is the record's own code (pwm1.py, gpu_od.py), the
same for the daemon's shutdown and for `gpuwatch restore` after a crash; without a record it sets every
amdgpu fan left in manual mode to automatic (`gpuwatch fans-auto`, the command's first name). It never
writes ``pwm1_enable=0``, which means full speed, not automatic (SYSFS_FACTS §4.4, K-FANNONE).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

from gpuwatch.actuation.actuator import ActuatorKind, Gone, Handback, NotHandedBack
from gpuwatch.fan.backend import RestoreRecord
from gpuwatch.fan.gpu_od import GpuOdRestore
from gpuwatch.fan.pwm1 import AUTO, MANUAL, Pwm1Restore
from gpuwatch.gpus.amdgpu import discover
from gpuwatch.sysfs import Sysfs, SysfsError

NAME = "fan"

# The file's "backend" key -> its record type.
RECORDS: dict[str, Callable[[Mapping[str, Any]], RestoreRecord]] = {
    Pwm1Restore.backend: Pwm1Restore.from_json,
    GpuOdRestore.backend: GpuOdRestore.from_json,
}


def kind(sysfs: Sysfs) -> ActuatorKind[RestoreRecord]:
    return ActuatorKind(NAME, partial(give_back, sysfs), partial(all_auto, sysfs), records=RECORDS)


def give_back(sysfs: Sysfs, gpu_id: str, stored: Mapping[str, Any]) -> str:
    """One stored record given back: what the fan was handed back as."""
    parse = RECORDS.get(str(stored.get("backend")))
    if parse is None:
        raise NotHandedBack(f"unknown restore record {dict(stored)!r}")
    record = parse(stored)
    try:
        problem = record.restore(sysfs)
    except SysfsError as exc:
        if exc.reason == "ENOENT":
            # The card fell off the bus (or came back at a new place, which all_auto then finds): when
            # it returns, the driver re-initialises its fan in automatic mode.
            raise Gone(str(exc)) from None
        raise NotHandedBack(str(exc)) from None
    if problem:
        raise NotHandedBack(problem)
    return f"fan handed back to the firmware ({record.handed_back()})"


def all_auto(sysfs: Sysfs, result: Handback, only: set[str] | None) -> None:
    """The boot default curve on every writable fan_curve, pwm1_enable 2 where it is 1 (``only``: on
    those GPUs, wherever they are now)."""
    for card in discover(sysfs).cards:
        if only is not None and card.gpu_id not in only:
            continue
        curve = f"{card.device_dir}/gpu_od/fan_ctrl/fan_curve"
        try:
            if sysfs.exists(curve) and sysfs.writable(curve):
                _auto(sysfs, card.gpu_id, GpuOdRestore(curve), result)
            if card.hwmon_dir and sysfs.read(f"{card.hwmon_dir}/pwm1_enable") == str(MANUAL):
                _auto(sysfs, card.gpu_id, Pwm1Restore(f"{card.hwmon_dir}/pwm1_enable", AUTO), result)
        except SysfsError as exc:
            result.problems.append(f"{card.gpu_id}: {exc}")


def _auto(sysfs: Sysfs, gpu_id: str, record: RestoreRecord, result: Handback) -> None:
    try:
        result.done.append(f"{gpu_id}: {give_back(sysfs, gpu_id, record.to_json())}")
    except (NotHandedBack, Gone) as exc:
        result.problems.append(f"{gpu_id}: {exc}")
