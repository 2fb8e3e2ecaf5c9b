"""The HTTP endpoint for real: a daemon ticking on a fake tree, served on an ephemeral loopback port."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from gpuwatch.config.cooling import FanConfig
from gpuwatch.config.file import Config
from gpuwatch.config.sections import HttpConfig
from gpuwatch.daemon.loop import Daemon
from gpuwatch.model import DaemonInfo, PublishedState, Snapshot
from gpuwatch.publish.http import HttpServer, health
from gpuwatch.publish.state import StateHolder
from tests.support.published import GPU_A, two_gpu_tree


def fetch(port: int, path: str, method: str = "GET") -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method=method)
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


@pytest.fixture
def daemon(tmp_path: Path):
    tree = two_gpu_tree(tmp_path / "sys")
    # Fan control off: these tests delete the tree under a running daemon, which a fan restore would report.
    config = Config(sysfs_root=tree.root, runtime_dir=tmp_path / "run", interval_s=0.1, fan=FanConfig(mode="off"),
                    http=HttpConfig(listen="127.0.0.1", port=0))
    d = Daemon(config)
    d.start_http()
    yield d
    d.shutdown()


def test_metrics_status_and_healthz_after_a_tick(daemon: Daemon) -> None:
    port = daemon.http_port
    assert port
    assert fetch(port, "/healthz")[0] == 503  # nothing published yet
    daemon.tick()
    code, headers, body = fetch(port, "/metrics")
    assert code == 200 and headers["Content-Type"].startswith("text/plain; version=0.0.4")
    assert f'gpuwatch_gpu_up{{gpu="{GPU_A}"}} 1.0' in body.decode()
    code, _, body = fetch(port, "/status")
    assert code == 200 and json.loads(body) == json.loads(json.dumps(daemon.holder.document()))
    code, _, body = fetch(port, "/healthz")
    assert code == 200 and body.startswith(b"ok")


def test_scrape_never_reads_sysfs(daemon: Daemon, tmp_path: Path) -> None:
    daemon.tick()
    before = fetch(daemon.http_port, "/metrics")[2]
    # The tree vanishing (or hanging) does not touch a scrape: it renders the last published state.
    import shutil

    shutil.rmtree(tmp_path / "sys")
    assert fetch(daemon.http_port, "/metrics")[2] == before


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE"])
def test_read_only(daemon: Daemon, method: str) -> None:
    code, headers, _ = fetch(daemon.http_port, "/metrics", method)
    assert code == 405 and headers["Allow"] == "GET, HEAD"


def test_head_and_unknown_path(daemon: Daemon) -> None:
    daemon.tick()
    code, headers, body = fetch(daemon.http_port, "/metrics", "HEAD")
    assert code == 200 and body == b"" and int(headers["Content-Length"]) > 0
    assert fetch(daemon.http_port, "/nope")[0] == 404


@pytest.mark.parametrize(
    "interval_s, age_s, fresh",
    [
        (1.0, 0.5, True), (1.0, 6.9, True), (1.0, 7.1, False),  # 5 ticks of 1 s + 2 s slack = 7 s
        (0.2, 3.0, True), (0.2, 3.1, False),  # 5 ticks of 0.2 s + 2 s = 3 s (not 5 / 0.2 + 2 = 27 s)
        (10.0, 30.0, True), (10.0, 52.0, True), (10.0, 52.5, False),  # 5 x 10 s + 2 s = 52 s (not 2.5 s)
    ],
)
def test_health_staleness(interval_s: float, age_s: float, fresh: bool) -> None:
    """Stale means older than 5 of the daemon's own ticks + 2 s, whatever its interval_s."""
    taken_monotonic = 100.0
    now = taken_monotonic + age_s
    holder = StateHolder()
    holder.publish(PublishedState(snapshot=Snapshot(0.0, taken_monotonic, ()),
                                  daemon=DaemonInfo(pid=1, version="x", started_unix=0.0, interval_s=interval_s)), {})
    ok, reason = health(holder, now)
    assert ok is fresh
    assert fresh or "stuck" in reason


def test_port_in_use_is_reported_not_fatal(daemon: Daemon, tmp_path: Path) -> None:
    config = daemon.config.model_copy(update={"http": HttpConfig(listen="127.0.0.1", port=daemon.http_port)})
    other = Daemon(config)
    other.start_http()
    assert other.http is None and "http" in other.failures
    assert "http" in other.tick().daemon.failures[0]


def test_read_errors_accumulate_per_sensor(tmp_path: Path) -> None:
    import errno

    from gpuwatch.daemon.compose import Parts
    from gpuwatch.gpus.amdgpu_source import AmdgpuSource
    from tests.support.trees import FaultySysfs

    tree = two_gpu_tree(tmp_path / "sys")
    sysfs = FaultySysfs(tree.root, {"temp2_input": errno.EIO})
    config = Config(sysfs_root=tree.root, runtime_dir=tmp_path / "run", http=HttpConfig(enabled=False))
    d = Daemon(config, Parts(sources=[AmdgpuSource(sysfs)]))
    for _ in range(3):
        state = d.tick()
    counts = {(gpu, sensor): n for gpu, sensor, n in state.read_errors_total}
    assert counts and all(n == 3 for n in counts.values())
    assert {gpu for gpu, _ in counts} == {g.gpu_id for g in state.snapshot.gpus}


def test_http_server_stops_cleanly(tmp_path: Path) -> None:
    server = HttpServer(StateHolder(), "127.0.0.1", 0)
    server.start()
    port = server.port
    server.stop()
    # The prerender thread waits for a tick with no timeout to poll; the stop wakes it and it is joined.
    assert not server._prerender.is_alive()
    with pytest.raises(OSError):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1)
