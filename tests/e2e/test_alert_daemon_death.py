"""Issue 39: nothing is announced resolved because the reporter died, proven with the real stack.

Three gpuwatch daemons, each on a simulated card that falls off the bus 2 s after start (GpuMissing,
and GpuFanFailsafe, which GpuMissing holds back), are SIGKILLed at three phases of the alerts' `for:`
windows: while GpuMissing is pending, just after it fires (in Prometheus, before Alertmanager has
announced it) and after it was announced. Each is started again, its card back, once GpuwatchDown has
reached the webhook, so its alerts come back mid-keep_firing_for. Prometheus evaluates a copy of the
shipped rules with every `for:` and `keep_firing_for:` scaled by SCALE, at the shipped scrape and
evaluation intervals scaled alike, and Alertmanager runs the shipped config with its group timings
scaled alike (tests/support/stack.py builds both from the shipped files, so they cannot drift).

The webhook must never carry a RESOLVED alert of a killed machine before its daemon is scraped again,
nor one that Prometheus resolved before that (Alertmanager's endsAt); GpuMissing resolves only after
that, from the daemon's data with the card back; GpuFanFailsafe, held back all along, is never listed
at all, neither firing nor resolved. With the rules and config of before issue 39 this fails: the
announced run's GpuMissing and GpuFanFailsafe are listed resolved, as of the moment of the kill.
"""

from __future__ import annotations

import re
import time
import urllib.parse
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.paths import REPO
from tests.support.processes import Processes, Started, free_port, get_json, wait_up
from tests.support.receiver import Delivery, NotificationSink
from tests.support.stack import (
    GPUWATCH,
    PROMETHEUS_CONFIG,
    daemon_config,
    local_alertmanager,
    missing,
    query,
    scale_rule_timers,
    scaled,
    start_alertmanager,
    start_prometheus,
    targets_up,
)
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.prometheus, pytest.mark.skipif(bool(missing("prometheus", "alertmanager")),
                                                         reason=missing("prometheus", "alertmanager"))]

ALERTS = REPO / "config" / "alerts.yml"
ALERTMANAGER = REPO / "config" / "alertmanager.yml"
TEMPLATES = REPO / "config" / "gpuwatch.tmpl"
SCALE = 0.1  # 2m keep_firing_for -> 12 s, GpuwatchDown's 30s -> 3 s, scrape 10s -> 1 s
GONE = '[simulate]\nenabled = true\ngpus = 1\ntime_scale = 1.0\n[simulate.faults]\ndisappear_after_s = 2.0\n'
BACK = '[simulate]\nenabled = true\ngpus = 1\ntime_scale = 1.0\n'
PHASES = ("pending", "firing", "announced")


@dataclass
class Run:
    """One daemon, killed at ``phase`` and started again on the same port, its card back."""
    phase: str
    port: int
    gone: Path
    back: Path
    child: Started
    killed_at: float | None = None
    restarted: Started | None = None
    back_at: float | None = None  # time.monotonic() when Prometheus scraped the new daemon
    back_wall: float | None = None  # the same as time.time(), to compare with Alertmanager's endsAt

    @property
    def instance(self) -> str:
        return f"127.0.0.1:{self.port}"


def alerts_of(delivery: Delivery, instance: str) -> list[dict[str, Any]]:
    return [a for a in delivery.body["alerts"] if a["labels"]["instance"] == instance]


def webhook(sink: NotificationSink, instance: str) -> list[tuple[float, dict[str, Any]]]:
    """(arrival, alert) for every alert of ``instance`` the webhook received, in order."""
    return [(d.at, a) for d in sink.deliveries() if d.route == "/webhook" for a in alerts_of(d, instance)]


def delivered(sink: NotificationSink, instance: str, alertname: str, status: str) -> bool:
    return any(a["labels"]["alertname"] == alertname and a["status"] == status for _, a in webhook(sink, instance))


def alert_state(prom: str, instance: str, alertname: str) -> str | None:
    found = query(prom, f'ALERTS{{alertname="{alertname}",instance="{instance}"}}')
    return found[0]["metric"]["alertstate"] if found else None


