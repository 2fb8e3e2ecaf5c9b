"""The live page read at a glance (issue 51), in Debian's headless Chromium against tests/support/page_stub.py:
real summaries of a hot card (99 °C junction, fan 100 %, cap lowered) and a cool one (48 °C, idle), and the
/history route as its interface fixes it.

What a person would check: the hot card's frame and bars differ from the cool card's (colour and frame width,
and a word with a shape), the tab's title says the hottest temperature, what gpuwatch does and the machine,
the header names the machine, each card lists its processes (counts only for a reader /status redacts for),
clocks, throttle reasons and PCIe link, the charts have a time axis, hover values, the moments gpuwatch acted,
and ranges that ask /history; at 390 px nothing scrolls sideways, in dark mode too; the page is under 60 KB,
asks nothing of another host, logs no console error. GPUWATCH_UPDATE_SCREENSHOT=1 (``make screenshot``)
writes docs/page-hot.png and docs/page-cool.png.
"""

from __future__ import annotations

import os
import re
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpuwatch.publish.live_feed import PAGE_MAX_BYTES
from gpuwatch.publish.live_feed import page as page_html
from tests.e2e.test_page import Browser, _open_browser
from tests.support.page_stub import HOSTNAME, PageStub, hot_and_cool
from tests.support.paths import REPO
from tests.support.published import GPU_A, GPU_B

pytestmark = pytest.mark.timeout(300)

PHONE = {"width": 390, "height": 844}
HOT, COOL = f"section[data-gpu='{GPU_A}']", f"section[data-gpu='{GPU_B}']"


@pytest.fixture
def browser() -> Iterator[Browser]:
    with _open_browser() as seen:
        yield seen


@pytest.fixture
def state(tmp_path: Path) -> Any:
    return hot_and_cool(tmp_path / "sys")


def style(browser: Browser, selector: str, prop: str) -> str:
    return str(browser.page.eval_on_selector(selector, f"(e) => getComputedStyle(e).{prop}"))


def open_page(browser: Browser, stub: PageStub) -> None:
    browser.page.goto(f"{stub.base}/")
    browser.page.wait_for_function("() => document.querySelector('[data-field=connection]')?.textContent === 'live'",
                                   timeout=60_000)
    # the history came (the 1 h range: 3600 points) and the charts are drawn
    browser.page.wait_for_function("() => H && H.t.length > 1000 && document.querySelector('.chart polyline')",
                                   timeout=60_000)


def test_a_hot_card_does_not_look_like_a_cool_one(browser: Browser, state: Any) -> None:
    with PageStub(state) as stub:
        open_page(browser, stub)
        page = browser.page
        fields = browser.fields()
        assert fields[f"gpu.{GPU_A}.level"] == "● near limit" and fields[f"gpu.{GPU_B}.level"] == "✓ ok"
        # the frame: colour and width (a shape besides the colour)
        assert style(browser, HOT, "borderTopColor") != style(browser, COOL, "borderTopColor")
        assert float(style(browser, HOT, "borderTopWidth")[:-2]) > float(style(browser, COOL, "borderTopWidth")[:-2])
        # the junction's bar
        junction = "tr:nth-child(2) .bar i"
        assert style(browser, f"{HOT} {junction}", "backgroundColor") != style(browser, f"{COOL} {junction}",
                                                                                "backgroundColor")
        # the tab: title and icon by the worst level
        assert page.title() == f"99 °C · capping · {HOSTNAME}"
        assert fields["hostname"] == f"· {HOSTNAME}" and fields["level"] == "● near limit"
        assert page.eval_on_selector("#icon", "(e) => e.href").startswith("data:image/png;base64,")
        # the governor's words: not "idle" beside a card drawing power
        assert fields[f"gpu.{GPU_B}.power.mode"] == "not acting" and fields[f"gpu.{GPU_A}.power.mode"] == "capping"
        # what nvtop and LACT users look for
        assert fields[f"gpu.{GPU_A}.processes"] == "3"
        names = page.locator(f"{HOT} [data-process] td:first-child").all_inner_texts()
        assert [n.split()[0] for n in names] == ["python3", "python3", "gnome-shell"]
        assert all(re.fullmatch(r"\d+ MHz", fields[f"gpu.{GPU_A}.{clock}"]) for clock in ("sclk", "mclk"))
        assert fields[f"gpu.{GPU_B}.throttle"].startswith("▼ throttled: ")  # its table holds its power limit
        assert re.fullmatch(r"[\d.]+ GT/s x\d+", fields[f"gpu.{GPU_B}.pcie"])
        assert page.locator(f"{HOT} svg.curve circle").count() == 1  # the fan curve's live point

        if os.environ.get("GPUWATCH_UPDATE_SCREENSHOT"):
            for card, name in ((HOT, "page-hot.png"), (COOL, "page-cool.png")):
                page.locator(card).screenshot(path=str(REPO / "docs" / name), scale="css")

        # ticks come: the page follows, updating in place (the hot card's section is the same element)
        page.evaluate(f"() => {{ window.kept = document.querySelector(\"{HOT}\"); }}")
        tick = int(fields["tick"])
        stub.tick()
        page.wait_for_function(f"() => Number(document.body.dataset.tick) === {tick + 1}", timeout=30_000)
        assert page.evaluate(f"() => window.kept === document.querySelector(\"{HOT}\")")

        for scheme in ("light", "dark"):
            page.emulate_media(color_scheme=scheme)
            page.set_viewport_size(PHONE)
            width = page.evaluate("() => document.documentElement.scrollWidth")
            assert width <= PHONE["width"], f"{width} px wide at 390 px ({scheme}): the page scrolls sideways"
        assert not browser.errors, browser.errors
    assert len(html := page_html()) < PAGE_MAX_BYTES, len(html)
    assert {urllib.parse.urlsplit(url).netloc for url in browser.requests if not url.startswith("data:")} == {
        urllib.parse.urlsplit(stub.base).netloc}


