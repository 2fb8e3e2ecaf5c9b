#!/usr/bin/env python3
"""Writes config/grafana-dashboard.json: the gpuwatch Grafana dashboard, generated so panels stay uniform.

Edit the PANELS table here, run `python3 scripts/make-dashboard.py`, commit both files
(tests/e2e/test_dashboard.py fails when they differ). Every query filters on the `instance` and `gpu`
variables so one dashboard serves many machines; the datasource is a variable too, so the JSON
imports unedited on any Prometheus datasource.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parent.parent / "config" / "grafana-dashboard.json"
DS = {"type": "prometheus", "uid": "${datasource}"}
I = 'instance=~"$instance"'
G = f'{I},gpu=~"$gpu"'

# (title, kind, unit, [(expr, legend)], extra field config / options)
Panel = tuple[str, str, str, list[tuple[str, str]], dict[str, Any]]
ROWS: list[tuple[str, list[Panel]]] = [
    ("Overview", [
        ("GPUs up / down", "stat", "none", [
            (f'sum by (instance, state) (gpuwatch_gpus{{{I}}})', "{{instance}} {{state}}")], {}),
        ("GPUs", "table", "none", [
            (f'gpuwatch_gpu_info{{{G}}} * on (instance, job, gpu) group_left () gpuwatch_gpu_up{{{G}}}', "")],
         {"instant": True}),
    ]),
    ("Temperatures", [
        (f"Junction (hotspot) with crit and gpuwatch limit", "timeseries", "celsius", [
            (f'gpuwatch_gpu_temperature_celsius{{{G},sensor="junction"}}', "{{gpu}}"),
            (f'gpuwatch_gpu_temperature_crit_celsius{{{G},sensor="junction"}}', "{{gpu}} crit"),
            (f'gpuwatch_gpu_temperature_limit_celsius{{{G},sensor="junction"}}', "{{gpu}} limit")], {"thresholds_dashed": True}),
        ("Edge with crit and gpuwatch limit", "timeseries", "celsius", [
            (f'gpuwatch_gpu_temperature_celsius{{{G},sensor="edge"}}', "{{gpu}}"),
            (f'gpuwatch_gpu_temperature_crit_celsius{{{G},sensor="edge"}}', "{{gpu}} crit"),
            (f'gpuwatch_gpu_temperature_limit_celsius{{{G},sensor="edge"}}', "{{gpu}} limit")], {"thresholds_dashed": True}),
        ("Memory (VRAM) with crit and gpuwatch limit", "timeseries", "celsius", [
            (f'gpuwatch_gpu_temperature_celsius{{{G},sensor="mem"}}', "{{gpu}}"),
            (f'gpuwatch_gpu_temperature_crit_celsius{{{G},sensor="mem"}}', "{{gpu}} crit"),
            (f'gpuwatch_gpu_temperature_limit_celsius{{{G},sensor="mem"}}', "{{gpu}} limit")], {"thresholds_dashed": True}),
        ("Thermal state (over gpuwatch limit)", "state-timeline", "none", [
            (f'gpuwatch_gpu_thermal_over_limit{{{G}}}', "{{gpu}} {{sensor}}")],
         {"mappings": {"0": ("ok", "green"), "1": ("over limit", "red")}}),
    ]),
    ("Fans", [
        ("Fan duty: target vs applied vs readback", "timeseries", "percentunit", [
            (f'gpuwatch_fan_target_duty_ratio{{{G}}}', "{{gpu}} target"),
            (f'gpuwatch_fan_applied_duty_ratio{{{G}}}', "{{gpu}} applied"),
            (f'gpuwatch_fan_readback_duty_ratio{{{G}}}', "{{gpu}} readback"),
            (f'gpuwatch_gpu_fan_duty_ratio{{{G}}}', "{{gpu}} pwm1 now")], {"max": 1}),
        ("Fan speed", "timeseries", "rpm", [
            (f'gpuwatch_gpu_fan_rpm{{{G}}}', "{{gpu}}"),
            (f'gpuwatch_gpu_fan_max_rpm{{{G}}}', "{{gpu}} max")], {}),
        ("Fan mode", "state-timeline", "none", [
            (f'gpuwatch_fan_mode{{{G}}} == 1', "{{gpu}} {{mode}}")],
         {"mappings": {"1": ("active", "blue")}}),
        ("Fan controller events", "timeseries", "short", [
            (f'increase(gpuwatch_fan_mode_resets_total{{{G}}}[$__rate_interval])', "{{gpu}} mode resets"),
            (f'increase(gpuwatch_fan_write_errors_total{{{G}}}[$__rate_interval])', "{{gpu}} write errors"),
            (f'increase(gpuwatch_fan_stalls_total{{{G}}}[$__rate_interval])', "{{gpu}} stalls"),
            (f'gpuwatch_fan_stalled{{{G}}}', "{{gpu}} stalled now")], {}),
    ]),
    ("Power, load and memory", [
        ("Power vs cap", "timeseries", "watt", [
            (f'gpuwatch_gpu_power_watts{{{G}}}', "{{gpu}}"),
            (f'gpuwatch_gpu_power_cap_watts{{{G}}}', "{{gpu}} cap")], {}),
        ("Busy", "timeseries", "percentunit", [
            (f'gpuwatch_gpu_busy_ratio{{{G}}}', "{{gpu}} GPU"),
            (f'gpuwatch_gpu_memory_busy_ratio{{{G}}}', "{{gpu}} memory controller")], {"max": 1}),
        ("VRAM and GTT", "timeseries", "bytes", [
            (f'gpuwatch_gpu_vram_used_bytes{{{G}}}', "{{gpu}} VRAM used"),
            (f'gpuwatch_gpu_vram_total_bytes{{{G}}}', "{{gpu}} VRAM total"),
            (f'gpuwatch_gpu_gtt_used_bytes{{{G}}}', "{{gpu}} GTT used")], {}),
        ("Clocks", "timeseries", "hertz", [
            (f'gpuwatch_gpu_clock_hertz{{{G}}}', "{{gpu}} {{clock}}")], {}),
    ]),
    ("Training", [
        ("Trainer phase", "state-timeline", "none", [
            (f'gpuwatch_trainer_phase{{{I}}} == 1', "{{trainer}} {{phase}}")],
         {"mappings": {"1": ("active", "blue")}}),
        ("Training speed", "timeseries", "short", [
            (f'gpuwatch_trainer_steps_per_second{{{I}}}', "{{trainer}} steps/s (heartbeat)"),
            (f'rate(gpuwatch_trainer_steps_total{{{I}}}[$__rate_interval])', "{{trainer}} steps/s (rate)")], {}),
        ("Seconds since last step, epoch", "timeseries", "s", [
            (f'gpuwatch_trainer_last_step_age_seconds{{{I}}}', "{{trainer}} since last step"),
            (f'gpuwatch_trainer_epoch{{{I}}}', "{{trainer}} epoch")], {}),
        ("Restarts, pauses, resumes", "timeseries", "short", [
            (f'increase(gpuwatch_trainer_restarts_by_reason_total{{{I}}}[$__rate_interval])', "{{trainer}} restart: {{reason}}"),
            (f'increase(gpuwatch_trainer_restarts_total{{{I}}}[$__rate_interval])', "{{trainer}} restarts"),
            (f'increase(gpuwatch_trainer_pauses_total{{{I}}}[$__rate_interval])', "{{trainer}} pauses"),
            (f'increase(gpuwatch_trainer_resumes_total{{{I}}}[$__rate_interval])', "{{trainer}} resumes")], {}),
    ]),
    ("Exporter health", [
        ("Scrape up and last sample age", "timeseries", "s", [
            (f'up{{job="gpuwatch",{I}}}', "{{instance}} up"),
            (f'time() - gpuwatch_last_sample_timestamp_seconds{{{I}}}', "{{instance}} sample age")], {}),
        ("Sample duration", "timeseries", "s", [
            (f'gpuwatch_sample_duration_seconds{{{I}}}', "{{instance}}"),
            (f'gpuwatch_tick_interval_seconds{{{I}}}', "{{instance}} interval")], {}),
        ("Sensor read errors and failing parts", "timeseries", "short", [
            (f'increase(gpuwatch_gpu_read_errors_total{{{G}}}[$__rate_interval])', "{{gpu}} {{sensor}} errors"),
            (f'gpuwatch_gpu_read_failing{{{G}}}', "{{gpu}} {{sensor}} failing now"),
            (f'gpuwatch_daemon_part_failing{{{I}}}', "{{instance}} {{part}} failing")], {}),
    ]),
]


def panel(pid: int, spec: Panel, x: int, y: int) -> dict[str, Any]:
    title, kind, unit, queries, extra = spec
    instant = bool(extra.get("instant"))
    targets = [
        {"datasource": DS, "expr": expr, "legendFormat": legend, "refId": chr(ord("A") + i),
         "instant": instant, "range": not instant, **({"format": "table"} if kind == "table" else {})}
        for i, (expr, legend) in enumerate(queries)
    ]
    defaults: dict[str, Any] = {"unit": unit}
    if "max" in extra:
        defaults.update(min=0, max=extra["max"])
    if "mappings" in extra:
        defaults["mappings"] = [{"type": "value", "options": {
            value: {"text": text, "color": color, "index": i}
            for i, (value, (text, color)) in enumerate(extra["mappings"].items())}}]
    overrides = []
    if extra.get("thresholds_dashed"):
        overrides = [{"matcher": {"id": "byRegexp", "options": f"/ {name}$/"}, "properties": [
            {"id": "custom.lineStyle", "value": {"fill": "dash", "dash": [10, 10]}},
            {"id": "color", "value": {"mode": "fixed", "fixedColor": color}}]}
            for name, color in (("crit", "red"), ("limit", "orange"))]
    return {
        "id": pid, "type": kind, "title": title, "datasource": DS,
        "gridPos": {"h": 8, "w": 12, "x": x, "y": y},
        "fieldConfig": {"defaults": defaults, "overrides": overrides},
        "options": {"legend": {"displayMode": "list", "placement": "bottom", "showLegend": True}},
        "targets": targets,
    }


def variable(name: str, label: str, query: str) -> dict[str, Any]:
    return {
        "name": name, "label": label, "type": "query", "datasource": DS,
        "query": {"query": query, "refId": f"{name}-var"}, "definition": query,
        "refresh": 2, "multi": True, "includeAll": True, "allValue": ".*", "sort": 1,
        "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
    }


def dashboard() -> dict[str, Any]:
    panels: list[dict[str, Any]] = []
    pid, y = 1, 0
    for row_title, specs in ROWS:
        panels.append({"id": pid, "type": "row", "title": row_title, "collapsed": False,
                       "gridPos": {"h": 1, "w": 24, "x": 0, "y": y}, "panels": []})
        pid, y = pid + 1, y + 1
        for i, spec in enumerate(specs):
            panels.append(panel(pid, spec, 12 * (i % 2), y + 8 * (i // 2)))
            pid += 1
        y += 8 * ((len(specs) + 1) // 2)
    return {
        "title": "gpuwatch", "uid": "gpuwatch", "tags": ["gpuwatch", "gpu", "amdgpu"],
        "description": "GPU health, fan controller and training supervisor (gpuwatch). docs/metrics.md",
        "schemaVersion": 39, "version": 1, "editable": True, "graphTooltip": 1,
        "time": {"from": "now-6h", "to": "now"}, "refresh": "30s", "timezone": "",
        "templating": {"list": [
            {"name": "datasource", "label": "Data source", "type": "datasource", "query": "prometheus",
             "current": {}, "hide": 0, "refresh": 1, "regex": ""},
            variable("instance", "Machine", "label_values(gpuwatch_build_info, instance)"),
            variable("gpu", "GPU", 'label_values(gpuwatch_gpu_info{instance=~"$instance"}, gpu)'),
        ]},
        "annotations": {"list": []},
        "panels": panels,
    }


def render() -> str:
    return json.dumps(dashboard(), indent=2) + "\n"


if __name__ == "__main__":
    if "--check" in sys.argv:
        sys.exit(0 if OUT.read_text() == render() else 1)
    OUT.write_text(render())
