"""What one tick costs the live page in the browser: ``render()`` with 24 h of history, in headless Chromium
(docs/page.md, issue 51 item 7), side by side with a baseline page (``--baseline REV``, the page before it).

The page is served by tests/support/page_stub.py (real summaries of a hot and a cool card, /history as its
interface fixes it). For each page, ``--frames`` ticks one after another, each in its own animation frame:
the tick's point appended as the stream's handler does, then ``render()``, then a forced style and layout
(``document.body.offsetHeight``), all timed with ``performance.now()``; the frame's budget at 60 Hz is
16.7 ms. The current page is measured at its 1 h range (3600 points at 1 s) and its 24 h range (8640 points
at 10 s); the baseline (which kept an hour in memory and rebuilt everything every tick) with an hour of points
in its stream's snapshot, as the daemon sent it. A chart is redrawn when its pixels would change (at 24 h,
every 5 minutes): the last row makes every chart redraw at every tick, the worst frame. ``--gpus`` repeats
the hot card (3 by default, as the issue measured).

    .venv/bin/python benchmarks/page_render.py [--frames 120] [--gpus 3] [--baseline main]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from gpuwatch.publish.history import point  # noqa: E402
from tests.support.page_stub import PageStub, hot_and_cool  # noqa: E402

MEASURE = """async ([frames, legacy, full]) => {
  const times = [];
  const base = legacy ? points[points.length - 1] : null;
  for (let i = 0; i < frames; i++) {
    await new Promise((resolve) => requestAnimationFrame(resolve));
    const started = performance.now();
    if (legacy) {
      points.push({...base, t: base.t + i + 1}); points.shift();
    } else {
      const t = H.t[H.t.length - 1] + (H.step_s || 1);
      const g = {}; for (const gpu of last.gpus) g[gpu.id] = [90 + i % 7, 80, 230, 99, 240, 2300];
      append(H, {t, g, r: {resnet: 4.4}});
    }
    if (full) for (const chart of document.querySelectorAll(".chart")) chart._key = null;
    render();
    document.body.offsetHeight;
    times.push(performance.now() - started);
  }
  return times;
}"""


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def many_gpus(state: Any, count: int) -> Any:
    """``count`` GPUs: the hot card repeated under new PCI addresses (its processes, fan and power with it)."""
    hot = state.snapshot.gpus[0]
    extra = [replace(hot, gpu_id=f"0000:{0x40 + i:02x}:00.0", card=f"card{10 + i}") for i in range(count - 2)]
    fans = state.fans + tuple(replace(state.fans[0], gpu_id=g.gpu_id) for g in extra)
    powers = state.powers + tuple(replace(state.powers[0], gpu_id=g.gpu_id) for g in extra)
    return replace(state, snapshot=replace(state.snapshot, gpus=state.snapshot.gpus + tuple(extra)), fans=fans,
                   powers=powers)


def measure(playwright: Any, chromium: str, stub: PageStub, frames: int, range_name: str | None,
            full: bool = False) -> list[float]:
    browser = playwright.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
    try:
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.goto(f"{stub.base}/")
        page.wait_for_function("() => document.body.dataset.tick", timeout=60_000)
        legacy = range_name is None
        if not legacy:
            if range_name != "1h":
                page.click(f"nav button[data-range='{range_name}']")
            wanted = {"1h": 3000, "24h": 8000}[range_name]
            page.wait_for_function(f"() => H && H.t.length > {wanted}", timeout=60_000)
        times: list[float] = page.evaluate(MEASURE, [frames, legacy, full])
        return times
    finally:
        browser.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=120)
    parser.add_argument("--gpus", type=int, default=3)
    parser.add_argument("--baseline", default="main", help="the git revision of the baseline page ('' for none)")
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        sys.exit("chromium missing: apt-get install chromium")
    with tempfile.TemporaryDirectory() as tmp:
        state = many_gpus(hot_and_cool(Path(tmp) / "sys"), max(2, args.gpus))
        rows: list[tuple[str, list[float]]] = []
        with sync_playwright() as playwright:
            if args.baseline:
                old = subprocess.run(["git", "show", f"{args.baseline}:gpuwatch/publish/page/index.html"], cwd=REPO,
                                     capture_output=True, check=True).stdout
                now = time.time()
                with PageStub(state) as probe:
                    tick = probe.summary
                hour = [point(tick) | {"t": now - 3600 + i} for i in range(3600)]
                with PageStub(state, html=old, snapshot_points=hour) as stub:
                    rows.append((f"baseline ({args.baseline}), 1 h of points", measure(
                        playwright, chromium, stub, args.frames, None)))
            for range_name, full in (("1h", False), ("24h", False), ("24h", True)):
                with PageStub(state) as stub:
                    rows.append((f"this page, {range_name}" + (", every chart redrawn" if full else ""), measure(
                        playwright, chromium, stub, args.frames, range_name, full)))
    print(f"render() + style and layout per tick, {args.gpus} GPUs, 1 run, {args.frames} frames each (ms)")
    print(f"{'page':40} {'p50':>7} {'p90':>7} {'max':>7}")
    for name, times in rows:
        print(f"{name:40} {percentile(times, 0.5):7.2f} {percentile(times, 0.9):7.2f} {max(times):7.2f}")


if __name__ == "__main__":
    main()