def test_charts_have_a_time_axis_hover_values_ranges_and_the_moments_acted(browser: Browser, state: Any) -> None:
    with PageStub(state) as stub:
        open_page(browser, stub)
        page = browser.page
        chart = f"[data-chart='gpu.{GPU_A}.temp']"
        labels = page.locator(f"{chart} svg text").evaluate_all("(ts) => ts.map((t) => t.textContent)")
        times = [label for label in labels if re.fullmatch(r"\d\d:\d\d", label)]
        assert len(times) >= 2, labels  # an hour, 300 px wide: a label every 15 or 30 min
        assert page.locator(f"{chart} polyline").count() >= 2  # the daemon's restart left a gap: two lines
        assert page.locator(f"{chart} line.lim").count() == 1  # the limit
        assert page.locator(f"[data-chart='gpu.{GPU_A}.power'] polyline.cap").count() >= 1  # the cap over time
        acted = page.locator(f"{chart} [data-acted]").evaluate_all("(marks) => marks.map((m) => m.dataset.acted)")
        assert acted == ["cap", "pause", "resume"]  # the run's pause on the GPU it runs on
        assert page.locator(f"[data-chart='gpu.{GPU_B}.temp'] [data-acted]").count() == 0
        assert page.locator("[data-chart='run.resnet'] [data-acted]").count() == 3

        box = page.locator(f"{chart} svg").bounding_box()
        assert box is not None
        page.mouse.move(box["x"] + box["width"] * 0.8, box["y"] + box["height"] / 2)
        tip = page.locator(f"{chart} .tip")
        tip.wait_for(state="visible", timeout=10_000)
        assert re.search(r"· \d+ °C$", tip.inner_text()), tip.inner_text()

        page.click("nav button[data-range='24h']")
        page.wait_for_function("() => H.step_s === 10 && H.t.length > 8000", timeout=60_000)
        assert "/history?range=24h" in stub.requests
        assert page.get_attribute("nav button[data-range='24h']", "aria-pressed") == "true"
        page.click("nav button[data-range='15m']")
        page.wait_for_function("() => H.t.length < 1000", timeout=60_000)
        assert not browser.errors, browser.errors
    assert {urllib.parse.urlsplit(url).path for url in browser.requests} <= {"/", "/events", "/history"}


def test_a_redacted_reader_gets_counts_and_a_page_without_history_its_memory(browser: Browser, state: Any) -> None:
    """A reader /status redacts for: the processes as counts, no name or user (publish/live.redacted). A daemon
    without /history: the charts from the stream's points, said in the header."""
    with PageStub(state, sensitive=False, serve_history=False) as stub:
        browser.page.goto(f"{stub.base}/")
        browser.page.wait_for_function("() => document.body.dataset.tick && document.querySelector('#hsrc')"
                                       ".textContent.includes('since the daemon started')", timeout=60_000)
        fields = browser.fields()
        assert fields[f"gpu.{GPU_A}.processes"] == "3" and browser.page.locator("[data-process]").count() == 0
        text = browser.page.inner_text("main")
        assert "names and users hidden" in text and "alice" not in text and "gnome-shell" not in text
    # the one console error: the 404 of /history on a daemon without it
    assert all("404" in error for error in browser.errors), browser.errors
