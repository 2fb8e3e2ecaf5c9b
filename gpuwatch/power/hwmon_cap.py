"""amdgpu's hwmon ``power1_cap`` as a cap backend (the one write path on AMD GPUs).

Kernel facts (Documentation/gpu/amdgpu/thermal.rst; ``amdgpu_hwmon_set_power_cap`` in
drivers/gpu/drm/amd/pm/amdgpu_pm.c), checked on the 22 captures in tests/fixtures/amdgpu:

* microwatts in and out; the attribute is 0644 (root writes); ``kstrtou32`` parses it, garbage is EINVAL;
* the value is truncated to whole watts (``value / 1000000``), so whole watts are written and a
  readback of exactly that is expected;
* swsmu (Navi and newer) answers EINVAL out of [power1_cap_min, power1_cap_max]; EPERM during a GPU
  reset or suspend; EINVAL on an SR-IOV VF; very old swsmu code ignored the SMU's answer, so a write
  could "succeed" and change nothing: hence the readback;
* power1_cap_min reads 0 on many boards (Navi 21, RDNA4, Polaris, Vega): the floor comes from the default;
* on VanGogh (Steam Deck) power1 is slowPPT, an APU package limit shared with the CPU: not governed;
* ``power1_cap`` prints an empty line when the SMU's limit query fails (SYSFS_FACTS.md §2,
  ``amdgpu_hwmon_show_power_cap_generic``), e.g. while the SMU is busy at boot: the probe raises
  SettingWriteError (retried next tick, like any read error), where only a missing file is "no cap" for good.

The card's directories come from the amdgpu source by PCI slot on every call (``locate``), so a GPU that
comes back under another hwmon index after a reset is written where it now is.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from gpuwatch.actuation.setting import SettingUnavailable, SettingWriteError
from gpuwatch.gpus.amdgpu import Locate
from gpuwatch.model import GpuReading, PowerCapBackendName
from gpuwatch.power.backend import CapRange
from gpuwatch.sysfs import Sysfs, SysfsError

UW_PER_W = 1_000_000
# Errors that say the driver will never take the value (EACCES: not root; EINVAL: refused or a VF).
PERMANENT = {"EACCES", "EINVAL", "EROFS"}
APU_LABELS = {"slowPPT", "fastPPT"}


@dataclass(frozen=True)
class HwmonCapRestore:
    """The ``power1_cap`` found before the first write; the slot is the restore file's key, the path only a
    hint for a restore that cannot find the slot any more."""

    backend: ClassVar[str] = "hwmon"
    cap_uw: int | None
    path: str | None = None

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> HwmonCapRestore:
        cap, path = data.get("cap_uw"), data.get("path")
        return cls(cap if isinstance(cap, int) and cap > 0 else None, path if isinstance(path, str) else None)

    def to_json(self) -> dict[str, Any]:
        return {"backend": self.backend, "cap_uw": self.cap_uw, "path": self.path}

    @property
    def original_w(self) -> float | None:
        return None if self.cap_uw is None else self.cap_uw / UW_PER_W

    def handed_back(self) -> str:
        return f"power cap back to its original {self.original_w:g} W"


class HwmonCap:
    name: PowerCapBackendName = "hwmon"
    cap_in_reading = True  # the sampler reads power1_cap every tick

    def __init__(self, sysfs: Sysfs, gpu_id: str, locate: Locate, check_access: bool = True) -> None:
        self.sysfs = sysfs
        self.gpu_id = gpu_id
        self.locate = locate
        self.check_access = check_access

    def path(self, name: str = "power1_cap") -> str:
        """``name`` in the card's hwmon directory as the amdgpu source sees it now."""
        card = self.locate(self.gpu_id)
        if card is None or card.hwmon_dir is None:
            raise SettingWriteError(f"GPU {self.gpu_id} has no hwmon directory now")
        return f"{card.hwmon_dir}/{name}"

    def probe(self) -> CapRange:
        try:
            cap_path = self.path()
        except SettingWriteError:
            raise SettingUnavailable("no hwmon node: nothing to cap") from None
        cap_uw = self._cap_uw(cap_path)
        if cap_uw is None:
            raise SettingUnavailable("the board exposes no power1_cap (no power limit to lower)")
        label = self._text(self.path("power1_label"))
        if label in APU_LABELS:
            raise SettingUnavailable(f"power1 is {label}, an APU package limit shared with the CPU: not governed")
        if self.check_access and not self.sysfs.writable(cap_path):
            raise SettingUnavailable("power1_cap is not writable (run gpuwatch as root)")
        return CapRange(
            cap_w=cap_uw / UW_PER_W,
            min_w=_watts(self._number(self.path("power1_cap_min"))),
            max_w=_watts(self._number(self.path("power1_cap_max"))),
            default_w=_watts(self._number(self.path("power1_cap_default"))),
        )

    def current_w(self, gpu: GpuReading) -> float | None:
        return gpu.power_cap_w  # the sampler read power1_cap this tick

    def write(self, cap_w: float) -> float:
        path = self.path()
        try:
            self.sysfs.write(path, str(round(cap_w * UW_PER_W)))
        except SysfsError as exc:
            if exc.reason in PERMANENT:
                raise SettingUnavailable(f"power1_cap refuses writes ({exc.reason})") from None
            raise SettingWriteError(f"power1_cap write failed: {exc.reason}") from None
        back = self._number(path)
        if back is None:
            raise SettingWriteError("power1_cap unreadable after the write")
        return back / UW_PER_W

    def record(self, original_w: float) -> HwmonCapRestore:
        return HwmonCapRestore(round(original_w * UW_PER_W), self.path())

    def _text(self, path: str) -> str | None:
        try:
            return self.sysfs.read(path)
        except SysfsError:
            return None

    def _cap_uw(self, path: str) -> int | None:
        """The cap in force for the probe; None when the file is absent (the board has none). Empty, a read
        error or garbage: SettingWriteError, worth another try next tick."""
        try:
            text = self.sysfs.read(path)
        except SysfsError as exc:
            raise SettingWriteError(f"power1_cap unreadable ({exc.reason})") from None
        if text is None:
            return None
        if not text:
            raise SettingWriteError("power1_cap is empty (the driver's power limit query failed)")
        if not (text.isascii() and text.isdigit()):
            raise SettingWriteError(f"power1_cap reads {text[:24]!r}, not a power limit")
        return int(text)

    def _number(self, path: str) -> int | None:
        text = self._text(path)
        try:
            return int(text) if text else None
        except ValueError:
            return None


def _watts(uw: int | None) -> float | None:
    return None if uw is None else uw / UW_PER_W
