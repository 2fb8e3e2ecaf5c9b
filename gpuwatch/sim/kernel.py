"""The simulated kernel's side of the clock files, where a plain file cannot play it.

amdgpu keeps an overdrive edit in the driver until it is committed (amdgpu_set_pp_od_clk_voltage in
amdgpu_pm.c: ``s 0|1 <MHz>`` edits, checked against OD_RANGE, EINVAL out of it; ``c`` commits what a read
then shows; ``r`` puts the board's defaults back into the edit), takes a ``pp_dpm_sclk`` mask only while
``power_dpm_force_performance_level`` is ``manual`` (EINVAL otherwise) and only the known levels there. Two
writes to a plain file lose the first, so the simulator hands its clock writer this Sysfs: every other file
is written as the plain one writes it. A GPU reset (``reset``) puts the firmware's table and ``auto`` back, as
a real reset does.
"""

from __future__ import annotations

import os
import re
import threading

from gpuwatch.sysfs import Sysfs, SysfsError

OD, LEVEL, SCLK = "pp_od_clk_voltage", "power_dpm_force_performance_level", "pp_dpm_sclk"
LEVELS = ("auto", "low", "high", "manual", "profile_standard", "profile_min_sclk", "profile_min_mclk",
          "profile_peak", "perf_determinism")
_EDIT = re.compile(r"^s ([01]) (\d+)$")
_SCLK = re.compile(r"^OD_SCLK:\n0: (\d+)Mhz\n1: (\d+)Mhz\n", re.MULTILINE)
_RANGE = re.compile(r"^SCLK:\s+(\d+)Mhz\s+(\d+)Mhz$", re.MULTILINE)


class KernelSysfs(Sysfs):
    """A Sysfs over the simulator's tree whose clock files behave as amdgpu's (module docstring)."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        super().__init__(root)
        self._lock = threading.Lock()
        self.pending: dict[str, list[int]] = {}  # OD edits not committed yet, by file
        self.defaults: dict[str, tuple[int, int]] = {}  # the board's OD_SCLK, by file
        self.masks: dict[str, tuple[int, ...]] = {}  # the pp_dpm_sclk mask in force, by device directory

    def write(self, relative: str, value: str) -> None:
        device, _, name = relative.rpartition("/")
        if name not in (OD, LEVEL, SCLK):
            super().write(relative, value)
            return
        command = value.strip()
        with self._lock:
            if name == LEVEL:
                if command not in LEVELS:
                    raise SysfsError(relative, "EINVAL")
                super().write(relative, command + "\n")
                if command != "manual":
                    self.masks.pop(device, None)
            elif name == SCLK:
                if self.read(f"{device}/{LEVEL}") != "manual" or not command.replace(" ", "").isdigit():
                    raise SysfsError(relative, "EINVAL")
                self.masks[device] = tuple(int(index) for index in command.split())
            else:
                self._od(relative, command)

    def _od(self, relative: str, command: str) -> None:
        text = self.read(relative) or ""
        found, limits = _SCLK.search(text + "\n"), _RANGE.search(text)
        if found is None or limits is None:
            raise SysfsError(relative, "EINVAL")
        self.defaults.setdefault(relative, (int(found.group(1)), int(found.group(2))))
        edit = self.pending.setdefault(relative, [int(found.group(1)), int(found.group(2))])
        low, high = int(limits.group(1)), int(limits.group(2))
        if command == "c":
            super().write(relative, _SCLK.sub(f"OD_SCLK:\n0: {edit[0]}Mhz\n1: {edit[1]}Mhz\n", text + "\n", count=1)
                          .rstrip("\n") + "\n")
            del self.pending[relative]
        elif command == "r":
            edit[:] = list(self.defaults[relative])
        elif (m := _EDIT.match(command)) and low <= int(m.group(2)) <= high:
            edit[int(m.group(1))] = int(m.group(2))
        else:
            raise SysfsError(relative, "EINVAL")

    def od_max_mhz(self, device_dir: str) -> int | None:
        """The committed OD_SCLK maximum (None: the card has no OD table). The simulated card's own reading: a
        table that is no regular file (a test's FIFO, playing a driver call that never returns to the daemon)
        is none here, so the card goes on where only the daemon's I/O hangs."""
        if not os.path.isfile(self.path(f"{device_dir}/{OD}")):
            return None
        found = _SCLK.search((self.read(f"{device_dir}/{OD}") or "") + "\n")
        return None if found is None else int(found.group(2))

    def reset(self, device_dir: str) -> None:
        """A GPU reset: the firmware's table and the firmware's DPM back."""
        with self._lock:
            path = f"{device_dir}/{OD}"
            self.pending.pop(path, None)
            if path in self.defaults and (text := self.read(path)):
                low, high = self.defaults[path]
                Sysfs.write(self, path, _SCLK.sub(f"OD_SCLK:\n0: {low}Mhz\n1: {high}Mhz\n", text + "\n", count=1)
                            .rstrip("\n") + "\n")
            if self.exists(f"{device_dir}/{LEVEL}"):
                Sysfs.write(self, f"{device_dir}/{LEVEL}", "auto\n")
            self.masks.pop(device_dir, None)
