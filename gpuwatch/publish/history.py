"""The live page's memory (docs/page.md): the chart points, the last hour of them and the recent events (pure).

Kept by the daemon in memory, bounded whatever the interval: ``capacity(interval_s)`` points
(an hour at the tick interval, at most ``MAX_POINTS``) and the last ``MAX_EVENTS`` events; the same points
and events go to the on-disk ring (publish/history_store.py). Events are derived by comparing consecutive
summaries (publish/live.py) and clock readings (``clocks``): pauses, resumes, restarts, resets, failsafe,
a GPU lost or back, reloads, a cap lowered or given back, a clock ceiling set or released. Every timestamp
comes from the summaries; nothing here reads a clock. Their texts are made here alone, each one sentence: what,
what happened to it, its cause in parentheses (``run demo paused (manual pause)``); a value not known is left
out, never written as n/a.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from typing import Any

from gpuwatch.model import ClockMode, PublishedState
from gpuwatch.publish.live import Summary

HISTORY_S = 3600.0  # what the charts cover at the tick interval
MAX_POINTS = 3600  # the ring's cap whatever the interval (a 0.1 s interval keeps 6 minutes)
MAX_EVENTS = 30

Point = dict[str, Any]
Event = dict[str, Any]
MakeEvent = Callable[..., Event]  # (kind, text, gpu=, run=) -> the event at this tick
# Per GPU id, what the summary does not carry: {"sclk_mhz", "ceiling_mhz", "limiting"} (``clocks``).
Clocks = dict[str, dict[str, Any]]
# A point's values per GPU, in this order (docs/page.md); readers of a shorter (older) point take the missing as null.
GPU_SERIES = ("hottest_c", "fan_pct", "power_w", "busy_pct", "cap_w", "sclk_mhz")
CAPPING = ("governing", "floor")  # the power governor's modes with a cap of ours in force
# A run's end (or wait to start again) as its event says it; its cause follows in parentheses.
ENDED = {"failed": "failed", "finished": "finished", "stopped": "stopped", "backoff": "waiting to restart"}


def capacity(interval_s: float) -> int:
    """Points kept: an hour at ``interval_s``, within 1..MAX_POINTS."""
    if not interval_s > 0:
        return MAX_POINTS
    return max(1, min(MAX_POINTS, math.ceil(HISTORY_S / interval_s)))


def clocks(state: PublishedState) -> Clocks:
    """Each GPU's shader clock (MHz, rounded) and the clock rung's ceiling, from the tick's state."""
    rungs = {c.gpu_id: c for c in state.clocks}
    found: Clocks = {}
    for gpu in state.snapshot.gpus:
        rung = rungs.get(gpu.gpu_id)
        limiting = rung is not None and rung.mode in (ClockMode.LIMITING, ClockMode.FLOOR)
        ceiling = None if rung is None or rung.ceiling_mhz is None else round(rung.ceiling_mhz)
        found[gpu.gpu_id] = {"sclk_mhz": None if gpu.sclk_hz is None else round(gpu.sclk_hz / 1e6),
                             "ceiling_mhz": ceiling, "limiting": limiting}
    return found


def point(summary: Summary, clocks: Clocks | None = None) -> Point:
    """One tick's chart values, compact: per GPU ``GPU_SERIES`` [hottest °C, fan duty %, power W, busy %, cap W,
    shader clock MHz], per run steps/s."""
    gpus = {}
    for gpu in summary["gpus"]:
        temps = [t["temp_c"] for t in gpu["temps"] if t["temp_c"] is not None]
        sclk = (clocks or {}).get(gpu["id"], {}).get("sclk_mhz")
        gpus[gpu["id"]] = [max(temps) if temps else None, gpu["fan"]["duty_pct"], gpu["power"]["w"], gpu["busy_pct"],
                           gpu["power"]["cap_w"], sclk]
    return {"t": summary["taken_unix"], "g": gpus, "r": {run["name"]: run["steps_per_s"] for run in summary["runs"]}}


class History:
    """The ring of points; resized (newest kept) when a reload changes the interval."""

    def __init__(self, interval_s: float) -> None:
        self._points: deque[Point] = deque(maxlen=capacity(interval_s))

    def add(self, summary: Summary, clocks: Clocks | None = None) -> Point:
        wanted = capacity(summary["interval_s"] or 0.0)
        if wanted != self._points.maxlen:
            self._points = deque(self._points, maxlen=wanted)
        new = point(summary, clocks)
        self._points.append(new)
        return new

    def points(self) -> list[Point]:
        return list(self._points)

    def __len__(self) -> int:
        return len(self._points)


def events(before: Summary | None, after: Summary, reloaded: bool, clocks_before: Clocks | None = None,
           clocks_after: Clocks | None = None) -> list[Event]:
    """What changed from one tick's summary (and ``clocks``) to the next, oldest rule first."""
    tick, unix = after["tick"], after["taken_unix"]

    def event(kind: str, text: str, gpu: str | None = None, run: str | None = None) -> Event:
        return {"tick": tick, "unix": unix, "kind": kind, "text": text, "gpu": gpu, "run": run}

    found: list[Event] = []
    if before is None:
        found.append(event("start", f"daemon started (version {after['version']})"))
    if reloaded:
        found.append(event("reload", "configuration reloaded"))
    old_gpus = {g["id"]: g for g in before["gpus"]} if before else {}
    for gpu in after["gpus"]:
        found += _gpu_events(old_gpus.get(gpu["id"]), gpu, event)
        found += _acting_events(old_gpus.get(gpu["id"]), gpu, (clocks_before or {}).get(gpu["id"]),
                                (clocks_after or {}).get(gpu["id"]), event)
    old_runs = {r["name"]: r for r in before["runs"]} if before else {}
    for run in after["runs"]:
        found += _run_events(old_runs.get(run["name"]), run, event)
    return found


