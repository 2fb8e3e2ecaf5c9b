"""The one home of gpuwatch's metric naming: the ``gpuwatch_`` prefix, gauge and counter families, per-GPU tables.

Every family module (metrics.py, control_metrics.py, clock_metrics.py, health_metrics.py, use_metrics.py,
unmanaged_metrics.py, node_metrics.py) builds its families here, so a name cannot lose its prefix and a per-GPU
gauge read from the reading is one table row wherever it lives. /metrics is read by anyone who reaches the
port: a family whose label is named after a sensitive field (publish/redact.py, ``METRIC_LABELS_REFUSED``: a
user, a command, a path, a pid) is refused here, when it is built.
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from gpuwatch.model import GpuReading
from gpuwatch.publish.redact import METRIC_LABELS_REFUSED

PREFIX = "gpuwatch_"

# One per-GPU gauge read straight from the reading: (metric suffix, help, GpuReading attribute, scale
# to the base unit). The attribute may be a property (``fan_duty``).
GpuGauge = tuple[str, str, str, float]


def gauge(name: str, doc: str, labels: Iterable[str] = ("gpu",), unit: str = "") -> GaugeMetricFamily:
    """A gauge family ``gpuwatch_<name>``; per GPU (label ``gpu``) unless ``labels`` says otherwise."""
    return GaugeMetricFamily(PREFIX + name, doc, labels=_allowed(name, labels), unit=unit)


def counter(name: str, doc: str, labels: Iterable[str] = ("gpu",)) -> CounterMetricFamily:
    """A counter family ``gpuwatch_<name>`` (exposed as ``..._total``); per GPU unless ``labels`` says otherwise."""
    return CounterMetricFamily(PREFIX + name, doc, labels=_allowed(name, labels))


def _allowed(name: str, labels: Iterable[str]) -> list[str]:
    names = list(labels)
    refused = sorted(set(names) & METRIC_LABELS_REFUSED)
    if refused:  # a programming error, caught by every test that renders the family
        raise ValueError(f"gpuwatch_{name}: label(s) {', '.join(refused)} would publish a sensitive field")
    return names


def gpu_gauges(table: Iterable[GpuGauge], gpus: Iterable[GpuReading]) -> list[Metric]:
    """One gauge family per table row, one series per GPU that has the value (absent stays absent, never 0)."""
    readings = tuple(gpus)
    out: list[Metric] = []
    for suffix, doc, attr, scale in table:
        family = gauge(suffix, doc)
        for gpu in readings:
            value = getattr(gpu, attr)
            if value is not None:
                family.add_metric([gpu.gpu_id], _scaled(value, scale))
        out.append(family)
    return out


def _scaled(value: float, scale: float) -> float:
    """``value * scale``; an int too large for a float stays as it is, for the renderer to drop and count
    (metrics.render: one absurd reading must not cost the other families)."""
    if scale == 1.0:
        return value
    try:
        return value * scale
    except OverflowError:
        return value
