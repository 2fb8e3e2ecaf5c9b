"""/metrics under load: one render per published state, and concurrent clients all served.

Why: every handler thread competes with the control loop for the GIL; rendering once per tick and
bounding the handler threads keeps tick jitter low under 50 scrapers (docs/performance.md).
"""

from __future__ import annotations

import threading
import urllib.request
from pathlib import Path

from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily

from gpuwatch.config.cooling import FanConfig
from gpuwatch.config.file import Config
from gpuwatch.config.sections import HttpConfig
from gpuwatch.daemon.loop import Daemon
from gpuwatch.publish.http import MetricsCache
from gpuwatch.publish.state import StateHolder
from tests.support.published import two_gpu_tree


class CountingCollector:
    def __init__(self) -> None:
        self.renders = 0

    def collect(self):  # type: ignore[no-untyped-def]
        self.renders += 1
        yield GaugeMetricFamily("renders", "times rendered", value=self.renders)


def test_body_is_rendered_once_per_published_state(tmp_path: Path) -> None:
    config = Config(sysfs_root=two_gpu_tree(tmp_path / "sys").root, runtime_dir=tmp_path / "run",
                    fan=FanConfig(mode="off"), http=HttpConfig(enabled=False))
    daemon = Daemon(config)
    registry = CollectorRegistry(auto_describe=False)
    counter = CountingCollector()
    registry.register(counter)
    cache = MetricsCache(daemon.holder, registry)
    daemon.tick()
    first = cache.body()
    assert [cache.body() for _ in range(5)] == [first] * 5 and counter.renders == 1
    daemon.tick()
    assert cache.body() != first and counter.renders == 2
    daemon.shutdown()


def test_empty_holder_renders_every_time() -> None:
    registry = CollectorRegistry(auto_describe=False)
    counter = CountingCollector()
    registry.register(counter)
    cache = MetricsCache(StateHolder(), registry)
    cache.body()
    cache.body()
    assert counter.renders == 2


def test_many_concurrent_clients_are_all_served(tmp_path: Path) -> None:
    config = Config(sysfs_root=two_gpu_tree(tmp_path / "sys").root, runtime_dir=tmp_path / "run",
                    fan=FanConfig(mode="off"), http=HttpConfig(listen="127.0.0.1", port=0))
    daemon = Daemon(config)
    daemon.start_http()
    try:
        daemon.tick()
        url = f"http://127.0.0.1:{daemon.http_port}/metrics"
        codes: list[int] = []

        def scrape() -> None:
            with urllib.request.urlopen(url, timeout=5) as response:
                response.read()
                codes.append(response.status)

        threads = [threading.Thread(target=scrape) for _ in range(30)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(10)
        assert codes == [200] * 30
    finally:
        daemon.shutdown()