def _gpu_events(old: Summary | None, new: Summary, event: MakeEvent) -> list[Event]:
    gpu = new["id"]
    found: list[Event] = []
    if old is None:
        return found
    if new["resets_total"] > old["resets_total"]:
        found.append(event("reset", f"GPU {gpu} reset ({_count(new['resets_total'], 'reset')} since start)",
                           gpu=gpu))
    if new["state"] != old["state"] and (new["state"] != "up" or old["state"] != "asleep") and (
            new["state"] != "asleep" or old["state"] != "up"):
        found.append(event("gpu", f"GPU {gpu} {new['state']} (was {old['state']})", gpu=gpu))
    was_failsafe, failsafe = old["fan"]["mode"] == "failsafe", new["fan"]["mode"] == "failsafe"
    if failsafe and not was_failsafe:
        why = (new["fan"]["message"] or "").removesuffix(": failsafe")  # the event says failsafe itself
        found.append(event("failsafe", f"fan of {gpu} at 100 % in failsafe" + _because(why), gpu=gpu))
    elif was_failsafe and not failsafe:
        mode = new["fan"]["mode"]
        found.append(event("failsafe", f"fan of {gpu} back on the curve" if mode == "curve" else
                           f"fan of {gpu} out of failsafe ({mode})", gpu=gpu))
    return found


def _acting_events(old: Summary | None, new: Summary, old_clock: dict[str, Any] | None,
                   new_clock: dict[str, Any] | None, event: MakeEvent) -> list[Event]:
    """The moments gpuwatch acted on a GPU: its cap lowered or given back, a clock ceiling set or released (the
    rungs' mode changes, not every step of the governor: the chart's cap series shows those)."""
    gpu = new["id"]
    found: list[Event] = []
    if old is not None:
        was, now = old["power"]["mode"] in CAPPING, new["power"]["mode"] in CAPPING
        cap, before = new["power"]["cap_w"], old["power"]["cap_w"]
        if now and not was:
            found.append(event("cap", f"cap of {gpu} lowered" + _to(cap) + (f" from {_w(before)}" if before else ""),
                               gpu=gpu))
        elif was and not now:
            found.append(event("cap", f"cap of {gpu} given back" + _to(cap), gpu=gpu))
        elif now and new["power"]["mode"] != old["power"]["mode"]:
            where = "held at its floor" if new["power"]["mode"] == "floor" else "above its floor again"
            found.append(event("cap", f"cap of {gpu} {where}" + (f", {_w(cap)}" if cap is not None else ""),
                               gpu=gpu))
    if old_clock is not None and new_clock is not None and old_clock["limiting"] != new_clock["limiting"]:
        if new_clock["limiting"]:
            mhz = new_clock["ceiling_mhz"]
            found.append(event("ceiling", f"clock ceiling of {gpu} set to "
                                          + (f"{mhz:g} MHz" if mhz is not None else "a lower clock"), gpu=gpu))
        else:
            found.append(event("ceiling", f"clock ceiling of {gpu} released", gpu=gpu))
    return found


def _w(watts: float) -> str:
    return f"{watts:g} W"


def _to(watts: float | None) -> str:
    return "" if watts is None else f" to {_w(watts)}"


def _because(why: str | None) -> str:
    """The cause after an event's sentence, in parentheses (its own words may hold a colon: one sentence still)."""
    return f" ({why})" if why else ""


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _run_events(old: Summary | None, new: Summary, event: MakeEvent) -> list[Event]:
    name, phase = new["name"], new["phase"]
    if old is None or old["phase"] == phase:
        return []
    held = ("pausing", "paused")
    if phase in held and old["phase"] not in held:
        return [event("pause", f"run {name} paused" + _because(new["why"]), run=name)]
    if old["phase"] in held and phase == "running":
        return [event("resume", f"run {name} resumed", run=name)]
    if new["restarts_total"] > old["restarts_total"]:
        return [event("restart", f"run {name} restarted ({_count(new['restarts_total'], 'restart')} so far)",
                      run=name)]
    if phase in ENDED:
        return [event("run", f"run {name} {ENDED[phase]}" + _because(new["why"]), run=name)]
    return []


class EventLog:
    """The last ``MAX_EVENTS`` events and the summary they were derived from."""

    def __init__(self) -> None:
        self._events: deque[Event] = deque(maxlen=MAX_EVENTS)
        self._last: Summary | None = None
        self._clocks: Clocks | None = None

    def add(self, summary: Summary, reloaded: bool, clocks: Clocks | None = None) -> list[Event]:
        new = events(self._last, summary, reloaded, self._clocks, clocks)
        self._events.extend(new)
        self._last, self._clocks = summary, clocks
        return new

    def recent(self) -> list[Event]:
        """Newest first."""
        return list(reversed(self._events))
