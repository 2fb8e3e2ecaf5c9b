"""The simulated kernel's side of the clock files, where a plain file cannot play it.

Two writes to a plain file lose the first, so the simulator hands its clock writer this Sysfs: every other file
is written as the plain one writes it. What it plays, each rule beside the kernel function it comes from
(drivers/gpu/drm/amd/pm/amdgpu_pm.c, swsmu/smu11/navi10_ppt.c, swsmu/smu11/sienna_cichlid_ppt.c,
swsmu/smu13/smu_v13_0_0_ppt.c):

* ``pp_od_clk_voltage`` prints the driver's *edit buffer* (``od_table``), not what is committed: an ``s`` shows
  before its ``c`` (``*_print_clk_levels``, SMU_OD_SCLK, print ``od_table->GfxclkFmin/Fmax``);
* each OD setting has its own limits: OD_RANGE's ``SCLK:`` line prints GfxclkFmin's minimum and GfxclkFmax's
  maximum only; GfxclkFmax's minimum (``Board.fmax_min_mhz``) is never printed and an ``s 1`` under it is
  EINVAL (``smu_v13_0_0_get_od_setting_limits``; ``sienna_cichlid_od_setting_check_range``);
* ``s`` values are parsed as amdgpu_set_pp_od_clk_voltage parses them (kstrtol base 0: ``0x7d0`` is 2000);
  Fmin > Fmax is EINVAL (smu13 at the edit and at the commit; navi10/sienna_cichlid at the edit);
* ``r`` restores the boot table into the edit buffer; on sienna_cichlid and smu13 it also commits;
* the performance level is taken by prefix (amdgpu_set_power_dpm_force_performance_level); a ``pp_dpm_sclk``
  mask only while it is ``manual`` (EINVAL otherwise);
* what ``Board`` adds, each a knob of ``[simulate.kernel]``: the unprinted Fmax minimum, a PMFW that ignores a
  new maximum, a commit that drops a forced performance level;
* a GPU reset (``reset``) puts the firmware's table and ``auto`` back, as a real reset does.

The state of each OD table (the boot table, what is committed, the edit buffer, what the firmware runs) is kept
in ``<root>/.sim-kernel.json`` beside the tree, so a second process over the same tree (`gpuwatch restore`
after the daemon died, a test playing another tool) sees the same kernel; each operation holds a lock on
``.sim-kernel.lock`` as the driver holds its mutex. A table someone rewrote as a plain file (a test playing a GPU
reset or another tool) is taken as committed, as it prints.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from gpuwatch.sysfs import Sysfs, SysfsError

OD, LEVEL, SCLK = "pp_od_clk_voltage", "power_dpm_force_performance_level", "pp_dpm_sclk"
# amdgpu_set_power_dpm_force_performance_level (amdgpu_pm.c): each name compared with strncmp(name, buf,
# strlen(name)), in this order, so "highest" is high and "manual\n" manual.
LEVELS = ("low", "high", "auto", "manual", "profile_exit", "profile_standard", "profile_min_sclk",
          "profile_min_mclk", "profile_peak", "perf_determinism")
STATE_FILE, LOCK_FILE = ".sim-kernel.json", ".sim-kernel.lock"
Firmware = Literal["smu13", "sienna_cichlid", "navi10"]
_SCLK = re.compile(r"^OD_SCLK:\n0: (\d+)Mhz\n1: (\d+)Mhz\n", re.MULTILINE)
_RANGE = re.compile(r"^SCLK:\s+(\d+)Mhz\s+(\d+)Mhz$", re.MULTILINE)
_KSTRTOL = re.compile(r"^[+-]?(0[xX][0-9a-fA-F]+|0[0-7]*|[1-9][0-9]*)$")


@dataclass(frozen=True)
class Board:
    """What a simulated board's firmware does that its files do not print (``[simulate.kernel]``)."""

    firmware: Firmware = "smu13"
    fmax_min_mhz: int | None = None  # GfxclkFmax's unprinted minimum (None: OD_RANGE's low end)
    ignores_fmax: bool = False  # the PMFW takes a committed maximum and keeps running at the old one
    commit_sets_level: str | None = None  # a forced performance level an OD commit puts back to this


