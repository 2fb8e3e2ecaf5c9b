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
