"""TextRenderer: byte for byte prometheus_client's generate_latest, across renders whose values change."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    InfoMetricFamily,
    Metric,
    StateSetMetricFamily,
)

from gpuwatch.model import PublishedState
from gpuwatch.publish import exposition
from gpuwatch.publish.exposition import TextRenderer
from gpuwatch.publish.families import Family, counter, gauge
from gpuwatch.publish.metrics import GpuwatchCollector
from tests.support.published import example_state


class Families:
    """A collector of hand-made families whose values the test changes between renders."""

    def __init__(self) -> None:
        self.value = 1.0

    def collect(self) -> Iterator[Metric]:
        gauge = GaugeMetricFamily("edge_gauge", 'Help with a \\ backslash,\na newline and "quotes".',
                                  labels=["gpu", "name"])
        for index, value in enumerate((self.value, math.nan, math.inf, -math.inf, 1e22, 1234567.0, -0.0, 3)):
            gauge.add_metric([f"gpu{index}", 'a "quoted" \\ back\nslash ü'], value)
        yield gauge
        counter = CounterMetricFamily("edge_events", "A counter.", labels=["kind"], created=1.5)
        counter.add_metric(["x"], self.value * 7, created=1700000000.25)
        yield counter
        yield CounterMetricFamily("edge_plain_total", "A counter named with its suffix.", value=self.value)
        yield InfoMetricFamily("edge_build", "An info.", value={"version": "1.2", "commit": "abc"})
        yield StateSetMetricFamily("edge_state", "A state set.", value={"on": True, "off": False})
        yield HistogramMetricFamily("edge_seconds", "A histogram.", buckets=[("0.5", 1), ("+Inf", 3)],
                                    sum_value=self.value)
        timed = GaugeMetricFamily("edge_timed", "With a timestamp.")
        timed.add_metric([], self.value, timestamp=1700000000.123)
        yield timed
        yield GaugeMetricFamily("edge_empty", "No samples.")


class OwnFamilies:
    """gpuwatch's own families (families.py: rows, no Samples) with values that format differently."""

    def __init__(self) -> None:
        self.values: tuple[float, ...] = ()

    def collect(self) -> Iterator[Family]:
        values = gauge("edge_values", 'Help with a \\ backslash and "quotes".', ["gpu", "name"])
        for index, value in enumerate(self.values):
            values.add_metric([f"gpu{index}", 'a "quoted" \\ back\nslash ü'], value)
        yield values
        events = counter("edge_events", "A counter.", ["gpu"])
        for index, value in enumerate(self.values):
            events.add_metric([f"gpu{index}"], value)
        yield events
        plain = gauge("edge_plain", "No labels.", ())
        plain.add_metric([], self.values[0] if self.values else 0)
        yield plain


def test_own_families_equal_generate_latest_as_values_change() -> None:
    """The rows' path: 0.0 and -0.0, 1 and True and 1.0, NaN, a family unchanged or not: the same bytes as
    prometheus_client's formatting of the same families' samples, whatever an earlier render kept."""
    families = OwnFamilies()
    registry = CollectorRegistry(auto_describe=False)
    registry.register(families)
    render = TextRenderer()
    for values in ((0.0, -0.0, 1, True, 1.0, math.nan), (-0.0, 0.0, 1.0, 1, math.nan, math.inf),
                   (1e22, 1234567.0, -math.inf, 2**53 + 1, 0.1, 3), (0.0, -0.0, 1, True, 1.0, math.nan), (),
                   # Rows equal to the render before's (==) whose text is not (a family's text is kept): -0.0.
                   (0.0, 1.0), (-0.0, 1.0), (-0.0, 1.0), (0.0, True), (0.0, 1), (2**53 + 1, 1), (2**53, 1)):
        families.values = values
        assert render(registry) == generate_latest(registry)


def test_hand_made_families_equal_generate_latest_render_after_render() -> None:
    families = Families()
    registry = CollectorRegistry(auto_describe=False)
    registry.register(families)
    render = TextRenderer()
    for value in (1.0, 2.5, 0.1, 1.0):  # the prefixes cached by the first render serve the later ones
        families.value = value
        assert render(registry) == generate_latest(registry)


def test_the_collector_over_published_states_equals_generate_latest(tmp_path: Path) -> None:
    """The example state (two GPUs, one gone, trainers, health), then nothing published, then the state again."""
    states: list[PublishedState | None] = [example_state(tmp_path / "sys"), None]
    states.append(states[0])
    current: list[PublishedState | None] = [None]
    registry = CollectorRegistry(auto_describe=False)
    registry.register(GpuwatchCollector(lambda: current[0]))
    render = TextRenderer()
    for state in states:
        current[0] = state
        assert render(registry) == generate_latest(registry)


def test_caches_start_over_past_their_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(exposition, "MAX_CACHED", 3)
    families = Families()
    registry = CollectorRegistry(auto_describe=False)
    registry.register(families)
    render = TextRenderer()
    for value in (1.0, 2.0):
        families.value = value
        assert render(registry) == generate_latest(registry)
        assert len(render._prefixes) + len(render._headers) < 40
    own = OwnFamilies()
    registry.register(own)
    for values in ((1.0, 2.0, 3.0, 4.0), (5.0, 6.0, 7.0, 8.0)):
        own.values = values
        assert render(registry) == generate_latest(registry)
        assert len(render._row_prefixes) + len(render._values) < 40
