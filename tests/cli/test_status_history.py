"""`gpuwatch status --history` (issue 51): the sparklines by table, and the real command reading the ring's files
on the box, a daemon's /history over HTTP (--remote), and refusing a directory others can write, in one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuwatch.cli.history_view import render, sparkline
from gpuwatch.publish.history_store import HistoryStore
from tests.publish.test_history_http import ticking
from tests.support.cli import gpuwatch

T0 = 1_800_000_000.0


@pytest.mark.parametrize(("values", "times", "width", "line"), [
    ([1, 2, 3, 4, 5, 6, 7, 8], [0, 1, 2, 3, 4, 5, 6, 7], 8, "▁▂▃▄▅▆▇█"),
    ([5, 5, 5], [0, 1, 2], 3, "▁▁▁"),  # flat: the lowest bar
    ([1, None, 8], [0, 1, 2], 3, "▁ █"),  # a gap is a blank column
    ([1, 8], [0, 7], 8, "▁      █"),  # on a time axis: nothing in between is blank
    ([None, None], [0, 1], 2, "  "),
    ([1, 3, 8, 2], [0, 1, 6, 7], 2, "▁█"),  # a column is the mean of its values...
])
def test_sparkline(values: list[float | None], times: list[float], width: int, line: str) -> None:
    assert sparkline(values, times, times[0], times[-1], width) == line


def test_a_temperature_column_is_its_hottest() -> None:
    assert sparkline([40, 90, 40, 41], [0, 1, 2, 3], 0, 3, 2, peak=True) == "█▁"


def test_the_text_names_every_gpu_and_run_and_the_last_events() -> None:
    doc = {"schema": 1, "range": "1h", "step_s": 1.0, "now_unix": T0 + 2, "t": [T0, T0 + 1, T0 + 2],
           "gpus": {"0000:28:00.0": {"hottest_c": [60, 70, 80], "fan_pct": [30, 40, None], "power_w": [100, 150, 200],
                                     "busy_pct": [1, 2, 3], "cap_w": [250] * 3, "sclk_mhz": [2000] * 3}},
           "runs": {"demo\x1b[2J": {"steps_per_s": [None, None, None]}},
           "events": [{"unix": T0 + i, "kind": "cap", "text": f"event {i}", "gpu": None, "run": None}
                      for i in range(10)]}
    text = render(doc, width=3)
    assert "history, last 1h (1 s steps, 3 points" in text
    assert "temp    ▁▅█" in text and "60–80°C, now 80°C" in text and "fan     ▁█   30–40%" in text
    assert "run demo\\x1b[2J" in text and "steps/s" in text and "no value" in text  # a run's name made safe
    assert "events (the last 8 of 10)" in text and "event 9" in text and "event 1\n" not in text
    assert "no points in this range yet" in render({"range": "15m", "t": [], "gpus": {}, "runs": {}, "events": []})


def config(tmp_path: Path) -> Path:
    path = tmp_path / "gpuwatch.toml"
    path.write_text(f'runtime_dir = "{tmp_path / "run"}"\n')
    return path


def test_the_ring_on_this_machine(tmp_path: Path) -> None:
    import time

    store = HistoryStore(tmp_path / "run" / "history")
    store.start()
    now = time.time()
    for i in range(20):
        store.add({"t": now - 20 + i, "g": {"0000:28:00.0": [50 + i, 40, 100, 90, 250, 2000]}, "r": {}}, [], 1.0)
    store.stop()
    shown = gpuwatch("status", "--history", "15m", "-c", str(config(tmp_path)), "--color", "never")
    assert shown.returncode == 0 and shown.stderr == "", shown.stderr
    assert "GPU 0000:28:00.0" in shown.stdout and "50–69°C, now 69°C" in shown.stdout
    as_json = gpuwatch("status", "--history", "-c", str(config(tmp_path)), "--json")
    doc = json.loads(as_json.stdout)
    assert doc["range"] == "1h" and len(doc["t"]) == 20


def test_a_directory_others_can_write_is_refused_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "run" / "history").mkdir(parents=True)
    (tmp_path / "run" / "history").chmod(0o777)
    shown = gpuwatch("status", "--history", "-c", str(config(tmp_path)))
    assert shown.returncode == 1 and shown.stdout == ""
    assert shown.stderr.count("\n") == 1 and "not trusting" in shown.stderr
    assert "writable by other users" in shown.stderr


def test_another_machine_over_http(tmp_path: Path) -> None:
    daemon = ticking(tmp_path / "box")
    try:
        shown = gpuwatch("status", "--history", "--remote", f"127.0.0.1:{daemon.http_port}", "-c",
                         str(config(tmp_path)), "--color", "never")
        assert shown.returncode == 0, shown.stderr
        assert shown.stdout.count("GPU 0000:") == 2 and "daemon started" in shown.stdout
        nobody = gpuwatch("status", "--history", "--remote", "127.0.0.1:1", "-c", str(config(tmp_path)))
        assert nobody.returncode == 1
        assert nobody.stderr == "gpuwatch status --history: unreachable: connection refused\n"
        two = gpuwatch("status", "--history", "--remote", "a", "b", "-c", str(config(tmp_path)))
        assert two.returncode == 2 and "name one machine" in two.stderr
    finally:
        daemon.shutdown()
