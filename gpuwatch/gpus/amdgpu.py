"""amdgpu discovery and parsing: sysfs/hwmon files -> GpuReading, kernel units converted once (the
source that reads every card each tick is amdgpu_source.py).

Facts relied on (tests/fixtures/amdgpu/SYSFS_FACTS.md): cards are ``class/drm/card<N>`` with any
number of digits (procfs' ``card[0-9]`` glob misses card10, §1); the driver is ``DRIVER=`` in
``device/uevent``; hwmon is found by its ``name`` file, its index is not stable (§7.1); temperatures are
m°C, power µW, clocks Hz, voltage mV (§4); ``*_crit_hyst`` of -273150 means none (§7.3);
power1_average is preferred with power1_input as fallback (§7.4); reads of hwmon wake a
runtime-suspended GPU, so a suspended one is not read (§2). gpus/telemetry.py and gpus/pcie.py add the rest.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from gpuwatch.gpus.pcie import AER_KINDS, FixedPcie, fixed_pcie, link_speed, read_pcie
from gpuwatch.gpus.pciids import gpu_name
from gpuwatch.gpus.source import DiscoveryResult
from gpuwatch.gpus.telemetry import GpuMetricsReader
from gpuwatch.model import GpuReading, ReadError, TempReading, UnsupportedCard, replaced
from gpuwatch.sysfs import Sysfs, SysfsError

_CARD = re.compile(r"^card\d+$")
_NO_HYST_MC = -273150
# Label files are authoritative; the index mapping is the fallback amdgpu always uses (§4.1).
_TEMP_LABELS = {1: "edge", 2: "junction", 3: "mem"}
# Each sensor's files, named once: (default label, input, label, crit, crit_hyst, emergency).
_TEMP_FILES = tuple((label, *(f"temp{index}_{kind}" for kind in ("input", "label", "crit", "crit_hyst", "emergency")))
                    for index, label in _TEMP_LABELS.items())

T = TypeVar("T")

# Attributes fixed while the driver is bound (identity, board limits, sensor labels and crit points).
# The source reads them once per discovery instead of every tick: they were more than half of the
# ~47 opens per GPU per tick (docs/performance.md). Re-discovery (every 30 s, and whenever a card
# vanishes) reads them again. Read errors are never remembered, so a failing one is retried (and
# reported) every tick as before. power1_cap, the link's current speed and runtime_status do change.
# A file found absent is remembered as absent the same way, whatever its name: which attributes a card
# has is decided when the driver registers them at probe (drivers/gpu/drm/amd/pm/amdgpu_pm.c:
# hwmon_attributes_visible for hwmon, amdgpu_device_attr_create_groups for the device's own) and changes
# only with a re-probe, which re-discovers (a new hwmon index, a card that vanished), or at the periodic
# re-discovery. An absent power1_average or pcie_replay_count was an open that failed every tick. Not
# power/runtime_status: the PM core's group (drivers/base/power/sysfs.c), not amdgpu's, and the file that
# says whether any other read may wake the GPU, so it is looked for every tick.
READ_EVEN_IF_ABSENT = frozenset({"power/runtime_status"})
STATIC_ATTRIBUTES = frozenset(
    {
        "product_name", "unique_id", "vbios_version", "max_link_speed", "max_link_width", "vendor", "class",
        "mem_info_vram_total", "mem_info_gtt_total",
        "power1_cap_min", "power1_cap_max", "power1_cap_default",
        "pwm1_min", "pwm1_max", "fan1_min", "fan1_max",
        *(f"temp{i}_{kind}" for i in (1, 2, 3) for kind in ("label", "crit", "crit_hyst", "emergency")),
        *AER_KINDS.values(),  # not fixed, but read once per discovery too: see gpus/pcie.py
    }
)

# Number files the kernel may leave empty to say "no value" (SYSFS_FACTS.md §2, K-PM-6.4
# amdgpu_hwmon_show_power_cap_generic); an empty file anywhere else is a read error.
EMPTY_MEANS_NO_VALUE = frozenset({"power1_cap", "power1_cap_min", "power1_cap_max", "power1_cap_default"})


@dataclass(frozen=True)
class AmdCard:
    """A discovered amdgpu card: where to read it (paths relative to the sysfs root)."""

    gpu_id: str
    card: str
    device_dir: str
    hwmon_dir: str | None
    device_id: str | None
    subsystem_id: str | None

    def __str__(self) -> str:
        return f"{self.card}, {self.hwmon_dir.rsplit('/', 1)[-1] if self.hwmon_dir else 'no hwmon'}"


Locate = Callable[[str], AmdCard | None]  # a card by PCI slot, where it is now (the daemon's amdgpu source)


def discovered_once(sysfs: Sysfs) -> Locate:
    """A card by PCI slot, from the cards discovered at the first call (`gpuwatch restore`: its hwmon index
    may have changed since the record was written; every GPU's worker asks at once)."""
    lock = threading.Lock()
    found: list[dict[str, AmdCard]] = []

    def locate(gpu_id: str) -> AmdCard | None:
        with lock:
            if not found:
                found.append({card.gpu_id: card for card in discover(sysfs).cards})
        return found[0].get(gpu_id)

    return locate


def discover(sysfs: Sysfs) -> DiscoveryResult[AmdCard]:
    """Every amdgpu card once (by PCI slot), plus the DRM cards of other drivers."""
    cards: list[AmdCard] = []
    unsupported: list[UnsupportedCard] = []
    seen: set[str] = set()
    for entry in sorted(sysfs.list("class/drm"), key=_card_number):
        if not _CARD.match(entry):
            continue
        device_dir = sysfs.resolve(f"class/drm/{entry}/device")
        try:
            uevent = _parse_uevent(sysfs.read(f"class/drm/{entry}/device/uevent") or "")
        except SysfsError:
            uevent = {}
        if device_dir is None:
            continue
        slot = uevent.get("PCI_SLOT_NAME") or device_dir.rstrip("/").rsplit("/", 1)[-1]
        if slot in seen:
            continue
        seen.add(slot)
        driver = uevent.get("DRIVER")
        if driver != "amdgpu":
            unsupported.append(UnsupportedCard(card=entry, driver=driver, gpu_id=slot))
            continue
        cards.append(
            AmdCard(
                gpu_id=slot,
                card=entry,
                device_dir=device_dir,
                hwmon_dir=_find_hwmon(sysfs, device_dir),
                device_id=uevent.get("PCI_ID"),
                subsystem_id=uevent.get("PCI_SUBSYS_ID"),
            )
        )
    return DiscoveryResult(cards=tuple(cards), unsupported=tuple(unsupported))


def read_card(sysfs: Sysfs, card: AmdCard, static: Remembered | None = None,
              metrics: GpuMetricsReader | None = None) -> GpuReading:
    """One full reading of ``card``; never raises for a read error, it records it instead.

    ``static`` (directory -> its ``Directory``) remembers each file's path, the STATIC_ATTRIBUTES read so
    far and the files found absent; pass the same dict on every tick (until the next discovery) to skip
    re-reading them, None to read everything; ``metrics`` likewise for gpu_metrics. Once every fixed attribute
    the reading shows is remembered and gives its value without an error, the fields they make are kept
    (``_Kept``) and only the files that move are read and set on them, in the same order (the same errors):
    making those fields again was a third of a steady read's Python (docs/performance.md, round 6).
    """
    reader = _Reader(sysfs, card.device_dir, static=static)
    hwmon_dir = card.hwmon_dir or ""
    hwmon_there = bool(hwmon_dir) and sysfs.exists(hwmon_dir)
    # A path resolves only through every directory above it: a hwmon directory found below the device's
    # (_find_hwmon) that is there says the device's is there too (one stat a tick instead of two).
    if not (hwmon_there and hwmon_dir.startswith(card.device_dir + "/")) and not sysfs.exists(card.device_dir):
        return GpuReading(gpu_id=card.gpu_id, card=card.card, backend="amdgpu", device_id=card.device_id, up=False)
    if card.hwmon_dir and not hwmon_there:
        # The driver is re-probing the card (its hwmon comes back under a new index, §7.1).
        return GpuReading(gpu_id=card.gpu_id, card=card.card, backend="amdgpu", device_id=card.device_id, up=False,
                          errors=(ReadError("device", "hwmon directory vanished (driver re-probe?)"),))
    runtime_status = reader.text("power/runtime_status")
    kept = reader.directory.kept
    if kept is not None:
        return _steady(sysfs, card, reader, kept, runtime_status, static, metrics)
    identity: dict[str, Any] = dict(
        gpu_id=card.gpu_id,
        card=card.card,
        backend="amdgpu",
        name=reader.text("product_name") or gpu_name(card.device_id),
        device_id=card.device_id,
        subsystem_id=card.subsystem_id,
        unique_id=reader.text("unique_id") or None,
        vbios_version=reader.text("vbios_version") or None,
        runtime_status=runtime_status,
    )
    if runtime_status == "suspended":
        return GpuReading(**identity, errors=tuple(reader.errors))
    hw = _Reader(sysfs, card.hwmon_dir, reader.errors, static) if card.hwmon_dir else None

    def reader_for(base: str) -> _Reader:
        return _Reader(sysfs, base, reader.errors, static)

    link = reader.number("current_link_speed", link_speed), reader.number("current_link_width", int)
    reading = replaced(
        _BLANK,
        **identity,
        gpu_busy_ratio=_ratio(reader.number("gpu_busy_percent", int)),
        mem_busy_ratio=_ratio(reader.number("mem_busy_percent", int)),
        vram_used_bytes=reader.number("mem_info_vram_used", int),
        vram_total_bytes=reader.number("mem_info_vram_total", int),
        gtt_used_bytes=reader.number("mem_info_gtt_used", int),
        gtt_total_bytes=reader.number("mem_info_gtt_total", int),
        pcie_link_speed_gts=link[0],
        pcie_link_width=link[1],
        pcie_max_link_speed_gts=reader.number("max_link_speed", link_speed),
        pcie_max_link_width=reader.number("max_link_width", int),
        **read_pcie(reader_for, card.device_dir, link, _fixed_pcie(reader, reader_for, card.device_dir)),
        **(_hwmon_fields(hw) if hw else {}),
        # Keyword arguments are evaluated in order, so this sees every error recorded above.
        errors=tuple(reader.errors),
    )
    if static is not None:
        reader.directory.kept = _kept(sysfs, card, static)
    return (metrics or GpuMetricsReader()).read(sysfs, reading, card.device_dir,
                                                reader.directory.texts if reader.remembers else None)


# The fixed attributes' files a reading shows (all STATIC_ATTRIBUTES), by directory, besides the temperature
# sensors': once every one is remembered and gives its value without an error, the fields made of them are kept
# (``_Kept``) until the next discovery.
_DEVICE_FIXED = ("product_name", "unique_id", "vbios_version", "mem_info_vram_total", "mem_info_gtt_total",
                 "max_link_speed", "max_link_width")
_HWMON_FIXED = ("power1_cap_min", "power1_cap_max", "power1_cap_default", "fan1_min", "fan1_max", "pwm1_min",
                "pwm1_max")


class _Kept:
    """A card's reading as far as its fixed attributes make it (every field they give set on a blank reading),
    the same with its identity alone (a suspended card's), and each temperature sensor's fixed part: (default
    label, input file, label, crit, crit_hyst, emergency)."""

    __slots__ = ("blank", "asleep", "temps")

    def __init__(self, blank: GpuReading, asleep: GpuReading,
                 temps: tuple[tuple[str, str, str | None, float | None, float | None, float | None], ...]) -> None:
        self.blank = blank
        self.asleep = asleep
        self.temps = temps


def _kept(sysfs: Sysfs, card: AmdCard, static: Remembered) -> _Kept | None:
    """What ``read_card`` keeps of a card once every fixed attribute it shows is remembered and gives its value
    without an error (the PCIe part too); None until then (a failing or garbage one is read, or parsed, and
    reported every tick as before). Reads nothing: every value comes from the texts remembered."""
    device = static.get(card.device_dir)
    hwmon = static.get(card.hwmon_dir) if card.hwmon_dir else None
    if device is None or device.pcie is None or any(name not in device.texts for name in _DEVICE_FIXED):
        return None
    if card.hwmon_dir and (hwmon is None or any(name not in hwmon.texts for name in _HWMON_FIXED)):
        return None
    errors: list[ReadError] = []
    reader = _Reader(sysfs, card.device_dir, errors, static)
    identity: dict[str, Any] = dict(
        gpu_id=card.gpu_id, card=card.card, backend="amdgpu",
        name=reader.text("product_name") or gpu_name(card.device_id), device_id=card.device_id,
        subsystem_id=card.subsystem_id, unique_id=reader.text("unique_id") or None,
        vbios_version=reader.text("vbios_version") or None,
    )
    fields: dict[str, Any] = dict(
        identity,
        vram_total_bytes=reader.number("mem_info_vram_total", int),
        gtt_total_bytes=reader.number("mem_info_gtt_total", int),
        pcie_max_link_speed_gts=reader.number("max_link_speed", link_speed),
        pcie_max_link_width=reader.number("max_link_width", int),
        **device.pcie.fields,
    )
    temps = []
    if card.hwmon_dir:
        hw = _Reader(sysfs, card.hwmon_dir, errors, static)
        fields.update(
            power_cap_min_w=_scaled(hw.number("power1_cap_min", int), 1e-6),
            power_cap_max_w=_scaled(hw.number("power1_cap_max", int), 1e-6),
            power_cap_default_w=_scaled(hw.number("power1_cap_default", int), 1e-6),
            fan_min_rpm=hw.number("fan1_min", int), fan_max_rpm=hw.number("fan1_max", int),
            pwm_min=hw.number("pwm1_min", int), pwm_max=hw.number("pwm1_max", int),
        )
        texts = hw.directory.texts
        for default_label, input_file, label_file, crit_file, hyst_file, emergency_file in _TEMP_FILES:
            if label_file not in texts:
                return None
            label = texts[label_file] or None
            if label is None and input_file in texts and texts[input_file] is None:
                continue  # neither file is there (remembered): never shown, its limits never read (_temps)
            if any(name not in texts for name in (crit_file, hyst_file, emergency_file)):
                return None
            hyst_mc = hw.number(hyst_file, int)
            temps.append((default_label, input_file, label,
                          _scaled(hw.number(crit_file, int), 1e-3),
                          None if hyst_mc in (None, _NO_HYST_MC) else hyst_mc / 1000,
                          _scaled(hw.number(emergency_file, int), 1e-3)))
    if errors:
        return None
    return _Kept(replaced(_BLANK, **fields), replaced(_BLANK, **identity), tuple(temps))


def _steady(sysfs: Sysfs, card: AmdCard, reader: _Reader, kept: _Kept, runtime_status: str | None,
            static: Remembered | None, metrics: GpuMetricsReader | None) -> GpuReading:
    """``read_card`` once its fixed part is kept: the files that move, read in the same order as the full read
    (so its errors come in the same order), set on the kept reading."""
    blank = kept.blank
    if runtime_status == "suspended":
        return replaced(kept.asleep, runtime_status=runtime_status, errors=tuple(reader.errors))
    link = reader.number("current_link_speed", link_speed), reader.number("current_link_width", int)
    fields: dict[str, Any] = dict(
        runtime_status=runtime_status,
        gpu_busy_ratio=_ratio(reader.number("gpu_busy_percent", int)),
        mem_busy_ratio=_ratio(reader.number("mem_busy_percent", int)),
        vram_used_bytes=reader.number("mem_info_vram_used", int),
        gtt_used_bytes=reader.number("mem_info_gtt_used", int),
        pcie_link_speed_gts=link[0],
        pcie_link_width=link[1],
    )

    def reader_for(base: str) -> _Reader:
        return _Reader(sysfs, base, reader.errors, static)

    pcie = reader.directory.pcie
    assert pcie is not None  # a kept card's fixed PCIe part is kept too (_kept)
    if pcie.link_dir != card.device_dir:
        slot = reader_for(pcie.link_dir)
        fields["pcie_slot_link_speed_gts"] = slot.number("current_link_speed", link_speed)
        fields["pcie_slot_link_width"] = slot.number("current_link_width", int)
    else:
        fields["pcie_slot_link_speed_gts"], fields["pcie_slot_link_width"] = link
    fields["pcie_replays_total"] = reader.number("pcie_replay_count", int)
    if card.hwmon_dir:
        hw = reader_for(card.hwmon_dir)
        power_uw = _power_uw(hw)
        temps = []
        for default_label, input_file, label, crit_c, hyst_c, emergency_c in kept.temps:
            temp_mc = hw.number(input_file, int)
            if temp_mc is None and label is None and not hw.failed(input_file):
                continue
            temps.append(TempReading(label or default_label, _scaled(temp_mc, 1e-3), crit_c, hyst_c, emergency_c))
        fields.update(
            temps=tuple(temps),
            power_w=_scaled(power_uw, 1e-6),
            power_cap_w=_scaled(hw.number("power1_cap", int), 1e-6),
            sclk_hz=_scaled(hw.number("freq1_input", int), 1.0),
            mclk_hz=_scaled(hw.number("freq2_input", int), 1.0),
            vddgfx_v=_scaled(hw.number("in0_input", int), 1e-3),
            fan_rpm=hw.number("fan1_input", int),
            pwm=hw.number("pwm1", int),
            pwm_enable=hw.number("pwm1_enable", int),
        )
    reading = replaced(blank, **fields, errors=tuple(reader.errors))
    return (metrics or GpuMetricsReader()).read(sysfs, reading, card.device_dir, reader.directory.texts)


# Every field at its default: a reading is this with the tick's fields set (model.replaced), not a frozen
# dataclass's __init__ (an object.__setattr__ for each of GpuReading's ~65 fields, every GPU every tick).
_BLANK = GpuReading(gpu_id="", card="", backend="amdgpu")


def _fixed_pcie(reader: _Reader, reader_for: Callable[[str], _Reader], device_dir: str) -> FixedPcie:
    """gpus/pcie.py's fixed part, read once per discovery: kept in the device's Directory once it was read
    without an error (a failing file is read, and reported, again every tick as any other)."""
    fixed = reader.directory.pcie
    if fixed is None:
        errors = len(reader.errors)
        fixed = fixed_pcie(reader_for, device_dir)
        if reader.remembers and len(reader.errors) == errors:
            reader.directory.pcie = fixed
    return fixed


def _power_uw(hw: _Reader) -> int | None:
    """The board's power: power1_average, else power1_input (§7.4); the full read's and the steady read's."""
    power_uw = hw.number("power1_average", int)
    if power_uw is None:
        power_uw = hw.number("power1_input", int)
    return power_uw


def _hwmon_fields(hw: _Reader) -> dict[str, Any]:
    power_uw = _power_uw(hw)
    return dict(
        temps=_temps(hw),
        power_w=_scaled(power_uw, 1e-6),
        power_cap_w=_scaled(hw.number("power1_cap", int), 1e-6),
        power_cap_min_w=_scaled(hw.number("power1_cap_min", int), 1e-6),
        power_cap_max_w=_scaled(hw.number("power1_cap_max", int), 1e-6),
        power_cap_default_w=_scaled(hw.number("power1_cap_default", int), 1e-6),
        sclk_hz=_scaled(hw.number("freq1_input", int), 1.0),
        mclk_hz=_scaled(hw.number("freq2_input", int), 1.0),
        vddgfx_v=_scaled(hw.number("in0_input", int), 1e-3),
        fan_rpm=hw.number("fan1_input", int),
        fan_min_rpm=hw.number("fan1_min", int),
        fan_max_rpm=hw.number("fan1_max", int),
        pwm=hw.number("pwm1", int),
        pwm_min=hw.number("pwm1_min", int),
        pwm_max=hw.number("pwm1_max", int),
        pwm_enable=hw.number("pwm1_enable", int),
    )


def _temps(hw: _Reader) -> tuple[TempReading, ...]:
    temps = []
    for default_label, input_file, label_file, crit_file, hyst_file, emergency_file in _TEMP_FILES:
        temp_mc = hw.number(input_file, int)
        label = hw.text(label_file) or None
        if temp_mc is None and label is None and not hw.failed(input_file):
            continue
        hyst_mc = hw.number(hyst_file, int)
        temps.append(
            TempReading(
                label=label or default_label,
                temp_c=_scaled(temp_mc, 1e-3),
                crit_c=_scaled(hw.number(crit_file, int), 1e-3),
                crit_hyst_c=None if hyst_mc in (None, _NO_HYST_MC) else hyst_mc / 1000,
                emergency_c=_scaled(hw.number(emergency_file, int), 1e-3),
            )
        )
    return tuple(temps)


class Directory:
    """What is kept of one directory's files between discoveries: each file's path below the root, joined
    once; the texts remembered (STATIC_ATTRIBUTES, files found absent) and the numbers parsed from them."""

    __slots__ = ("base", "paths", "texts", "numbers", "pcie", "kept")

    def __init__(self, base: str) -> None:
        self.base = base
        self.paths: dict[str, str] = {}
        self.texts: dict[str, str | None] = {}
        self.numbers: dict[str, Any] = {}  # name -> parsed (or None for a file absent): one parse per discovery
        self.pcie: FixedPcie | None = None  # a GPU's device directory: gpus/pcie.py's fixed part (_fixed_pcie)
        self.kept: _Kept | None = None  # a GPU's device directory: the reading's fixed part (_kept)

    def path(self, name: str) -> str:
        path = self.paths.get(name)
        if path is None:
            path = self.paths[name] = f"{self.base}/{name}"
        return path


Remembered = dict[str, Directory]  # a card's directories by path (read_card's ``static``)


class _Reader:
    """Reads files of one directory, turning failures into ReadError records."""

    __slots__ = ("sysfs", "base", "errors", "_failed", "remembers", "directory")

    def __init__(
        self,
        sysfs: Sysfs,
        base: str,
        errors: list[ReadError] | None = None,
        static: Remembered | None = None,
    ) -> None:
        self.sysfs = sysfs
        self.base = base
        self.errors: list[ReadError] = [] if errors is None else errors
        self._failed: set[str] = set()
        self.remembers = static is not None
        directory = None if static is None else static.get(base)
        if directory is None:
            directory = Directory(base)
            if static is not None:
                static[base] = directory
        self.directory = directory

    def text(self, name: str) -> str | None:
        directory = self.directory
        texts = directory.texts
        if name in texts:
            return texts[name]
        try:
            value = self.sysfs.read(directory.paths.get(name) or directory.path(name))
        except SysfsError as exc:
            self._record(name, exc.reason)
            return None
        if self.remembers and (name in STATIC_ATTRIBUTES or value is None and name not in READ_EVEN_IF_ABSENT):
            texts[name] = value
        return value

    def number(self, name: str, parse: Callable[[str], T]) -> T | None:
        numbers = self.directory.numbers
        if name in numbers:
            return numbers[name]  # type: ignore[no-any-return]  # parsed by this same parse (no cast(): a call)
        text = self.text(name)
        if text is None:
            if name in self.directory.texts:
                numbers[name] = None
            return None  # absent: the card does not have this sensor
        if not text:
            # Empty is "no value" only where the kernel documents it (§2: power1_cap* print "\n" when
            # the limit query fails); anywhere else an empty number is a failed read, counted and shown.
            if name not in EMPTY_MEANS_NO_VALUE:
                self._record(name, "empty")
            return None
        try:
            value = parse(text)
        except ValueError:
            self._record(name, f"garbage: {text[:40]!r}")
            return None
        if name in self.directory.texts:
            numbers[name] = value  # a remembered text parses the same until the next discovery
        return value

    def failed(self, name: str) -> bool:
        return name in self._failed

    def _record(self, name: str, reason: str) -> None:
        self._failed.add(name)
        self.errors.append(ReadError(sensor=name, error=reason))


def _find_hwmon(sysfs: Sysfs, device_dir: str) -> str | None:
    """The hwmon node named ``amdgpu``; a node with no name file counts only if it is the only one.

    The name-less fallback exists because a real capture (navi32-rx7800xt-amd-reference) lacks the
    name file; a hwmon directory under an amdgpu PCI device is amdgpu's own.
    """
    nameless = []
    for entry in sysfs.list(f"{device_dir}/hwmon"):
        try:
            name = sysfs.read(f"{device_dir}/hwmon/{entry}/name")
        except SysfsError:
            continue
        if name == "amdgpu":
            return f"{device_dir}/hwmon/{entry}"
        if name is None:
            nameless.append(f"{device_dir}/hwmon/{entry}")
    return nameless[0] if len(nameless) == 1 else None


def _parse_uevent(text: str) -> dict[str, str]:
    pairs = (line.split("=", 1) for line in text.splitlines() if "=" in line)
    return {key.strip(): value.strip() for key, value in pairs}


def _card_number(entry: str) -> tuple[int, str]:
    digits = entry[4:]
    return (int(digits), entry) if digits.isdigit() else (1 << 30, entry)


def _ratio(percent: int | None) -> float | None:
    return None if percent is None else percent / 100.0


def _scaled(value: int | None, factor: float) -> float | None:
    return None if value is None else value * factor
