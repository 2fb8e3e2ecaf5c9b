"""GET /history over real HTTP (docs/page.md): a daemon ticking on a fake tree with its ring on disk; the ranges,
a bad range's 400, no caching, and the same redaction as /status for a client it covers."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuwatch.config.cooling import FanConfig
from gpuwatch.config.file import Config
from gpuwatch.config.sections import HistoryConfig, HttpConfig
from gpuwatch.daemon.loop import Daemon
from gpuwatch.publish.history import GPU_SERIES
from tests.publish.test_http import fetch
from tests.publish.test_redact import other_local_address
from tests.support.published import two_gpu_tree
from tests.support.waiting import wait_for


def ticking(tmp_path: Path, listen: str = "127.0.0.1", history: bool = True) -> Daemon:
    tree = two_gpu_tree(tmp_path / "sys")
    # 1 s: each tick its own point in the 1 s tier, written at once (ticks of 0.1 s share a second's bucket).
    config = Config(sysfs_root=tree.root, runtime_dir=tmp_path / "run", interval_s=1.0, fan=FanConfig(mode="off"),
                    http=HttpConfig(listen=listen, port=0), history=HistoryConfig(enabled=history))
    d = Daemon(config)
    if d.history is not None:
        d.history.start()
    d.start_http()
    for _ in range(5):
        d.tick()
    return d


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Daemon]:
    d = ticking(tmp_path)
    yield d
    d.shutdown()


def history(port: int, query: str = "", host: str = "127.0.0.1") -> tuple[int, dict[str, str], bytes]:
    if host == "127.0.0.1":
        return fetch(port, f"/history{query}")
    with urllib.request.urlopen(f"http://{host}:{port}/history{query}", timeout=10) as response:
        return response.status, dict(response.headers), response.read()


def test_the_ring_as_json_for_each_range(daemon: Daemon) -> None:
    assert daemon.http_port is not None
    wait_for(lambda: len(json.loads(history(daemon.http_port)[2])["t"]) == 5, timeout_s=30, what="five points")
    status, headers, body = history(daemon.http_port)
    doc = json.loads(body)
    assert status == 200 and headers["Content-Type"] == "application/json" and headers["Cache-Control"] == "no-store"
    assert doc["schema"] == 1 and doc["range"] == "1h" and doc["step_s"] == 1.0 and doc["now_unix"] >= doc["t"][-1]
    state = daemon.holder.latest()
    assert state is not None and doc["t"][-1] == round(state.snapshot.taken_unix, 3)
    assert set(doc["gpus"]) == {g.gpu_id for g in state.snapshot.gpus}
    assert all(list(series) == list(GPU_SERIES) and all(len(v) == 5 for v in series.values())
               for series in doc["gpus"].values())
    assert [e["kind"] for e in doc["events"]] == ["start"] and doc["events"][0]["text"].startswith("daemon started (")
    for name, step in (("15m", 1.0), ("24h", 60.0), ("7d", 600.0)):
        status, _, body = history(daemon.http_port, f"?range={name}")
        assert status == 200 and json.loads(body)["step_s"] == step and json.loads(body)["range"] == name


@pytest.mark.parametrize("query", ["?range=2h", "?range=", "?range=1h&range=7d", "?range=%00"])
def test_another_range_is_a_400_with_one_line(daemon: Daemon, query: str) -> None:
    assert daemon.http_port is not None
    status, _, body = history(daemon.http_port, query)
    assert status == 400 and body == b"range must be one of 15m, 1h, 24h, 7d (default 1h)\n"


def test_history_off_is_not_found(tmp_path: Path) -> None:
    d = ticking(tmp_path, history=False)
    try:
        assert d.http_port is not None and history(d.http_port)[0] == 404
        assert not (tmp_path / "run" / "history").exists()
    finally:
        d.shutdown()


def test_a_client_the_redaction_covers_gets_each_event_text_as_its_class(tmp_path: Path) -> None:
    address = other_local_address()
    if address is None:
        pytest.skip("this machine has no address besides loopback")
    d = ticking(tmp_path, listen="0.0.0.0")
    try:
        assert d.http_port is not None
        wait_for(lambda: json.loads(history(d.http_port or 0)[2])["events"], timeout_s=30, what="the start event")
        remote = json.loads(history(d.http_port, host=address)[2])
        local = json.loads(history(d.http_port)[2])
        assert [e["text"] for e in remote["events"]] == ["daemon started"]
        assert local["events"][0]["text"].startswith("daemon started (version ")
        assert remote["gpus"].keys() == local["gpus"].keys()
    finally:
        d.shutdown()
