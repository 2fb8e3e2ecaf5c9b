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
  (LACT PR #513), and on sienna_cichlid and smu13 commits them at once (``*_od_edit_dpm_table``:
  PP_OD_RESTORE_DEFAULT_TABLE falls through to PP_OD_COMMIT_DPM_TABLE): never sent. The original maximum is
  written back instead (``s 1 <original>``, ``c``), so only what gpuwatch changed changes back;
* a read prints the driver's *edit buffer* (``*_print_clk_levels``, SMU_OD_SCLK prints ``od_table``), not what
  is in force: what reads back after ``c`` proves only that the edit was taken (the controller verifies the
  ceiling by the clock the card runs at, clock/in_force.py). There is one edit buffer for every writer: a
  person's ``s`` not committed yet is committed by our ``c`` (said in the log when the table differs from
  what we last saw);
* ``s 1 <MHz>`` is checked against GfxclkFmax's own limits (smu_v13_0_0_get_od_setting_limits,
  sienna_cichlid_od_setting_check_range), whose minimum OD_RANGE does not print (its SCLK low end is
  GfxclkFmin's): EINVAL there is ``CeilingRefused``, the card's floor, not a broken interface;
* an OD commit can drop a forced ``power_dpm_force_performance_level`` (LACT #294/#298, #675/#677): the level
  read before every ``c`` is written back after it when the commit changed it;
* Renoir, Van Gogh and Yellow Carp APUs print and take OD_SCLK only while the level is ``manual``
  (renoir_od_edit_dpm_table, vangogh_od_edit_dpm_table, yellow_carp_od_edit_dpm_table: "pp_od_clk_voltage is
  not accessible if power_dpm_force_performance_level is not in manual mode"): taking the clocks from the
  firmware's DPM for that is not gpuwatch's to do, so they are declined with that reason.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from gpuwatch.actuation.setting import SettingUnavailable, SettingWriteError
from gpuwatch.clock.backend import VERIFY_TOLERANCE_MHZ, CeilingRefused, ClockRange, ClockRecord
from gpuwatch.gpus.amdgpu import Locate
from gpuwatch.model import ClockBackendName
from gpuwatch.sysfs import Sysfs, SysfsError

FILE = "pp_od_clk_voltage"
LEVEL_FILE = "power_dpm_force_performance_level"
# PCI device ids of the APUs whose OD table needs ``manual`` (amdgpu_drv.c pciidlist: Renoir, Cezanne, Lucienne
# -> renoir_ppt.c; Van Gogh -> vangogh_ppt.c; Rembrandt -> yellow_carp_ppt.c).
MANUAL_ONLY_APUS = {0x1636: "renoir", 0x1638: "renoir", 0x164C: "renoir", 0x163F: "vangogh",
                    0x164D: "yellow_carp", 0x1681: "yellow_carp"}
log = logging.getLogger("gpuwatch.clock")
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
        self.seen: str | None = None  # the table as we last left it (probe, commit): a change is another's edit
        self.last_edit_mhz: int | None = None  # our last ``s 1`` (its commit may have failed)
        self._foreign: str | None = None  # the other's edit last said in the log

    def path(self) -> str:
        card = self.locate(self.gpu_id)
        if card is None:
            raise SettingWriteError(f"GPU {self.gpu_id} is not found now")
        return f"{card.device_dir}/{FILE}"

    def table(self) -> OdTable:
        return self._table()[0]

    def _table(self) -> tuple[OdTable, str]:
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
        return parsed, text

    def probe(self) -> ClockRange:
        try:
            path = self.path()
        except SettingWriteError:
            raise SettingUnavailable("the card is not found: nothing to set") from None
        apu = MANUAL_ONLY_APUS.get(_device_id(self.sysfs, path.rpartition("/")[0]) or -1)
        if apu is not None:
            raise SettingUnavailable(f"{FILE}: a {apu} APU takes OD edits only while {LEVEL_FILE} is manual "
                                     f"({apu}_ppt.c od_edit_dpm_table), which takes the clocks from the "
                                     "firmware's DPM: not driven")
        table, self.seen = self._table()
        self.found = table
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
        """``s 1`` then ``c``; what the edit buffer reads after it (the edit taken, not proof it is in force).
        Raises CeilingRefused when the edit is EINVAL (out of GfxclkFmax's limits)."""
        mhz = round(ceiling_mhz)
        self._say_foreign_edit()
        self._commit(f"s 1 {mhz}\n")
        table, self.seen = self._table()
        return float(table.sclk_max_mhz)

    def _say_foreign_edit(self) -> None:
        """A table that differs from the one we last left is another's edit (a person's ``s``, committed or not,
        which the file cannot tell apart: it prints the edit buffer); ours commits it too. Said once per edit."""
        try:
            text = self.sysfs.read(self.path())
        except (SysfsError, SettingWriteError):
            return
        if self.seen is None or text is None or text == self.seen or text == self._foreign:
            return
        self._foreign = text
        changed = sorted(set(text.splitlines()) - set(self.seen.splitlines()))
        log.warning("GPU %s: %s differs from what gpuwatch last left (%s): an edit of another's, committed or "
                    "not; gpuwatch's commit commits it too (the kernel keeps one edit buffer)", self.gpu_id, FILE,
                    ", ".join(changed) or "lines removed")

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
        except CeilingRefused as exc:
            raise SettingWriteError(str(exc)) from None
        if abs(back - record.original_mhz) >= VERIFY_TOLERANCE_MHZ:
            raise SettingWriteError(f"{FILE} reads {back:g} MHz after restoring {record.original_mhz:g} MHz")

    def _commit(self, command: str) -> None:
        """One edit and the commit that makes it take effect (each its own write, as the kernel parses them),
        then the forced performance level written back if the commit changed it (module docstring)."""
        path = self.path()
        level_path = f"{path.rpartition('/')[0]}/{LEVEL_FILE}"
        level = self._level(level_path)
        for text in (command, "c\n"):
            try:
                self.sysfs.write(path, text)
            except SysfsError as exc:
                if exc.reason == "EINVAL" and text is command:
                    raise CeilingRefused(f"{FILE} refuses {text.strip()!r} (EINVAL: under the card's own "
                                         "GfxclkFmax limit, which OD_RANGE does not print)") from None
                if exc.reason in PERMANENT:
                    raise SettingUnavailable(f"{FILE} refuses {text.strip()!r} ({exc.reason})") from None
                raise SettingWriteError(f"{FILE} write {text.strip()!r} failed: {exc.reason}") from None
            if text is command:
                self.last_edit_mhz = int(command.split()[-1])
        after = self._level(level_path)
        if level is None or after is None or after == level:
            return
        try:
            self.sysfs.write(level_path, level + "\n")
        except SysfsError as exc:
            raise SettingWriteError(f"{LEVEL_FILE} reads {after!r} after the OD commit, {level!r} not written back "
                                    f"({exc.reason})") from None
        log.warning("GPU %s: the OD commit set %s to %r: the forced %r written back", self.gpu_id, LEVEL_FILE,
                    after, level)

    def _level(self, level_path: str) -> str | None:
        """The performance level now (None: no such file, unreadable, or empty: nothing to put back)."""
        try:
            return self.sysfs.read(level_path) or None
        except SysfsError:
            return None


def _device_id(sysfs: Sysfs, device_dir: str) -> int | None:
    """The PCI device id of ``device_dir`` (its ``device`` file, ``0x163f``); None when unreadable."""
    try:
        text = sysfs.read(f"{device_dir}/device")
        return None if text is None else int(text, 16)
    except (SysfsError, ValueError):
        return None
