"""config/grafana-dashboard.json as the end-to-end tests query it: its panels and variables with
Grafana's variables substituted, and which panels need which part of gpuwatch to have any data."""

from __future__ import annotations

import json
import re
from typing import Any

from tests.support.paths import REPO

DASHBOARD = REPO / "config" / "grafana-dashboard.json"
# What Grafana puts in for its variables: "All" everywhere (the allValue of host and gpu; instance has
# none, so Grafana lists every machine: .+ here).
GRAFANA_VARIABLES = {"$__rate_interval": "1m", "$__interval": "15s", "$__range": "5m", "$host": ".*",
                     "$instance": ".+", "$gpu": ".*"}
# Panels whose series exist only when a part of gpuwatch runs (read from the daemon's /status by
# present_components); every other panel must have data.
CONDITIONAL_PANELS = {
    "Fan mode": "fan controller",
    "Fan controller events": "fan controller",
    "Power governor state": "power governor",
    "Power cap: governed, original, floor, drawn": "power governor",
    "Training speed kept by the cap (estimate), share of time capped": "power governor",
    "Power cap writes and errors": "power governor",
    "Trainer phase": "trainer",
    "Restarts, pauses, resumes": "trainer",
    "Training speed": "trainer steps",
    "Seconds since last step, epoch": "trainer steps",
    "Training energy: this run": "trainer",
    "Training steps per kilojoule": "trainer steps",
    # gpu_metrics throttle bits, energy and PCIe counters: absent on cards without them (NVML, Polaris)
    "Throttling reported by the card": "throttle reasons",
    "Share of time throttled, by reason": "throttle reasons",
    "GPU energy in the time range": "energy",
    "PCIe errors (AER) and replays": "pcie counters",
    # read errors and failing parts: series exist only once something failed (absent, not 0)
    "Sensor read errors and failing parts": "failures",
    # a trainer seen holding a GPU (in /proc): none where no GPU is really used
    "GPU memory held: trainers and other processes": "processes",
    "Trainer GPU activity": "processes",
}


def load() -> dict[str, Any]:
    dashboard: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return dashboard


def panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for p in dashboard["panels"] if p["type"] != "row"]


def concrete(expr: str, **values: str) -> str:
    """``expr`` with Grafana's variables substituted: ``values`` (instance=..., without the $) first,
    then "All"."""
    for name, value in values.items():
        expr = expr.replace(f"${name}", value)
    for variable, value in GRAFANA_VARIABLES.items():
        expr = expr.replace(variable, value)
    assert "$" not in expr, f"unhandled Grafana variable in {expr}"
    return expr


def promql_regex(text: str) -> str:
    """``text`` matched literally by ``=~"..."``: regex-escaped, then each backslash doubled for the
    PromQL string (Python's ``\\.`` alone is an invalid escape there: HTTP 400)."""
    return re.escape(text).replace("\\", "\\\\")


def variable_queries(dashboard: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(name, series selector, label) of every `label_values(selector, label)` variable."""
    out = []
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            match = re.fullmatch(r"label_values\((.+), (\w+)\)", variable["definition"])
            assert match, variable["definition"]
            out.append((variable["name"], match.group(1), match.group(2)))
    return out


def present_components(status: dict[str, Any]) -> set[str]:
    """The parts of gpuwatch that publish series in this daemon's run, from its /status document."""
    present = set()
    if any(gpu.get("fan_controller") for gpu in status["gpus"]):
        present.add("fan controller")
    if any(gpu.get("power_governor") for gpu in status["gpus"]):
        present.add("power governor")
    if status["trainers"]:
        present.add("trainer")
    if any(t.get("steps_total") is not None for t in status["trainers"]):
        present.add("trainer steps")
    if any(gpu.get("errors") for gpu in status["gpus"]) or (status.get("daemon") or {}).get("failures"):
        present.add("failures")
    if any(gpu.get("throttle_reasons") is not None for gpu in status["gpus"]):
        present.add("throttle reasons")
    if any(gpu.get("energy_joules") is not None for gpu in status["gpus"]):
        present.add("energy")
    counters = ("pcie_aer_correctable_total", "pcie_aer_nonfatal_total", "pcie_aer_fatal_total", "pcie_replays_total")
    if any(gpu.get(key) is not None for gpu in status["gpus"] for key in counters):
        present.add("pcie counters")
    if any(t.get("gpu_use") for t in status["trainers"]):
        present.add("processes")
    return present
