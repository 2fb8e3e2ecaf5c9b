"""The Prometheus text format (0.0.4) of a registry, byte for byte prometheus_client's ``generate_latest``,
with what does not change between ticks formatted once.

``generate_latest`` escapes and validates every metric name, label name and label value of every sample
on every render: 20 ms of a loaded 2-core box's CPU for the 668 lines of 8 GPUs, against 1.4 ms for the
collector that builds them (benchmarks/daemon_cost.py --prometheus: with a scrape every second, the
render cost as much CPU as the tick). A GPU's labels are the same from tick to tick, so each sample's
``name{labels} `` prefix and each family's HELP/TYPE header is kept, keyed by what it is made of, and a
render is lookups plus the values' formatting (``floatToGoString``, as theirs). The prefixes and headers
themselves come from ``generate_latest`` run on a one-sample family, so escaping and the type munging
stay the installed prometheus_client's.

gpuwatch's own families (families.py) keep their series as rows (label values, value), never as
``Sample``s with a dict of labels each: building those was most of the collector's cost (2.6 of 3.5 ms
a render at 8 GPUs, 0.8 ms as rows). Their lines are the kept prefix, looked up by the label values, and
the value's text, kept too (readings repeat from tick to tick; ``floatToGoString`` made each). A family
whose rows and values are those of the render before (most of a tick's: identities, limits, caps, counters
that did not move) is its kept text, whole. Any other family (a collector of someone else's) goes through
the samples as before.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, cast

from prometheus_client import utils
from prometheus_client.exposition import generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.samples import Sample

from gpuwatch.publish.families import Row, RowFamily

_go_float = cast(Callable[[float], str], utils.floatToGoString)  # untyped there
_OM_SUFFIXES = ("_created", "_gsum", "_gcount")  # OpenMetrics-only samples: generate_latest puts them after
MAX_CACHED = 100_000  # prefixes and headers kept; beyond that (labels that churn) the caches start over


class TextRenderer:
    """``render(registry)`` -> the exposition body; keeps the formatted prefixes and headers between
    calls (one caller at a time: MetricsCache renders under its lock)."""

    def __init__(self) -> None:
        self._prefixes: dict[tuple[str, tuple[tuple[str, str], ...]], str] = {}
        self._headers: dict[tuple[str, str, str], str] = {}
        self._row_prefixes: dict[tuple[str, tuple[str, ...], tuple[str, ...]], str] = {}
        self._values: dict[Any, str] = {}  # a value's text: readings repeat from tick to tick (floatToGoString)
        # A row family's text by (series name, label names, header): its rows and their values' bits when made.
        self._texts: dict[type[RowFamily] | tuple[str, tuple[str, ...], str], tuple[list[Row], bytes, str]] = {}

    def __call__(self, registry: Any) -> bytes:
        if (len(self._prefixes) + len(self._headers) + len(self._row_prefixes) + len(self._values)
                + len(self._texts) > MAX_CACHED):
            self._texts.clear()
            self._prefixes.clear()
            self._headers.clear()
            self._row_prefixes.clear()
            self._values.clear()
        output: list[str] = []
        prefixes, texts = self._prefixes, self._texts
        for metric in registry.collect():
            if isinstance(metric, RowFamily):
                # A made family (families.py: a class of its own per name, help, type and labels) unchanged since
                # the render before, inline: its kept text found by its class, no key, header or call made (two
                # thirds of a render's families, each a few µs of a cold render's otherwise).
                if metric._made:
                    kept = texts.get(type(metric))
                    if kept is not None and kept[0] == metric.rows:
                        bits = metric.packed()
                        if bits is not None and kept[1] == bits:
                            output.append(kept[2])
                            continue
                self._rows(metric, output)
                continue
            try:
                output.append(self._header(metric.name, metric.documentation, metric.type))
                om_names = {metric.name + suffix: suffix for suffix in _OM_SUFFIXES}
                om_samples: dict[str, list[str]] = {}
                for sample in metric.samples:
                    # Inline, no call per sample (a few hundred a tick): the kept prefix, then the value.
                    name, labels = sample.name, sample.labels
                    key = (name, tuple(labels.items()))
                    prefix = prefixes.get(key)
                    if prefix is None:
                        prefix = prefixes[key] = _prefix(name, labels)
                    line = (f"{prefix}{_go_float(sample.value)}\n" if sample.timestamp is None
                            else f"{prefix}{_go_float(sample.value)} {int(float(sample.timestamp) * 1000):d}\n")
                    suffix = om_names.get(name)
                    if suffix is None:
                        output.append(line)
                    else:
                        om_samples.setdefault(suffix, []).append(line)
            except Exception as exception:
                exception.args = (exception.args or ("",)) + (metric,)
                raise
            for suffix, lines in sorted(om_samples.items()):
                output.append(self._header(metric.name + suffix, metric.documentation, "gauge"))
                output.extend(lines)
        return "".join(output).encode("utf-8")

    def _rows(self, metric: RowFamily, output: list[str]) -> None:
        """A family of gpuwatch's own (families.py): its rows, no Sample or label dict made for them; its whole
        text kept, and given again while its rows and their values' bits are those of the render before (most
        of a tick's families: identities, limits, caps, link widths, counters that did not move)."""
        header = self._header(metric.name, metric.documentation, metric.type)
        name, labelnames, rows = metric.sample_name, metric._labelnames, metric.rows
        # A made family's class stands for its name, labels and header (``__call__`` looks it up first).
        key: type[RowFamily] | tuple[str, tuple[str, ...], str] = (
            type(metric) if metric._made else (name, labelnames, header))
        bits = metric.packed()
        kept = self._texts.get(key)
        # ``==`` over the rows (in C) says the labels and the values are the same; the bits tell 0.0 from -0.0
        # (one key, two texts). NaN is never equal to itself: a family with one is formatted every time.
        if kept is not None and bits is not None and kept[1] == bits and kept[0] == rows:
            output.append(kept[2])
            return
        lines = [header]
        prefixes, values = self._row_prefixes, self._values
        try:
            for labels, value in rows:
                row_key = (name, labelnames, labels)
                prefix = prefixes.get(row_key)
                if prefix is None:
                    prefix = prefixes[row_key] = _prefix(name, dict(zip(labelnames, labels, strict=False)))
                text = values.get(value)
                if text is None:
                    text = _go_float(value)
                    # 0.0 and -0.0 are one key but two texts; NaN is never equal to itself: neither is kept.
                    if value and value == value:
                        values[value] = text
                lines.append(f"{prefix}{text}\n")
        except Exception as exception:
            exception.args = (exception.args or ("",)) + (metric,)
            raise
        text = "".join(lines)
        if bits is not None:
            self._texts[key] = (list(rows), bits, text)
        output.append(text)

    def _header(self, name: str, documentation: str, kind: str) -> str:
        key = (name, documentation, kind)
        header = self._headers.get(key)
        if header is None:
            header = self._headers[key] = generate_latest(_One(Metric(name, documentation, kind))).decode()
        return header


def _prefix(name: str, labels: dict[str, str]) -> str:
    """``name{k="v",...} `` exactly as generate_latest writes it: its line for one sample of value 0."""
    family = Metric(name, "", "unknown")
    family.samples = [Sample(name, labels, 0.0, None)]
    line = generate_latest(_One(family)).decode().rsplit("\n", 2)[-2]
    zero = _go_float(0.0)
    assert line.endswith(" " + zero), line
    return line[: -len(zero)]


class _One:
    """A registry of one family."""

    def __init__(self, metric: Metric) -> None:
        self._metric = metric

    def collect(self) -> Iterator[Metric]:
        yield self._metric
