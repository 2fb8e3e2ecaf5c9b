#!/usr/bin/env python3
"""Writes config/grafana-dashboard.json: the gpuwatch Grafana dashboard, generated so panels stay uniform.

Edit the ROWS table here, run `python3 scripts/make-dashboard.py`, commit both files
(tests/e2e/test_dashboard.py fails when they differ). Every query filters on the `instance` and `gpu`
variables (`instance` is narrowed by `host`) so one dashboard serves a fleet; the datasource is a
variable too, so the JSON imports unedited on any Prometheus datasource. Every query is run against
a real Prometheus by tests/e2e/test_prometheus.py and, per machine of two, tests/e2e/test_fleet.py.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parent.parent / "config" / "grafana-dashboard.json"
DS = {"type": "prometheus", "uid": "${datasource}"}
INST = 'instance=~"$instance"'
G = f'{INST},gpu=~"$gpu"'
BY = "host, instance, gpu"  # one row per GPU of every machine; `host` from the scrape config (config/prometheus.yml)

# (title, kind, unit, [(expr, legend)], extra field config / options)
Panel = tuple[str, str, str, list[tuple[str, str]], dict[str, Any]]
ROWS: list[tuple[str, list[Panel]]] = [
    ("Overview: every GPU of every machine", [
        # Instant queries merged into one table on (host, instance, gpu); the legend names the column.
        ("Every GPU of every machine", "table", "none", [
            (f'max by ({BY}) (gpuwatch_gpu_up{{{G}}})', "up"),
            (f'max by ({BY}) (gpuwatch_gpu_temperature_celsius{{{G},sensor="junction"}})', "junction °C"),
            (f'max by ({BY}) (gpuwatch_gpu_temperature_celsius{{{G},sensor="edge"}})', "edge °C"),
            (f'min by ({BY}) (gpuwatch_gpu_temperature_limit_celsius{{{G}}} - gpuwatch_gpu_temperature_celsius{{{G}}})',
             "°C below limit"),
            (f'max by ({BY}) (gpuwatch_gpu_fan_rpm{{{G}}})', "fan RPM"),
            (f'max by ({BY}) (gpuwatch_gpu_fan_duty_ratio{{{G}}})', "fan duty"),
            (f'max by ({BY}, mode) (gpuwatch_fan_mode{{{G}}} == 1)', ""),  # the mode label is the column
            (f'max by ({BY}) (gpuwatch_gpu_power_watts{{{G}}})', "power W"),
            # the trainers on each GPU and their phase (labels are the columns)
            (f'max by ({BY}, trainer, phase) (gpuwatch_trainer_gpu_info{{{G}}}'
             f' * on (instance, job, trainer) group_left (phase) (gpuwatch_trainer_phase{{{INST}}} == 1))', ""),
            # alerts firing per GPU, 0 for a GPU with none; alerts without a gpu (the machine's) under gpu ""
            (f'count by ({BY}) (ALERTS{{alertstate="firing",job="gpuwatch",{G}}})'
             f' or max by ({BY}) (gpuwatch_gpu_up{{{G}}}) * 0', "alerts firing")],
         {"instant": True, "w": 24, "h": 10, "columns": True,
          "cell_mappings": {"up": {"0": ("GONE", "red"), "1": ("up", "green")}},
          "cell_thresholds": {"alerts firing": [("green", None), ("red", 1)], "°C below limit": [
              ("red", None), ("orange", 0), ("green", 10)]},
          "cell_units": {"junction °C": "celsius", "edge °C": "celsius", "°C below limit": "celsius",
                         "fan RPM": "rpm", "fan duty": "percentunit", "power W": "watt"}}),
        ("Alerts firing (Prometheus evaluating config/alerts.yml)", "table", "none", [
            (f'ALERTS{{alertstate="firing",job="gpuwatch",{INST}}}', "")],
         {"instant": True, "columns": True, "exclude": ["Value", "__name__", "alertstate", "job"]}),
        ("GPUs up / down", "stat", "none", [
            (f'sum by (instance, state) (gpuwatch_gpus{{{INST}}})', "{{instance}} {{state}}")], {}),
        ("GPUs", "table", "none", [
            (f'gpuwatch_gpu_info{{{G}}} * on (instance, job, gpu) group_left () gpuwatch_gpu_up{{{G}}}', "")],
         {"instant": True}),
    ]),
    ("Temperatures", [
        ("Junction (hotspot) with crit and gpuwatch limit", "timeseries", "celsius", [
            (f'gpuwatch_gpu_temperature_celsius{{{G},sensor="junction"}}', "{{host}} {{gpu}}"),
            (f'gpuwatch_gpu_temperature_crit_celsius{{{G},sensor="junction"}}', "{{host}} {{gpu}} crit"),
            (f'gpuwatch_gpu_temperature_limit_celsius{{{G},sensor="junction"}}', "{{host}} {{gpu}} limit")],
         {"thresholds_dashed": True}),
        ("Edge with crit and gpuwatch limit", "timeseries", "celsius", [
            (f'gpuwatch_gpu_temperature_celsius{{{G},sensor="edge"}}', "{{host}} {{gpu}}"),
            (f'gpuwatch_gpu_temperature_crit_celsius{{{G},sensor="edge"}}', "{{host}} {{gpu}} crit"),
            (f'gpuwatch_gpu_temperature_limit_celsius{{{G},sensor="edge"}}', "{{host}} {{gpu}} limit")],
         {"thresholds_dashed": True}),
        ("Memory (VRAM) with crit and gpuwatch limit", "timeseries", "celsius", [
            (f'gpuwatch_gpu_temperature_celsius{{{G},sensor="mem"}}', "{{host}} {{gpu}}"),
            (f'gpuwatch_gpu_temperature_crit_celsius{{{G},sensor="mem"}}', "{{host}} {{gpu}} crit"),
            (f'gpuwatch_gpu_temperature_limit_celsius{{{G},sensor="mem"}}', "{{host}} {{gpu}} limit")],
         {"thresholds_dashed": True}),
        ("Thermal state (over gpuwatch limit)", "state-timeline", "none", [
            (f'gpuwatch_gpu_thermal_over_limit{{{G}}}', "{{host}} {{gpu}} {{sensor}}")],
         {"mappings": {"0": ("ok", "green"), "1": ("over limit", "red")}}),
    ]),
    ("Fans", [
        ("Fan duty: target vs applied vs readback", "timeseries", "percentunit", [
            (f'gpuwatch_fan_target_duty_ratio{{{G}}}', "{{host}} {{gpu}} target"),
            (f'gpuwatch_fan_applied_duty_ratio{{{G}}}', "{{host}} {{gpu}} applied"),
            (f'gpuwatch_fan_readback_duty_ratio{{{G}}}', "{{host}} {{gpu}} readback"),
            (f'gpuwatch_gpu_fan_duty_ratio{{{G}}}', "{{host}} {{gpu}} pwm1 now")], {"max": 1}),
        ("Fan speed", "timeseries", "rpm", [
            (f'gpuwatch_gpu_fan_rpm{{{G}}}', "{{host}} {{gpu}}"),
            (f'gpuwatch_gpu_fan_max_rpm{{{G}}}', "{{host}} {{gpu}} max")], {}),
        ("Fan mode", "state-timeline", "none", [
            (f'gpuwatch_fan_mode{{{G}}} == 1', "{{host}} {{gpu}} {{mode}}")],
         {"mappings": {"1": ("active", "blue")}}),
        ("Fan controller events", "timeseries", "short", [
            (f'increase(gpuwatch_fan_mode_resets_total{{{G}}}[$__rate_interval])', "{{host}} {{gpu}} mode resets"),
            (f'increase(gpuwatch_fan_write_errors_total{{{G}}}[$__rate_interval])', "{{host}} {{gpu}} write errors"),
            (f'increase(gpuwatch_fan_stalls_total{{{G}}}[$__rate_interval])', "{{host}} {{gpu}} stalls"),
            (f'gpuwatch_fan_stalled{{{G}}}', "{{host}} {{gpu}} stalled now")], {}),
    ]),
    ("Power governor (fan, then power cap, then pause)", [
        ("Power cap: governed, original, floor, drawn", "timeseries", "watt", [
            (f'gpuwatch_gpu_power_cap_watts{{{G}}}', "{{host}} {{gpu}} cap in force"),
            (f'gpuwatch_power_governor_target_cap_watts{{{G}}}', "{{host}} {{gpu}} governor target"),
            (f'gpuwatch_power_governor_original_cap_watts{{{G}}}', "{{host}} {{gpu}} original"),
            (f'gpuwatch_power_governor_floor_cap_watts{{{G}}}', "{{host}} {{gpu}} floor"),
            (f'gpuwatch_gpu_power_watts{{{G}}}', "{{host}} {{gpu}} drawn")], {}),
        ("Power governor state", "state-timeline", "none", [
            (f'gpuwatch_power_governor_state{{{G}}} == 1', "{{host}} {{gpu}} {{state}}")],
         {"mappings": {"1": ("active", "blue")}}),
        ("Training speed kept by the cap (estimate), share of time capped", "timeseries", "percentunit", [
            (f'gpuwatch_power_throughput_kept_ratio{{{G}}}', "{{host}} {{gpu}} speed kept"),
            (f'rate(gpuwatch_power_capped_seconds_total{{{G}}}[$__rate_interval])', "{{host}} {{gpu}} time capped")],
         {"max": 1}),
        ("Power cap writes and errors", "timeseries", "short", [
            (f'increase(gpuwatch_power_cap_writes_total{{{G}}}[$__rate_interval])', "{{host}} {{gpu}} writes"),
            (f'increase(gpuwatch_power_cap_write_errors_total{{{G}}}[$__rate_interval])',
             "{{host}} {{gpu}} write errors")],
         {}),
    ]),
    ("Clock ceiling (the cap at its floor, then the clock, then pause)", [
        ("Ladder rung in use, clock rung state", "state-timeline", "none", [
            (f'gpuwatch_ladder_rung{{{G}}} == 1', "{{host}} {{gpu}} rung {{rung}}"),
            (f'gpuwatch_clock_state{{{G}}} == 1', "{{host}} {{gpu}} clock {{state}}")],
         {"mappings": {"1": ("active", "blue")}}),
        ("Shader clock: ceiling in force, its floor, the clock", "timeseries", "none", [
            (f'gpuwatch_clock_ceiling_mhz{{{G}}}', "{{host}} {{gpu}} ceiling (MHz)"),
            (f'gpuwatch_clock_ceiling_floor_mhz{{{G}}}', "{{host}} {{gpu}} floor (MHz)"),
            (f'gpuwatch_gpu_clock_hertz{{{G},clock="sclk"}} / 1e6', "{{host}} {{gpu}} sclk (MHz)")], {}),
        ("Share of time clock-limited, ceiling writes and resets", "timeseries", "short", [
            (f'rate(gpuwatch_clock_limited_seconds_total{{{G}}}[$__rate_interval])', "{{host}} {{gpu}} time limited"),
            (f'increase(gpuwatch_clock_ceiling_writes_total{{{G}}}[$__rate_interval])', "{{host}} {{gpu}} writes"),
            (f'increase(gpuwatch_clock_ceiling_resets_total{{{G}}}[$__rate_interval])',
             "{{host}} {{gpu}} taken again after a reset")], {}),
    ]),
    ("Power, load and memory", [
        ("Power vs cap", "timeseries", "watt", [
            (f'gpuwatch_gpu_power_watts{{{G}}}', "{{host}} {{gpu}}"),
            (f'gpuwatch_gpu_power_cap_watts{{{G}}}', "{{host}} {{gpu}} cap")], {}),
        ("Busy", "timeseries", "percentunit", [
            (f'gpuwatch_gpu_busy_ratio{{{G}}}', "{{host}} {{gpu}} GPU"),
            (f'gpuwatch_gpu_memory_busy_ratio{{{G}}}', "{{host}} {{gpu}} memory controller")], {"max": 1}),
        ("VRAM and GTT", "timeseries", "bytes", [
            (f'gpuwatch_gpu_vram_used_bytes{{{G}}}', "{{host}} {{gpu}} VRAM used"),
            (f'gpuwatch_gpu_vram_total_bytes{{{G}}}', "{{host}} {{gpu}} VRAM total"),
            (f'gpuwatch_gpu_gtt_used_bytes{{{G}}}', "{{host}} {{gpu}} GTT used")], {}),
        ("Clocks", "timeseries", "hertz", [
            (f'gpuwatch_gpu_clock_hertz{{{G}}}', "{{host}} {{gpu}} {{clock}}")], {}),
    ]),
    ("Throttling, energy and PCIe", [
        ("Throttling reported by the card", "state-timeline", "none", [
            (f'gpuwatch_gpu_throttle_active{{{G}}}', "{{host}} {{gpu}} {{reason}}")],
         {"mappings": {"0": ("no", "green"), "1": ("throttling", "orange")}}),
        ("Share of time throttled, by reason", "timeseries", "percentunit", [
            (f'rate(gpuwatch_gpu_throttled_seconds_total{{{G}}}[$__rate_interval])', "{{host}} {{gpu}} {{reason}}")],
         {"max": 1}),
        ("GPU energy in the time range", "stat", "kwatth", [
            (f'increase(gpuwatch_gpu_energy_joules_total{{{G}}}[$__range]) / 3.6e6', "{{host}} {{gpu}} ({{source}})")],
         {}),
        ("Training energy: this run", "timeseries", "kwatth", [
            (f'gpuwatch_trainer_run_energy_joules{{{INST}}} / 3.6e6', "{{host}} {{trainer}} this run"),
            (f'increase(gpuwatch_trainer_energy_joules_total{{{INST}}}[$__range]) / 3.6e6',
             "{{host}} {{trainer}} all runs in range")],
         {}),
        ("Training steps per kilojoule", "timeseries", "short", [
            (f'gpuwatch_trainer_steps_per_kilojoule{{{INST}}}', "{{host}} {{trainer}} steps/kJ")], {}),
        ("PCIe slot link: speed (GT/s) and width (lanes) vs max", "timeseries", "none", [
            (f'gpuwatch_gpu_pcie_slot_link_speed_transfers_per_second{{{G}}} / 1e9', "{{host}} {{gpu}} GT/s"),
            (f'gpuwatch_gpu_pcie_slot_link_max_speed_transfers_per_second{{{G}}} / 1e9', "{{host}} {{gpu}} max GT/s"),
            (f'gpuwatch_gpu_pcie_slot_link_width_lanes{{{G}}}', "{{host}} {{gpu}} lanes"),
            (f'gpuwatch_gpu_pcie_slot_link_max_width_lanes{{{G}}}', "{{host}} {{gpu}} max lanes")], {}),
        ("PCIe errors (AER) and replays", "timeseries", "short", [
            (f'increase(gpuwatch_gpu_pcie_aer_errors_total{{{G}}}[$__rate_interval])', "{{host}} {{gpu}} {{kind}}"),
            (f'gpuwatch_gpu_pcie_aer_errors_total{{{G}}}', "{{host}} {{gpu}} {{kind}} total"),
            (f'increase(gpuwatch_gpu_pcie_replays_total{{{G}}}[$__rate_interval])', "{{host}} {{gpu}} replays")], {}),
    ]),
    ("Training", [
        ("Trainer phase", "state-timeline", "none", [
            (f'gpuwatch_trainer_phase{{{INST}}} == 1', "{{host}} {{trainer}} {{phase}}")],
         {"mappings": {"1": ("active", "blue")}}),
        ("Training speed", "timeseries", "short", [
            (f'gpuwatch_trainer_steps_per_second{{{INST}}}', "{{host}} {{trainer}} steps/s (heartbeat)"),
            (f'rate(gpuwatch_trainer_steps_total{{{INST}}}[$__rate_interval])', "{{host}} {{trainer}} steps/s (rate)")],
         {}),
        ("Seconds since last step, epoch", "timeseries", "s", [
            (f'gpuwatch_trainer_last_step_age_seconds{{{INST}}}', "{{host}} {{trainer}} since last step"),
            (f'gpuwatch_trainer_epoch{{{INST}}}', "{{host}} {{trainer}} epoch")], {}),
        ("Restarts, pauses, resumes", "timeseries", "short", [
            (f'increase(gpuwatch_trainer_restarts_by_reason_total{{{INST}}}[$__rate_interval])',
             "{{host}} {{trainer}} restart: {{reason}}"),
            (f'increase(gpuwatch_trainer_restarts_total{{{INST}}}[$__rate_interval])', "{{host}} {{trainer}} restarts"),
            (f'increase(gpuwatch_trainer_pauses_total{{{INST}}}[$__rate_interval])', "{{host}} {{trainer}} pauses"),
            (f'increase(gpuwatch_trainer_resumes_total{{{INST}}}[$__rate_interval])', "{{host}} {{trainer}} resumes")],
         {}),
    ]),
    ("GPU users and resets", [
        ("GPU memory held: trainers and other processes", "timeseries", "bytes", [
            (f'gpuwatch_trainer_gpu_vram_bytes{{{G}}}', "{{host}} {{trainer}} on {{gpu}} VRAM"),
            (f'gpuwatch_trainer_gpu_kfd_vram_bytes{{{G}}}', "{{host}} {{trainer}} on {{gpu}} VRAM (ROCm, KFD)"),
            (f'gpuwatch_gpu_processes_vram_bytes{{{G},scope="unsupervised"}}', "{{host}} {{gpu}} other processes")],
         {}),
        ("Trainer GPU activity", "timeseries", "percentunit", [
            (f'gpuwatch_trainer_gpu_engine_busy_ratio{{{G}}}', "{{host}} {{trainer}} on {{gpu}} engine time"),
            (f'gpuwatch_trainer_gpu_kfd_cu_occupancy_ratio{{{G}}}',
             "{{host}} {{trainer}} on {{gpu}} CU occupancy (ROCm)")],
         {}),
        ("GPU resets and stuck processes", "timeseries", "short", [
            (f'increase(gpuwatch_gpu_resets_total{{{G}}}[$__rate_interval])', "{{host}} {{gpu}} resets"),
            (f'gpuwatch_gpu_reset_recovering{{{G}}}', "{{host}} {{gpu}} recovering"),
            (f'gpuwatch_gpu_stuck_processes{{{G}}}', "{{host}} {{gpu}} stuck processes (D)")], {}),
    ]),
    ("Exporter health", [
        ("Scrape up and last sample age", "timeseries", "s", [
            (f'up{{job="gpuwatch",{INST}}}', "{{instance}} up"),
            (f'time() - gpuwatch_last_sample_timestamp_seconds{{{INST}}}', "{{instance}} sample age")], {}),
        ("Sample duration", "timeseries", "s", [
            (f'gpuwatch_sample_duration_seconds{{{INST}}}', "{{instance}}"),
            (f'gpuwatch_tick_interval_seconds{{{INST}}}', "{{instance}} interval")], {}),
        ("Sensor read errors and failing parts", "timeseries", "short", [
            (f'increase(gpuwatch_gpu_read_errors_total{{{G}}}[$__rate_interval])',
             "{{host}} {{gpu}} {{sensor}} errors"),
            (f'gpuwatch_gpu_read_failing{{{G}}}', "{{host}} {{gpu}} {{sensor}} failing now"),
            (f'gpuwatch_daemon_part_failing{{{INST}}}', "{{instance}} {{part}} failing")], {}),
    ]),
]


def table_transformations(queries: list[tuple[str, str]], extra: dict[str, Any]) -> list[dict[str, Any]]:
    """A table of instant queries: merged on their labels, the value columns named by the legends."""
    if not extra.get("columns"):
        return []
    values = [f"Value #{chr(ord('A') + i)}" if len(queries) > 1 else "Value" for i in range(len(queries))]
    rename = {value: legend for value, (_, legend) in zip(values, queries, strict=True) if legend}
    exclude = {"Time": True, **{name: True for name in extra.get("exclude", [])},
               **{value: True for value, (_, legend) in zip(values, queries, strict=True) if not legend}}
    merge = [{"id": "merge", "options": {}}] if len(queries) > 1 else []
    return [*merge, {"id": "organize", "options": {"excludeByName": exclude, "renameByName": rename}}]


def cell_overrides(extra: dict[str, Any]) -> list[dict[str, Any]]:
    """Per-column units, value mappings and coloured thresholds of a table."""
    overrides: list[dict[str, Any]] = []
    for column, unit in extra.get("cell_units", {}).items():
        overrides.append({"matcher": {"id": "byName", "options": column},
                          "properties": [{"id": "unit", "value": unit}]})
    for column, mapping in extra.get("cell_mappings", {}).items():
        overrides.append({"matcher": {"id": "byName", "options": column}, "properties": [
            {"id": "mappings", "value": [{"type": "value", "options": {
                value: {"text": text, "color": color, "index": i}
                for i, (value, (text, color)) in enumerate(mapping.items())}}]},
            {"id": "custom.cellOptions", "value": {"type": "color-text"}}]})
    for column, steps in extra.get("cell_thresholds", {}).items():
        overrides.append({"matcher": {"id": "byName", "options": column}, "properties": [
            {"id": "thresholds", "value": {"mode": "absolute", "steps": [
                {"color": color, "value": value} for color, value in steps]}},
            {"id": "custom.cellOptions", "value": {"type": "color-text"}}]})
    return overrides


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
    overrides = cell_overrides(extra)
    if extra.get("thresholds_dashed"):
        overrides = [{"matcher": {"id": "byRegexp", "options": f"/ {name}$/"}, "properties": [
            {"id": "custom.lineStyle", "value": {"fill": "dash", "dash": [10, 10]}},
            {"id": "color", "value": {"mode": "fixed", "fixedColor": color}}]}
            for name, color in (("crit", "red"), ("limit", "orange"))]
    return {
        "id": pid, "type": kind, "title": title, "datasource": DS,
        "gridPos": {"h": extra.get("h", 8), "w": extra.get("w", 12), "x": x, "y": y},
        "fieldConfig": {"defaults": defaults, "overrides": overrides},
        "options": {"legend": {"displayMode": "list", "placement": "bottom", "showLegend": True}},
        "targets": targets,
        **({"transformations": transformations} if (transformations := table_transformations(queries, extra)) else {}),
    }


def variable(name: str, label: str, query: str, all_value: str | None = ".*") -> dict[str, Any]:
    """A multi-select query variable, "All" by default. ``all_value`` None: "All" means the listed values
    (what a variable filtered by another one needs), not every value there is."""
    return {
        "name": name, "label": label, "type": "query", "datasource": DS,
        "query": {"query": query, "refId": f"{name}-var"}, "definition": query,
        "refresh": 2, "multi": True, "includeAll": True, **({"allValue": all_value} if all_value else {}), "sort": 1,
        "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
    }


def dashboard() -> dict[str, Any]:
    panels: list[dict[str, Any]] = []
    pid, y = 1, 0
    for row_title, specs in ROWS:
        panels.append({"id": pid, "type": "row", "title": row_title, "collapsed": False,
                       "gridPos": {"h": 1, "w": 24, "x": 0, "y": y}, "panels": []})
        pid, y = pid + 1, y + 1
        x, line_h = 0, 0  # left to right, then the next line, as Grafana's grid flows
        for spec in specs:
            w, h = spec[4].get("w", 12), spec[4].get("h", 8)
            if x + w > 24:
                x, y, line_h = 0, y + line_h, 0
            panels.append(panel(pid, spec, x, y))
            pid, x, line_h = pid + 1, x + w, max(line_h, h)
        y += line_h
    return {
        "title": "gpuwatch", "uid": "gpuwatch", "tags": ["gpuwatch", "gpu", "amdgpu"],
        "description": "GPU health, fan controller, power governor, clock ceiling and training supervisor (gpuwatch). "
                       "docs/metrics.md",
        "schemaVersion": 39, "version": 1, "editable": True, "graphTooltip": 1,
        "time": {"from": "now-6h", "to": "now"}, "refresh": "30s", "timezone": "",
        "templating": {"list": [
            {"name": "datasource", "label": "Data source", "type": "datasource", "query": "prometheus",
             "current": {}, "hide": 0, "refresh": 1, "regex": ""},
            # host: the short machine name config/prometheus.yml's relabeling sets; without it the
            # variable is empty and "All" (.*) matches every machine
            variable("host", "Host", "label_values(gpuwatch_build_info, host)"),
            variable("instance", "Machine", 'label_values(gpuwatch_build_info{host=~"$host"}, instance)', None),
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
