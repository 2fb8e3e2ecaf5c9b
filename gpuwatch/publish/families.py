"""The one home of gpuwatch's metric naming: the ``gpuwatch_`` prefix, gauge and counter families, per-GPU tables.

Every family module (metrics.py, control_metrics.py, clock_metrics.py, health_metrics.py, use_metrics.py,
unmanaged_metrics.py, node_metrics.py) builds its families here, so a name cannot lose its prefix and a per-GPU
gauge read from the reading is one table row wherever it lives. /metrics is read by anyone who reaches the
port: a family whose label is named after a sensitive field (publish/redact.py, ``METRIC_LABELS_REFUSED``: a
user, a command, a path, a pid) is refused here, when it is built.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable, Sequence
from operator import attrgetter, itemgetter
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.samples import Sample

from gpuwatch.model import GpuReading
from gpuwatch.publish.redact import METRIC_LABELS_REFUSED

PREFIX = "gpuwatch_"

# One per-GPU gauge read straight from the reading: (metric suffix, help, GpuReading attribute, scale
# to the base unit). The attribute may be a property (``fan_duty``).
GpuGauge = tuple[str, str, str, float]
Row = tuple[tuple[str, ...], Any]  # one series: its label values (in the family's label order), its value


class RowFamily:
    """A family's series kept as rows (label values, value) rather than prometheus_client ``Sample``s, each
    with a dict of its labels: a scrape at 8 GPUs builds 800 series every tick, and the exposition
    (exposition.TextRenderer) formats the rows directly, its ``name{labels} `` prefix looked up by the
    label values. ``samples`` is still there for whoever asks (tests, prometheus_client's own formatting),
    made from the rows; assigning it sets the rows."""

    name: str
    documentation: str
    type: str
    _labelnames: tuple[str, ...]
    rows: list[Row]
    sample_name: str  # what each series is called: the family's name, a counter's with ``_total``

    _packed: tuple[list[Row], int, bytes | None] | None = None  # ``packed``'s last answer, for these rows
    _made = False  # True in the class ``gauge``/``counter`` made for one name, help, type, labels and unit

    def packed(self) -> bytes | None:
        """``packed(self.rows)``, made once for the rows as they are (metrics.render checks them, the
        renderer compares them with the last render's)."""
        rows, memo = self.rows, self._packed
        if memo is not None and memo[0] is rows and memo[1] == len(rows):
            return memo[2]
        bits = packed(rows)
        self._packed = (rows, len(rows), bits)
        return bits

    @property
    def samples(self) -> list[Sample]:
        return [Sample(self.sample_name, dict(zip(self._labelnames, values, strict=False)), value, None)
                for values, value in self.rows]

    @samples.setter
    def samples(self, samples: list[Sample]) -> None:  # Metric.__init__ sets [], metrics.render the kept ones
        self.rows = [(tuple(s.labels[k] for k in self._labelnames), s.value) for s in samples]


class Gauge(RowFamily, GaugeMetricFamily):
    def __init__(self, name: str, doc: str, labels: Sequence[str], unit: str = "") -> None:
        super().__init__(name, doc, labels=labels, unit=unit)
        self.sample_name = self.name

    def add_metric(self, labels: Sequence[str], value: float, timestamp: Any = None) -> None:
        if timestamp is not None:
            raise ValueError(f"{self.name}: a timestamp per series is not exposed by gpuwatch")
        self.rows.append((tuple(labels), value))


class Counter(RowFamily, CounterMetricFamily):
    def __init__(self, name: str, doc: str, labels: Sequence[str]) -> None:
        super().__init__(name, doc, labels=labels)
        self.sample_name = self.name + "_total"

    def add_metric(self, labels: Sequence[str], value: float, created: float | None = None, timestamp: Any = None,
                   exemplar: Any = None) -> None:
        if created is not None or timestamp is not None or exemplar is not None:
            raise ValueError(f"{self.name}: created, timestamps and exemplars are not exposed by gpuwatch")
        self.rows.append((tuple(labels), value))


Family = Gauge | Counter  # what every family module builds


def gauge(name: str, doc: str, labels: Iterable[str] = ("gpu",), unit: str = "") -> Gauge:
    """A gauge family ``gpuwatch_<name>``; per GPU (label ``gpu``) unless ``labels`` says otherwise."""
    key = ("gauge", name, doc, tuple(labels), unit)
    kind = _MADE.get(key)  # the made family's class looked up here, no call or closure for it (126 a render)
    if kind is None:
        kind = _make(key, lambda: Gauge(PREFIX + name, doc, labels=_allowed(name, key[3]), unit=unit))
    family: Gauge = _new(kind)
    family.rows = []
    return family


def counter(name: str, doc: str, labels: Iterable[str] = ("gpu",)) -> Counter:
    """A counter family ``gpuwatch_<name>`` (exposed as ``..._total``); per GPU unless ``labels`` says otherwise."""
    key = ("counter", name, doc, tuple(labels), "")
    kind = _MADE.get(key)
    if kind is None:
        kind = _make(key, lambda: Counter(PREFIX + name, doc, labels=_allowed(name, key[3])))
    family: Counter = _new(kind)
    family.rows = []
    return family


# Each family made once (its name validated, its labels checked, by prometheus_client's and _allowed's rules), then
# made empty for every render: the 126 families of 8 GPUs were a fifth of the collector's time (issue 52). What a
# made family holds besides its rows (name, help, type, unit, label names) becomes the class attributes of a
# subclass of its own, so a render's family is an empty instance of it with its own ``rows``: copying those
# attributes into each new instance's dict was still 3 of the 4 µs per family (round 5).
_MADE: dict[tuple[str, str, str, tuple[str, ...], str], type[RowFamily]] = {}
MAX_MADE = 10_000


def _make(key: tuple[str, str, str, tuple[str, ...], str], make: Callable[[], RowFamily]) -> type[RowFamily]:
    """The class of ``key``'s (kind, name, help, labels, unit) families, made by ``make`` the first time only."""
    if len(_MADE) >= MAX_MADE:  # never, with names and help texts from tables; bounded all the same
        _MADE.clear()
    made = make()
    held = {name: value for name, value in vars(made).items() if name != "rows"}
    kind = _MADE[key] = type(type(made).__name__, (type(made),),
                             {**held, "_made": True, "__module__": type(made).__module__,
                              "__qualname__": type(made).__qualname__})
    return kind


_new: Callable[[type[RowFamily]], Any] = object.__new__  # typed Any: typing.cast is a call, 126 a render


def _allowed(name: str, labels: Iterable[str]) -> list[str]:
    names = list(labels)
    refused = sorted(set(names) & METRIC_LABELS_REFUSED)
    if refused:  # a programming error, caught by every test that renders the family
        raise ValueError(f"gpuwatch_{name}: label(s) {', '.join(refused)} would publish a sensitive field")
    return names


def gpu_gauges(table: Iterable[GpuGauge], gpus: Iterable[GpuReading]) -> list[Family]:
    """One gauge family per table row, one series per GPU that has the value (absent stays absent, never 0)."""
    rows = tuple(table)
    if not rows:
        return []
    out: list[Family] = [gauge(suffix, doc) for suffix, doc, _, _ in rows]
    # Each GPU's values in one C call (a getattr per table row and GPU was most of this), straight into the rows.
    read = attrgetter(*(attr for _, _, attr, _ in rows)) if len(rows) > 1 else (lambda gpu: (getattr(gpu, rows[0][2]),))
    scales = tuple(scale for _, _, _, scale in rows)
    readings = tuple(gpus)
    labels = [(gpu.gpu_id,) for gpu in readings]
    # A family's column (its values in GPU order) made by one transposing zip, and its rows by another, both in C:
    # a tuple made and appended per GPU and family was most of this (176 series at 8 GPUs). A column with a value
    # absent or scaled goes value by value, as before.
    absent = (None,) * len(readings)
    # No GPU: no column, the families stay empty (hence not strict).
    for family, column, scale in zip(out, zip(*map(read, readings), strict=True), scales, strict=False):
        if column == absent:  # a value no GPU has (a third of the table on most cards)
            continue
        if scale == 1.0 and None not in column:
            family.rows = list(zip(labels, column, strict=True))
        else:
            family.rows = [(gpu, value if scale == 1.0 else _scaled(value, scale))
                           for gpu, value in zip(labels, column, strict=True) if value is not None]
    return out


def packed(rows: list[Row]) -> bytes | None:
    """The rows' values as C doubles, converted in one C pass (``struct``); None when a value is no number that
    converts (an int too large for a float, a string). What metrics.render checks every family's values with
    before it looks at them one by one, and how exposition.TextRenderer tells a family's values unchanged:
    unlike ``==``, the bytes tell 0.0 from -0.0, which format differently."""
    pack = _PACKERS.get(len(rows))
    if pack is None:
        if len(_PACKERS) >= MAX_PACKERS:  # never: a family's series are bounded by the GPUs and sensors
            _PACKERS.clear()
        pack = _PACKERS[len(rows)] = struct.Struct(f"={len(rows)}d").pack
    try:
        return pack(*map(_VALUE, rows))
    except struct.error:  # what struct makes of PyFloat_AsDouble's OverflowError, TypeError or ValueError
        return None


_VALUE = itemgetter(1)
# A packer per row count: ``struct`` packs a family's values in a third less time than ``array("d", ...)`` did
# (no array object made), and converts each the same way (PyFloat_AsDouble): 70 families a render.
_PACKERS: dict[int, Callable[..., bytes]] = {}
MAX_PACKERS = 1_000


def _scaled(value: float, scale: float) -> float:
    """``value * scale``; an int too large for a float stays as it is, for the renderer to drop and count
    (metrics.render: one absurd reading must not cost the other families)."""
    if scale == 1.0:
        return value
    try:
        return value * scale
    except OverflowError:
        return value