@dataclass
class OdState:
    """One OD table as the driver keeps it (MHz pairs [Fmin, Fmax])."""

    boot: list[int]
    committed: list[int]
    edit: list[int]
    running_max: int  # the maximum the firmware runs at (the committed one, unless it ignores it)
    printed: str
    board: dict[str, Any] = field(default_factory=dict)


def kstrtol(token: str) -> int:
    """kstrtol(s, 0, &v) (lib/kstrtox.c): ``0x`` hex, a leading ``0`` octal, else decimal, one sign; ValueError."""
    if not _KSTRTOL.match(token):
        raise ValueError(token)
    return int(token, 0) if not re.match(r"^[+-]?0[0-7]+$", token) else int(token.replace("0", "0o", 1), 0)


def od_command(buf: str) -> tuple[str, list[int]]:
    """``amdgpu_set_pp_od_clk_voltage``'s parse (amdgpu_pm.c): at most 127 bytes, the type from the *first*
    byte (no leading space skipped; ``vc``/``vo`` two), then the rest split at spaces and newlines and every
    token through kstrtol(token, 0); anything else is EINVAL (ValueError here)."""
    if not 0 < len(buf) <= 127:
        raise ValueError("length")
    kind = buf[:2] if buf[:2] in ("vc", "vo") else buf[:1]
    if kind not in ("s", "m", "p", "r", "c", "vc", "vo"):
        raise ValueError(kind)
    return kind, [kstrtol(token) for token in re.split(r"[ \n]", buf[len(kind):]) if token]