def prometheus_config(am: str, targets: list[str]) -> str:
    """The shipped intervals (global evaluation, the gpuwatch job's scrape) scaled, pointed at the test."""
    shipped = yaml.safe_load(PROMETHEUS_CONFIG.read_text())
    job = next(j for j in shipped["scrape_configs"] if j["job_name"] == "gpuwatch")
    scrape = scaled(job.get("scrape_interval", shipped["global"]["scrape_interval"]), SCALE)
    evaluation = scaled(shipped["global"]["evaluation_interval"], SCALE)
    return (f"global:\n  scrape_interval: {scrape}\n  evaluation_interval: {evaluation}\n"
            "rule_files: [alerts.yml]\n"
            f"alerting:\n  alertmanagers:\n    - static_configs:\n        - targets: ['{am.removeprefix('http://')}']\n"
            f"scrape_configs:\n  - job_name: gpuwatch\n    scrape_interval: {scrape}\n    static_configs:\n"
            f"      - targets: {targets!r}\n")


def ends_at(alert: dict[str, Any]) -> float:
    """When Prometheus resolved ``alert`` (Alertmanager's endsAt, RFC 3339 with nanoseconds), Unix seconds."""
    text = re.sub(r"(\.\d{6})\d+", r"\1", alert["endsAt"])
    return datetime.fromisoformat(text).timestamp()


def resolved_by_death(sink: NotificationSink, run: Run) -> list[tuple[str, float]]:
    """The RESOLVED alerts of ``run`` that Prometheus resolved before the new daemon was scraped (less one
    scrape interval of slack): resolved because the reporter died, not from its data. (alertname, s before)"""
    if run.back_wall is None:
        return []
    return [(a["labels"]["alertname"], round(run.back_wall - ends_at(a), 1)) for _, a in webhook(sink, run.instance)
            if a["status"] == "resolved" and ends_at(a) < run.back_wall - 1.5]


def firing_at(prom: str, instance: str, alertname: str, wall: float) -> bool:
    """Whether Prometheus had ``alertname`` of ``instance`` firing at Unix time ``wall``."""
    expr = f'ALERTS{{alertname="{alertname}",alertstate="firing",instance="{instance}"}}'
    body = get_json(f"{prom}/api/v1/query?" + urllib.parse.urlencode({"query": expr, "time": f"{wall:.3f}"}))
    return bool(body["data"]["result"])


def kill_now(run: Run, sink: NotificationSink, prom: str) -> bool:
    """Whether ``run`` has reached the phase it is to be killed in."""
    if run.phase == "announced":
        return delivered(sink, run.instance, "GpuMissing", "firing")
    return alert_state(prom, run.instance, "GpuMissing") == run.phase


