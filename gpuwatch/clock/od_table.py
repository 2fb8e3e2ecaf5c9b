"""amdgpu's overdrive table ``pp_od_clk_voltage`` as a ceiling backend: ``s 1 <MHz>`` then ``c``.

Kernel facts (Documentation/gpu/amdgpu/thermal.rst, "pp_od_clk_voltage"; amdgpu_pm.c
``amdgpu_set_pp_od_clk_voltage``; the print functions of navi10_ppt.c, sienna_cichlid_ppt.c and
smu_v13_0_0_ppt.c), with the write logs LACT records on the captures in tests/fixtures/amdgpu
(``s 1 2850`` then ``c`` on the RX 7900 XTX, ``s 0 750``, ``s 1 2600``, ``c`` on the RX 6900 XT):

* the file exists only with the overdrive feature enabled (amdgpu.ppfeaturemask bit 0x4000); it is 0644;
* Navi 1x, RDNA2 and RDNA3 (and Vega 20) print the gfx clock's range as ``OD_SCLK:`` with two lines,
  ``0: <min>Mhz`` and ``1: <max>Mhz``, and what the firmware takes under ``OD_RANGE:`` as
  ``SCLK: <low>Mhz <high>Mhz``; ``s 1 <MHz>`` sets the maximum, and nothing takes effect before ``c``;
* older parts (Polaris, Vega 10) print every DPM level with its voltage (``0: 300Mhz 800mV``) and want
  ``s <level> <MHz> <mV>``; RDNA4 prints ``OD_SCLK_OFFSET`` and takes an offset: neither parses here, so
  the probe says so and the controller uses the level mask (dpm_mask.py) where the card offers one;
* ``r`` resets the *whole* table to the board's defaults, a user's undervolt and memory clock with it
  (LACT PR #513): the original maximum is written back instead (``s 1 <original>``, ``c``), so only what
  gpuwatch changed changes back.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from gpuwatch.actuation.setting import SettingUnavailable, SettingWriteError
from gpuwatch.clock.backend import VERIFY_TOLERANCE_MHZ, ClockRange, ClockRecord
from gpuwatch.gpus.amdgpu import Locate
from gpuwatch.model import ClockBackendName
from gpuwatch.sysfs import Sysfs, SysfsError

FILE = "pp_od_clk_voltage"
# EACCES: not root; EINVAL: a value out of OD_RANGE or a table the firmware refuses; EROFS: read-only tree.
PERMANENT = {"EACCES", "EINVAL", "EROFS"}
_LEVEL = re.compile(r"^([01]):\s*(\d+)\s*mhz$", re.IGNORECASE)
_RANGE = re.compile(r"^SCLK:\s*(\d+)\s*mhz\s+(\d+)\s*mhz$", re.IGNORECASE)


@dataclass(frozen=True)
class OdTable:
    """What ``pp_od_clk_voltage`` says of the gfx clock: its min and max now, what OD_RANGE allows."""

    sclk_min_mhz: int
    sclk_max_mhz: int
    range_min_mhz: int
    range_max_mhz: int


def parse_od_table(text: str) -> OdTable | str:
    """The gfx clock of an overdrive table in the min/max form, or why it is not one (pure)."""
    section, levels, sclk_range = None, {}, None
    for raw in text.splitlines():
        line = raw.strip()
        if line.endswith(":") and line[:-1].replace("_", "").isalnum():
            section = line[:-1]
            continue
        if section == "OD_SCLK" and (m := _LEVEL.match(line)):
            levels[int(m.group(1))] = int(m.group(2))
        elif section == "OD_SCLK" and line:
            return f"OD_SCLK line {line!r} is not '<0|1>: <MHz>Mhz' (a per-level table: not driven)"
        elif section == "OD_RANGE" and (m := _RANGE.match(line)):
            sclk_range = (int(m.group(1)), int(m.group(2)))
    if set(levels) != {0, 1}:
        return "no OD_SCLK section with a min (0:) and a max (1:) line"
    if sclk_range is None:
        return "no 'SCLK: <low>Mhz <high>Mhz' line under OD_RANGE"
    table = OdTable(levels[0], levels[1], *sclk_range)
    if not table.range_min_mhz <= table.sclk_min_mhz < table.sclk_max_mhz:
        return f"OD_SCLK {table.sclk_min_mhz}..{table.sclk_max_mhz} MHz makes no range"
    return table


@dataclass(frozen=True)
class OdTableRestore:
    """The OD table's gfx clock maximum found before the first write; the slot is the file's key."""

    backend: ClassVar[str] = "od_table"
    sclk_max_mhz: int | None

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> OdTableRestore:
        value = data.get("sclk_max_mhz")
        return cls(value if isinstance(value, int) and value > 0 else None)

    def to_json(self) -> dict[str, Any]:
        return {"backend": self.backend, "sclk_max_mhz": self.sclk_max_mhz}

    @property
    def original_mhz(self) -> float | None:
        return None if self.sclk_max_mhz is None else float(self.sclk_max_mhz)

    def handed_back(self) -> str:
        return f"shader clock ceiling back to its original {self.sclk_max_mhz} MHz (pp_od_clk_voltage)"


class OdTableClock:
    name: ClockBackendName = "od_table"

    def __init__(self, sysfs: Sysfs, gpu_id: str, locate: Locate, check_access: bool = True) -> None:
        self.sysfs = sysfs
        self.gpu_id = gpu_id
        self.locate = locate
        self.check_access = check_access
        self.found: OdTable | None = None

    def path(self) -> str:
        card = self.locate(self.gpu_id)
        if card is None:
            raise SettingWriteError(f"GPU {self.gpu_id} is not found now")
        return f"{card.device_dir}/{FILE}"

    def table(self) -> OdTable:
        try:
            text = self.sysfs.read(self.path())
        except SysfsError as exc:
            raise SettingWriteError(f"{FILE} unreadable ({exc.reason})") from None
        if text is None:
            raise SettingUnavailable(f"no {FILE} (overdrive not enabled: amdgpu.ppfeaturemask bit 0x4000)")
        if not text:  # amdgpu_pm.c prints "\n" when the SMU's query failed (size == 0): read again, never given up
            raise SettingWriteError(f"{FILE} is empty (the driver's query failed)")
        parsed = parse_od_table(text)
        if isinstance(parsed, str):
            raise SettingUnavailable(f"{FILE}: {parsed}")
        return parsed

    def probe(self) -> ClockRange:
        try:
            path = self.path()
        except SettingWriteError:
            raise SettingUnavailable("the card is not found: nothing to set") from None
        table = self.found = self.table()
        if self.check_access and not self.sysfs.writable(path):
            raise SettingUnavailable(f"{FILE} is not writable (run gpuwatch as root)")
        low = max(table.range_min_mhz, table.sclk_min_mhz + 1)
        return ClockRange(original_mhz=float(table.sclk_max_mhz), min_mhz=float(low))

    def current_mhz(self) -> float | None:
        try:
            return float(self.table().sclk_max_mhz)
        except (SettingUnavailable, SettingWriteError):
            return None

    def write(self, ceiling_mhz: float) -> float:
        mhz = round(ceiling_mhz)
        self._commit(f"s 1 {mhz}\n")
        return float(self.table().sclk_max_mhz)

    def record(self) -> OdTableRestore:
        assert self.found is not None, "probe before record"
        return OdTableRestore(self.found.sclk_max_mhz)

    def give_back(self, record: ClockRecord) -> None:
        if record.original_mhz is None:
            raise SettingWriteError("the record holds no ceiling")
        try:
            back = self.write(record.original_mhz)
        except SettingUnavailable as exc:
            raise SettingWriteError(str(exc)) from None
        if abs(back - record.original_mhz) >= VERIFY_TOLERANCE_MHZ:
            raise SettingWriteError(f"{FILE} reads {back:g} MHz after restoring {record.original_mhz:g} MHz")

    def _commit(self, command: str) -> None:
        """One edit and the commit that makes it take effect (each its own write, as the kernel parses them)."""
        path = self.path()
        for text in (command, "c\n"):
            try:
                self.sysfs.write(path, text)
            except SysfsError as exc:
                if exc.reason in PERMANENT:
                    raise SettingUnavailable(f"{FILE} refuses {text.strip()!r} ({exc.reason})") from None
                raise SettingWriteError(f"{FILE} write {text.strip()!r} failed: {exc.reason}") from None