class KernelSysfs(Sysfs):
    """A Sysfs over the simulator's tree whose clock files behave as amdgpu's (module docstring)."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        super().__init__(root)
        self._lock = threading.RLock()
        self.masks: dict[str, tuple[int, ...]] = {}  # the pp_dpm_sclk mask in force, by device directory
        self.boards: dict[str, Board] = {}  # set by the simulator for its cards
        self._cache: tuple[tuple[int, int, int], str] | None = None  # the state file's (identity, text)
        self._keys: dict[str, str] = {}

    @contextmanager
    def _locked(self) -> Iterator[None]:
        """This process's threads and every other process over the tree, one at a time (the driver's mutex)."""
        with self._lock, open(self.path(LOCK_FILE), "a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            yield

    # -- the writes -----------------------------------------------------------------------------------

    def write(self, relative: str, value: str) -> None:
        device, _, name = relative.rpartition("/")
        if name not in (OD, LEVEL, SCLK):
            super().write(relative, value)
            return
        with self._locked():
            if name == LEVEL:
                self._level(relative, device, value)
            elif name == SCLK:
                command = value.strip()
                if self.read(f"{device}/{LEVEL}") != "manual" or not command.replace(" ", "").isdigit():
                    raise SysfsError(relative, "EINVAL")
                self.masks[device] = tuple(int(index) for index in command.split())
            else:
                self._od(relative, device, value)

    def _level(self, relative: str, device: str, value: str) -> None:
        # amdgpu_set_power_dpm_force_performance_level: the first name ``value`` starts with, else EINVAL.
        level = next((name for name in LEVELS if value.startswith(name)), None)
        if level is None:
            raise SysfsError(relative, "EINVAL")
        if level == "profile_exit":  # leaves a profile_* level for the one before it (auto here)
            level = "auto"
        super().write(relative, level + "\n")
        if level != "manual":
            self.masks.pop(device, None)

    def _od(self, relative: str, device: str, value: str) -> None:
        states = self._load()
        state = self._state(states, relative, device)
        if state is None:
            raise SysfsError(relative, "EINVAL")
        board = Board(**state.board)
        try:
            kind, params = od_command(value)
        except ValueError:
            raise SysfsError(relative, "EINVAL") from None
        try:
            if kind == "s":
                self._edit(relative, state, board, params)
            elif kind == "r":
                # navi10_od_edit_dpm_table: the boot table back into the edit buffer, nothing more;
                # sienna_cichlid_od_edit_dpm_table and smu_v13_0_0_od_edit_dpm_table: memcpy from
                # boot_overdrive_table, then ``fallthrough`` into the commit.
                state.edit = list(state.boot)
                if board.firmware != "navi10":
                    self._commit(relative, device, state, board)
            elif kind == "c":
                self._commit(relative, device, state, board)
            else:
                raise SysfsError(relative, "EINVAL")  # m/p/vc/vo: not played here
        finally:
            self._print(relative, state)
            states[self._key(relative)] = state
            self._save(states)

    def _edit(self, relative: str, state: OdState, board: Board, params: list[int]) -> None:
        """``s <0|1> <MHz> [...]``, pairs in order, as the firmware's ``*_od_edit_dpm_table`` checks them."""
        text = state.printed
        limits = _RANGE.search(text)
        assert limits is not None
        low, high = int(limits.group(1)), int(limits.group(2))
        # GfxclkFmin's limits are [OD_RANGE low, ...], GfxclkFmax's [unprinted minimum, OD_RANGE high]
        # (smu_v13_0_0_get_od_setting_limits; sienna_cichlid_get_od_setting_range: OD_RANGE prints only
        # Fmin's minimum and Fmax's maximum).
        limit = {0: (low, high), 1: (board.fmax_min_mhz or low, high)}
        if len(params) % 2:  # "invalid number of input parameters"
            raise SysfsError(relative, "EINVAL")
        for index, mhz in zip(params[::2], params[1::2], strict=True):
            if index not in limit:  # "Invalid SCLK_VDDC_TABLE index"
                raise SysfsError(relative, "EINVAL")
            if board.firmware != "smu13":
                # navi10_od_edit_dpm_table / sienna_cichlid_od_edit_dpm_table: Fmin <= Fmax checked against the
                # other value before the range, nothing stored on EINVAL.
                if (index == 0 and mhz > state.edit[1]) or (index == 1 and mhz < state.edit[0]):
                    raise SysfsError(relative, "EINVAL")
            if not limit[index][0] <= mhz <= limit[index][1]:  # "must be within [%u, %u]"
                raise SysfsError(relative, "EINVAL")
            state.edit[index] = mhz
        if state.edit[0] > state.edit[1]:
            # smu_v13_0_0_od_edit_dpm_table: the values are stored, *then* "GfxclkFmin(%u) is bigger than
            # GfxclkFmax(%u)" returns -EINVAL; the edit buffer keeps them.
            raise SysfsError(relative, "EINVAL")

    def _commit(self, relative: str, device: str, state: OdState, board: Board) -> None:
        """``c`` (PP_OD_COMMIT_DPM_TABLE): the edit buffer uploaded (smu_v13_0_0_upload_overdrive_table,
        smu_cmn_update_table) and kept as user_overdrive_table; a table with Fmin > Fmax is refused (EINVAL)."""
        if state.edit[0] > state.edit[1]:
            raise SysfsError(relative, "EINVAL")
        state.committed = list(state.edit)
        if not board.ignores_fmax:  # amdgpu-clocks #73, drm/amd #3625: RDNA3's PMFW may keep the old maximum
            state.running_max = state.committed[1]
        if board.commit_sets_level and self.exists(f"{device}/{LEVEL}"):
            # LACT #294/#298, #675/#677: the READJUST_POWER_STATE task of the commit (amdgpu_pm.c) drops a
            # forced level.
            Sysfs.write(self, f"{device}/{LEVEL}", board.commit_sets_level + "\n")

    # -- the state ------------------------------------------------------------------------------------

    def board(self, device_dir: str, board: Board) -> None:
        """The firmware's behaviour for the OD table of ``device_dir`` (the simulator, at start)."""
        with self._locked():
            self.boards[self._key(f"{device_dir}/{OD}")] = board
            states = self._load()
            state = self._state(states, f"{device_dir}/{OD}", device_dir)
            if state is not None:
                state.board = asdict(board)
                states[self._key(f"{device_dir}/{OD}")] = state
                self._save(states)

    def _key(self, relative: str) -> str:
        """The table's link-free path (the daemon and the simulator name a card's directory differently)."""
        key = self._keys.get(relative)
        if key is None:
            key = self.resolve(relative)
            if key is None:
                return relative
            self._keys[relative] = key
        return key

    def _state(self, states: dict[str, OdState], relative: str, device: str) -> OdState | None:
        """The table's state; a file that prints something else than we last printed (rewritten as a plain
        file) is taken as committed, edit buffer and running alike. None: no OD_SCLK/OD_RANGE to play."""
        del device
        text = (self.read(relative) or "") + "\n"
        found = _SCLK.search(text)
        if found is None or _RANGE.search(text) is None:
            return None
        key = self._key(relative)
        state = states.get(key)
        table = [int(found.group(1)), int(found.group(2))]
        if state is None:
            board = self.boards.get(key, Board())
            return OdState(list(table), list(table), list(table), table[1], text, asdict(board))
        if state.printed != text:
            state.committed, state.edit, state.running_max, state.printed = list(table), list(table), table[1], text
        return state

    def _print(self, relative: str, state: OdState) -> None:
        low, high = state.edit
        text = _SCLK.sub(f"OD_SCLK:\n0: {low}Mhz\n1: {high}Mhz\n", state.printed, count=1)
        Sysfs.write(self, relative, text.rstrip("\n") + "\n")
        state.printed = text.rstrip("\n") + "\n"

    def _load(self) -> dict[str, OdState]:
        """Every table's state, as the file holds it now (read again only when it was replaced)."""
        path = self.path(STATE_FILE)
        try:
            st = os.stat(path)
            identity = (st.st_ino, st.st_mtime_ns, st.st_size)
            if self._cache is None or self._cache[0] != identity:
                self._cache = identity, path.read_text()
            raw = json.loads(self._cache[1])
        except (OSError, ValueError):
            return {}
        return {key: OdState(**value) for key, value in raw.items()} if isinstance(raw, dict) else {}

    def _save(self, states: dict[str, OdState]) -> None:
        path = self.path(STATE_FILE)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}")
        tmp.write_text(json.dumps({key: asdict(state) for key, state in states.items()}))
        os.replace(tmp, path)

    # -- what the simulated card reads ----------------------------------------------------------------

    def od_max_mhz(self, device_dir: str) -> int | None:
        """The maximum the firmware runs at (None: the card has no OD table). The simulated card's own reading:
        a table that is no regular file (a test's FIFO, playing a driver call that never returns to the daemon)
        is none here, so the card goes on where only the daemon's I/O hangs."""
        path = f"{device_dir}/{OD}"
        if not os.path.isfile(self.path(path)):
            return None
        with self._lock:  # a read of a file replaced whole (os.replace): no other process can tear it
            state = self._state(self._load(), path, device_dir)
        return None if state is None else state.running_max

    def od_committed_mhz(self, device_dir: str) -> tuple[int, int] | None:
        """The committed (Fmin, Fmax), which no file prints (tests)."""
        path = f"{device_dir}/{OD}"
        with self._locked():
            state = self._state(self._load(), path, device_dir)
        return None if state is None else (state.committed[0], state.committed[1])

    def reset(self, device_dir: str) -> None:
        """A GPU reset: the firmware's table and the firmware's DPM back."""
        with self._locked():
            path = f"{device_dir}/{OD}"
            states = self._load()
            if os.path.isfile(self.path(path)) and (state := self._state(states, path, device_dir)) is not None:
                state.committed, state.edit, state.running_max = list(state.boot), list(state.boot), state.boot[1]
                self._print(path, state)
                states[self._key(path)] = state
                self._save(states)
            if self.exists(f"{device_dir}/{LEVEL}"):
                Sysfs.write(self, f"{device_dir}/{LEVEL}", "auto\n")
            self.masks.pop(device_dir, None)