@pytest.mark.timeout(300)  # ~60 s of stack time; bounded waits of 60-150 s on a loaded machine
def test_no_alert_resolves_because_the_daemon_died(tmp_path: Path) -> None:
    with NotificationSink() as sink, Processes(tmp_path / "logs") as processes:
        am_dir = tmp_path / "am"
        am_dir.mkdir()
        (am_dir / "gpuwatch.tmpl").write_text(TEMPLATES.read_text())
        shipped_am = yaml.safe_load(ALERTMANAGER.read_text())["route"]
        group_wait, group_interval = (scaled(shipped_am[key], SCALE) for key in ("group_wait", "group_interval"))
        (am_dir / "alertmanager.yml").write_text(local_alertmanager(
            ALERTMANAGER.read_text(), sink.http_port, sink.smtp_port, group_wait, group_interval))
        alertmanager, am = start_alertmanager(processes, tmp_path, am_dir / "alertmanager.yml")

        runs = []
        for phase in PHASES:
            port = free_port()
            runtime = tmp_path / f"run-{phase}"
            gone, back = tmp_path / f"{phase}-gone.toml", tmp_path / f"{phase}-back.toml"
            gone.write_text(daemon_config(runtime, GONE).replace("port = 0", f"port = {port}"))
            back.write_text(daemon_config(runtime, BACK).replace("port = 0", f"port = {port}"))
            child = processes.start(f"gpuwatch-{phase}", [*GPUWATCH, "run", "-c", str(gone)])
            runs.append(Run(phase, port, gone, back, child))

        prom_dir = tmp_path / "prom"
        prom_dir.mkdir()
        (prom_dir / "alerts.yml").write_text(scale_rule_timers(ALERTS.read_text(), SCALE))
        prometheus, prom = start_prometheus(processes, prom_dir, prometheus_config(am, [r.instance for r in runs]))
        wait_up("prometheus to find alertmanager",
                lambda: get_json(f"{prom}/api/v1/alertmanagers")["data"]["activeAlertmanagers"], prometheus)

        def step() -> bool:
            """One look at every run: kill, restart, see it back; True once all are back."""
            up = targets_up(prom)
            for run in runs:
                if run.killed_at is None:
                    if run.instance in up and kill_now(run, sink, prom):
                        run.child.process.kill()  # SIGKILL: no goodbye, its series just vanish
                        run.child.process.wait(timeout=30)
                        run.killed_at = time.monotonic()
                elif run.restarted is None:
                    if delivered(sink, run.instance, "GpuwatchDown", "firing"):
                        run.restarted = processes.start(f"gpuwatch-{run.phase}-back",
                                                        [*GPUWATCH, "run", "-c", str(run.back)])
                elif run.back_at is None and run.instance in up:
                    run.back_at, run.back_wall = time.monotonic(), time.time()  # it reports for itself again
            return all(run.back_at is not None for run in runs)

        def state() -> str:
            return "\n".join(f"{r.phase}: killed {r.killed_at}, restarted {r.restarted is not None}, "
                             f"back {r.back_at}, webhook "
                             f"{[(a['labels']['alertname'], a['status']) for _, a in webhook(sink, r.instance)]}"
                             for r in runs)

        wait_for(step, "every daemon killed in its phase and back", 150, interval_s=0.2, ignore=(OSError, ValueError),
                 detail=state)

        # Everything a daemon's death could have announced has arrived by the time it is back.
        for run in runs:
            assert run.back_at is not None
            early = [(a["labels"]["alertname"], round(at - run.back_at, 1)) for at, a in webhook(sink, run.instance)
                     if a["status"] == "resolved" and at < run.back_at]
            assert not early, f"{run.phase}: announced resolved before its daemon was back (s before): {early}"

        # GpuMissing was still firing (keep_firing_for) when its daemon came back, as it is unless the restart
        # took longer than its keep_firing_for: then it resolves from the new daemon's data and is announced.
        # If not (a very slow restart), it resolved while GpuwatchDown held it back and is never announced
        # resolved: also right (docs/metrics.md), checked below.
        kept = {r.phase for r in runs if r.phase != "pending" and r.back_wall is not None
                and firing_at(prom, r.instance, "GpuMissing", r.back_wall)}

        def settled() -> bool:
            if any(resolved_by_death(sink, r) for r in runs):
                return True  # fails below, with what was resolved
            return all(delivered(sink, r.instance, "GpuwatchDown", "resolved") for r in runs) and all(
                delivered(sink, r.instance, "GpuMissing", "resolved") for r in runs if r.phase in kept)

        wait_for(settled, "GpuwatchDown and GpuMissing to resolve after the daemons came back", 90, interval_s=0.2,
                 detail=state)
        assert alertmanager.process.poll() is None and prometheus.process.poll() is None

        died = {run.phase: resolved_by_death(sink, run) for run in runs}
        assert not any(died.values()), f"resolved before the daemon was back (alert, s before), by phase: {died}"
        assert kept, f"GpuMissing was firing on no daemon that came back (keep_firing_for ran out?):\n{state()}"
        for run in runs:
            seen = webhook(sink, run.instance)
            names = {a["labels"]["alertname"] for _, a in seen}
            assert "GpuFanFailsafe" not in names, f"{run.phase}: the held-back fan alert was listed: {seen}"
            if run.phase == "pending":
                assert names == {"GpuwatchDown"}, f"killed while pending, GpuMissing must never be announced: {seen}"
            else:
                assert names == {"GpuwatchDown", "GpuMissing"}, seen
                assert run.phase in kept or not delivered(sink, run.instance, "GpuMissing", "resolved"), seen
        # ... although it did fire: held back by GpuMissing, then by GpuwatchDown, and resolved unannounced.
        announced = next(r for r in runs if r.phase == "announced")
        assert query(prom, f'max_over_time(ALERTS{{alertname="GpuFanFailsafe",alertstate="firing",'
                           f'instance="{announced.instance}"}}[10m])'), "GpuFanFailsafe never fired"
