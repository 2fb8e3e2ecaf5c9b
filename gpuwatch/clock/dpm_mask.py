"""``power_dpm_force_performance_level=manual`` and a ``pp_dpm_sclk`` level mask as a ceiling backend.

Kernel facts (Documentation/gpu/amdgpu/thermal.rst, "pp_dpm_sclk" and "power_dpm_force_performance_level";
tests/fixtures/amdgpu/SYSFS_FACTS.md §3 and quirk 6), checked on every capture that has the files:

* a mask is written as level indices (``"0 1 2"``) and is honoured only while the performance level is
  ``manual``; writing any other level (``auto``) gives the clocks back to the firmware's DPM;
* the table's lines are ``<i>: <N>Mhz`` with ``*`` on the current level. Polaris and Vega list their real
  levels. Navi 1x..4x list only the range's two ends, plus, while the clock sits between them, a synthetic
  middle line with the *current* clock (``1: 0Mhz *``, ``1: 2605Mhz *``): their fine-grained gfx clock takes
  only the two ends as levels (``*_force_clk_levels`` clamps any mask to 0..1), so the middle line is no
  level. Kernels before the two-line print (navi10_print_clk_levels and sienna_cichlid_print_clk_levels of
  Linux 5.x: ``freq_values[1] = (freq_values[0] + freq_values[2]) / 2`` when the current clock sits at an end)
  print three lines even then: the middle one *unmarked*, the mean of the ends, the ``*`` on an end. SI
  prints an empty table;
* a level the user set (``manual`` already: another tool or a person drives the clocks) is not taken over:
  its mask cannot be read back, so it could not be given back either. Every other level (``auto``,
  ``high``, ``profile_*``...) is recorded and written back on every exit path.

The mask cannot be read back either: what is verified after a write is that the level reads ``manual``
and no level above the ceiling is current. A level that reads anything else later means a GPU reset or
another tool took the clocks back: the controller sees it and takes them again.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from gpuwatch.actuation.setting import SettingUnavailable, SettingWriteError
from gpuwatch.clock.backend import ClockRange, ClockRecord
from gpuwatch.gpus.amdgpu import Locate
from gpuwatch.model import ClockBackendName
from gpuwatch.sysfs import Sysfs, SysfsError

LEVEL_FILE, SCLK_FILE = "power_dpm_force_performance_level", "pp_dpm_sclk"
PERMANENT = {"EACCES", "EINVAL", "EROFS"}
_LINE = re.compile(r"^(\d+):\s*(\d+)\s*mhz\s*(\*)?$", re.IGNORECASE)


@dataclass(frozen=True)
class SclkTable:
    """``pp_dpm_sclk`` read: the real levels (MHz, by index) and the index of the current one (None: unmarked or
    synthetic); ``current_mhz``: the clock on the ``*`` line, synthetic or not (None: no single one)."""

    levels_mhz: tuple[int, ...]
    current: int | None
    current_mhz: int | None = None


def parse_sclk(text: str) -> SclkTable:
    """The real DPM levels of a ``pp_dpm_sclk`` text (pure; quirk 6 in the module docstring). Lines that are not
    levels (SI's empty table, RDNA4's ``S:`` deep-sleep line) are skipped."""
    lines = [(int(m.group(1)), int(m.group(2)), bool(m.group(3)))
             for raw in text.splitlines() if (m := _LINE.match(raw.strip()))]
    marked = [index for index, (_, _, current) in enumerate(lines) if current]
    current_mhz = lines[marked[0]][1] if len(marked) == 1 else None
    if len(lines) == 3 and marked == [1]:
        # The fine-grained form: min, the current clock (synthetic), max.
        return SclkTable((lines[0][1], lines[2][1]), None, current_mhz)
    if len(lines) == 3 and marked in ([0], [2]) and lines[1][1] == (lines[0][1] + lines[2][1]) // 2:
        # The older fine-grained print (module docstring): the unmarked middle is the ends' mean, no level.
        return SclkTable((lines[0][1], lines[2][1]), 0 if marked == [0] else 1, current_mhz)
    levels = tuple(mhz for _, mhz, _ in lines)
    if any(b <= a for a, b in zip(levels, levels[1:], strict=False)) or 0 in levels:
        # Not increasing (two lines marked current, 0 MHz): a table whose levels cannot be told.
        return SclkTable((), None)
    return SclkTable(levels, marked[0] if len(marked) == 1 else None, current_mhz)


@dataclass(frozen=True)
class DpmMaskRestore:
    """The performance level found before the first write (the mask is the firmware's while it is not manual)."""

    backend: ClassVar[str] = "dpm_mask"
    level: str | None
    sclk_max_mhz: int | None = None

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> DpmMaskRestore:
        level, top = data.get("level"), data.get("sclk_max_mhz")
        return cls(level if isinstance(level, str) and level and level != "manual" else None,
                   top if isinstance(top, int) and top > 0 else None)

    def to_json(self) -> dict[str, Any]:
        return {"backend": self.backend, "level": self.level, "sclk_max_mhz": self.sclk_max_mhz}

    @property
    def original_mhz(self) -> float | None:
        return None if self.level is None else float(self.sclk_max_mhz or 0)

    def handed_back(self) -> str:
        return f"shader clocks back to the firmware ({LEVEL_FILE} {self.level})"


class DpmMaskClock:
    name: ClockBackendName = "dpm_mask"

    def __init__(self, sysfs: Sysfs, gpu_id: str, locate: Locate, check_access: bool = True) -> None:
        self.sysfs = sysfs
        self.gpu_id = gpu_id
        self.locate = locate
        self.check_access = check_access
        self.level: str | None = None
        self.levels_mhz: tuple[int, ...] = ()
        self.written_mhz: float | None = None

    def path(self, name: str) -> str:
        card = self.locate(self.gpu_id)
        if card is None:
            raise SettingWriteError(f"GPU {self.gpu_id} is not found now")
        return f"{card.device_dir}/{name}"

    def _read(self, name: str) -> str | None:
        try:
            return self.sysfs.read(self.path(name))
        except SysfsError as exc:
            raise SettingWriteError(f"{name} unreadable ({exc.reason})") from None

    def probe(self) -> ClockRange:
        try:
            level_path = self.path(LEVEL_FILE)
        except SettingWriteError:
            raise SettingUnavailable("the card is not found: nothing to set") from None
        level, sclk = self._read(LEVEL_FILE), self._read(SCLK_FILE)
        if level is None or sclk is None:
            raise SettingUnavailable(f"no {LEVEL_FILE} or {SCLK_FILE}: no clock levels to mask")
        if not level:  # the query failed (amdgpu_pm.c prints "\n"): read again next tick, never recorded as original
            raise SettingWriteError(f"{LEVEL_FILE} is empty (the driver's query failed)")
        if level == "manual":
            raise SettingUnavailable(f"{LEVEL_FILE} is already manual: another tool or a person drives the clocks")
        table = parse_sclk(sclk)
        if len(table.levels_mhz) < 2:
            raise SettingUnavailable(f"{SCLK_FILE} lists {len(table.levels_mhz)} usable level(s): nothing to mask")
        if self.check_access and not (self.sysfs.writable(level_path) and self.sysfs.writable(self.path(SCLK_FILE))):
            raise SettingUnavailable(f"{LEVEL_FILE} or {SCLK_FILE} is not writable (run gpuwatch as root)")
        self.level, self.levels_mhz = level, table.levels_mhz
        return ClockRange(original_mhz=float(table.levels_mhz[-1]), min_mhz=float(table.levels_mhz[0]),
                          levels_mhz=tuple(float(mhz) for mhz in table.levels_mhz))

    def current_mhz(self) -> float | None:
        """Our ceiling while the level is manual and no level above it is current; else the card's maximum
        (the firmware has the clocks: a reset or another tool)."""
        try:
            level, sclk = self._read(LEVEL_FILE), self._read(SCLK_FILE)
        except SettingWriteError:
            return None
        if not self.levels_mhz or level is None:
            return None
        top = float(self.levels_mhz[-1])
        if level != "manual" or self.written_mhz is None:
            return top
        table = parse_sclk(sclk or "")
        if table.current is not None and table.levels_mhz == self.levels_mhz and \
                table.levels_mhz[table.current] > self.written_mhz:
            return float(table.levels_mhz[table.current])  # a mask of someone else's
        return self.written_mhz

    def write(self, ceiling_mhz: float) -> float:
        allowed = [index for index, mhz in enumerate(self.levels_mhz) if mhz <= ceiling_mhz + 0.5]
        if not allowed:
            raise SettingUnavailable(f"no DPM level at or under {ceiling_mhz:g} MHz")
        self._write(LEVEL_FILE, "manual\n")
        self._write(SCLK_FILE, " ".join(str(index) for index in allowed) + "\n")
        self.written_mhz = float(self.levels_mhz[allowed[-1]])
        back = self.current_mhz()
        if back is None:
            raise SettingWriteError(f"{LEVEL_FILE} unreadable after the write")
        return back

    def record(self) -> DpmMaskRestore:
        assert self.level is not None, "probe before record"
        return DpmMaskRestore(self.level, self.levels_mhz[-1])

    def give_back(self, record: ClockRecord) -> None:
        if not isinstance(record, DpmMaskRestore) or record.level is None:
            raise SettingWriteError("the record holds no performance level")
        try:
            self._write(LEVEL_FILE, record.level + "\n")
        except SettingUnavailable as exc:
            raise SettingWriteError(str(exc)) from None
        back = self._read(LEVEL_FILE)
        if back != record.level:
            raise SettingWriteError(f"{LEVEL_FILE} reads {back!r} after restoring {record.level!r}")
        self.written_mhz = None

    def _write(self, name: str, text: str) -> None:
        try:
            self.sysfs.write(self.path(name), text)
        except SysfsError as exc:
            if exc.reason in PERMANENT:
                raise SettingUnavailable(f"{name} refuses {text.strip()!r} ({exc.reason})") from None
            raise SettingWriteError(f"{name} write {text.strip()!r} failed: {exc.reason}") from None
