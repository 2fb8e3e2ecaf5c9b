"""config/alertmanager.yml and config/gpuwatch.tmpl, for real: alerts reach a person, and only once.

Fast checks through amtool: the config is valid, critical alerts route to mail and chat and the rest to
chat, and every template renders the expected lines (check-config parses templates but does not notice
a template name that is used and never defined). Then end to end, everything started and stopped by
the test on 127.0.0.1: gpuwatch on a simulated card whose fan is stuck at 42 % while a supervised
trainer keeps it loaded, a second gpuwatch whose card falls off the bus, Prometheus evaluating the
shipped rules (only the provoked alerts' `for:` and `keep_firing_for:` shortened, in a copy),
Alertmanager on the shipped config pointed at an in-process webhook and SMTP sink. The hot card's
alert must arrive on every receiver with its labels and the one-line text, resolve when the trainer is
paused and the card cools, and the gone card must page once: its fan failsafe is inhibited, and so are
synthetic alerts that the inhibition rules cover. Every alert of config/alerts.yml has a route.
"""

from __future__ import annotations

import json
import os
import pwd
import re
import shutil
import subprocess
import sys
import urllib.parse
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.paths import REPO
from tests.support.processes import Processes, get_json, post_json, wait_up
from tests.support.receiver import Delivery, NotificationSink
from tests.support.stack import (
    AMTOOL,
    GPUWATCH,
    daemon_config,
    local_alertmanager,
    missing,
    query,
    shorten_for,
    start_alertmanager,
    start_gpuwatch,
    start_prometheus,
    targets_up,
)

CONFIG = REPO / "config" / "alertmanager.yml"
TEMPLATES = REPO / "config" / "gpuwatch.tmpl"
ALERTS = REPO / "config" / "alerts.yml"
GPU = "0000:28:00.0"  # the simulator's first card
NEAR_CRIT_C = 105.0  # the simulated card's junction crit (110) - 5: GpuJunctionNearCrit's line
PROVOKED = {"GpuJunctionNearCrit", "GpuMissing", "GpuFanFailsafe"}

pytestmark = [pytest.mark.prometheus, pytest.mark.skipif(bool(missing("amtool")), reason=missing("amtool"))]


def amtool(*args: str | Path) -> subprocess.CompletedProcess[str]:
    assert AMTOOL is not None
    return subprocess.run([AMTOOL, *map(str, args)], capture_output=True, text=True, timeout=60)


def test_config_is_valid() -> None:
    done = amtool("check-config", CONFIG)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize(("severity", "receivers"), [
    ("critical", "gpuwatch-mail,gpuwatch-chat"),  # mail, and (continue) the chat, webhook and ntfy too
    ("warning", "gpuwatch-chat"),
])
def test_routing(severity: str, receivers: str) -> None:
    done = amtool("config", "routes", "test", f"--config.file={CONFIG}", f"--verify.receivers={receivers}",
                  f"severity={severity}", "alertname=GpuJunctionNearCrit", "instance=box3:9840", "gpu=0000:2d:00.0")
    assert done.returncode == 0, done.stdout + done.stderr


def _alert_severities() -> list[tuple[str, str]]:
    rules = [rule for group in yaml.safe_load(ALERTS.read_text())["groups"] for rule in group["rules"]]
    return [(rule["alert"], rule["labels"]["severity"]) for rule in rules]


RECEIVERS = {"critical": "gpuwatch-mail,gpuwatch-chat", "warning": "gpuwatch-chat"}


@pytest.mark.parametrize(("alertname", "severity"), _alert_severities())
def test_every_alert_has_a_route(alertname: str, severity: str) -> None:
    # Every rule of config/alerts.yml (the ones for attached runs, the health verdict, the clock ladder,
    # the web certificate and stopped unmanaged processes included) reaches a person by its severity.
    assert severity in RECEIVERS, f"{alertname}: severity {severity!r} has no route"
    done = amtool("config", "routes", "test", f"--config.file={CONFIG}", f"--verify.receivers={RECEIVERS[severity]}",
                  f"severity={severity}", f"alertname={alertname}", "instance=box3:9840", "gpu=0000:2d:00.0")
    assert done.returncode == 0, done.stdout + done.stderr


SAMPLE = {  # Alertmanager's template data: one firing alert and one resolved, as a group of one GPU
    "receiver": "gpuwatch-chat", "status": "firing", "externalURL": "http://127.0.0.1:9093",
    "groupLabels": {"instance": "box3:9840", "gpu": "0000:2d:00.0"},
    "commonLabels": {"job": "gpuwatch", "instance": "box3:9840", "host": "box3", "gpu": "0000:2d:00.0",
                     "severity": "critical"},
    "commonAnnotations": {},
    "alerts": [
        {"status": "firing", "fingerprint": "a1", "generatorURL": "http://prometheus/graph",
         "startsAt": "2026-05-01T10:00:00Z", "endsAt": "0001-01-01T00:00:00Z",
         "labels": {"alertname": "GpuJunctionNearCrit", "severity": "critical", "job": "gpuwatch",
                    "instance": "box3:9840", "host": "box3", "gpu": "0000:2d:00.0", "sensor": "junction"},
         "annotations": {"summary": "GPU 0000:2d:00.0 junction at 104 °C, within 5 °C of crit",
                         "headline": "junction 104 °C, within 5 °C of crit, trainer yolo paused",
                         "action": "check the fan, airflow and dust; lower the power cap until fixed",
                         "description": "The hotspot of GPU 0000:2d:00.0 on box3:9840 is within 5 °C of crit."}},
        {"status": "resolved", "fingerprint": "a2", "generatorURL": "http://prometheus/graph",
         "startsAt": "2026-05-01T09:50:00Z", "endsAt": "2026-05-01T09:59:00Z",
         "labels": {"alertname": "MyOwnRule", "severity": "warning", "job": "gpuwatch", "instance": "box3:9840",
                    "host": "box3", "gpu": "0000:2d:00.0"},
         "annotations": {"summary": "a rule without headline falls back to its summary"}},
    ],
}
FIRING_LINE = ("gpu 0000:2d:00.0 on box3: junction 104 °C, within 5 °C of crit, trainer yolo paused"
               " - check the fan, airflow and dust; lower the power cap until fixed")
RESOLVED_LINE = "RESOLVED gpu 0000:2d:00.0 on box3: MyOwnRule, was: a rule without headline falls back to its summary"
RENDERED = {
    "gpuwatch.text": f"{FIRING_LINE}\n{RESOLVED_LINE}\n",
    "gpuwatch.title": "[FIRING:1] gpu 0000:2d:00.0 on box3",
    "gpuwatch.email.subject": "gpuwatch [FIRING:1] gpu 0000:2d:00.0 on box3",
    "gpuwatch.email.text": (f"{FIRING_LINE}\n{RESOLVED_LINE}\n\nGpuJunctionNearCrit (critical), since 2026-05-01 "
                            "10:00:00 UTC\nThe hotspot of GPU 0000:2d:00.0 on box3:9840 is within 5 °C of crit.\n"),
}


def test_every_template_renders_one_line_per_alert(tmp_path: Path) -> None:
    used = set(re.findall(r'template "([\w.]+)"', CONFIG.read_text()))
    defined = set(re.findall(r'define "([\w.]+)"', TEMPLATES.read_text()))
    assert used <= defined, f"alertmanager.yml uses undefined templates: {used - defined}"
    assert used <= set(RENDERED), f"templates without an expected rendering here: {used - set(RENDERED)}"
    data = tmp_path / "data.json"
    data.write_text(json.dumps(SAMPLE))
    for name, expected in RENDERED.items():
        done = amtool("template", "render", f"--template.glob={TEMPLATES}", f"--template.data={data}",
                      f'--template.text={{{{ template "{name}" . }}}}')
        assert done.returncode == 0, done.stdout + done.stderr
        assert done.stdout.rstrip("\n") == expected.rstrip("\n"), name


def hot_daemon(workdir: Path) -> str:
    """One simulated card, fan stuck at 42 %, a supervised trainer "yolo" keeping it loaded: the junction
    settles at ~107 °C, past GpuJunctionNearCrit's line and below crit (the supervisor's emergency
    stop). The [thermal] limits sit above that equilibrium so nothing but the test pauses the trainer."""
    trainer = [sys.executable, str(REPO / "demo" / "train_demo.py"), "--backend", "python", "--step-s", "0.2"]
    return daemon_config(workdir / "run-hot", (
        '[thermal]\nedge_limit_c = 100.0\njunction_limit_c = 109.0\nmem_limit_c = 104.0\n'
        '[simulate]\nenabled = true\ngpus = 1\ntime_scale = 40.0\n[simulate.faults]\nfan_stuck_percent = 42.0\n'
        f'[[trainer]]\nname = "yolo"\ncommand = {json.dumps(trainer)}\ncwd = "{workdir}"\ngrace_s = 5.0\n'
        'debounce_s = 0.0\nmin_pause_s = 0.0\n'
        # a root daemon runs a trainer as root only when asked (docs/supervisor.md)
        f'user = "{pwd.getpwuid(os.geteuid()).pw_name}"\n'))


def gone_daemon(workdir: Path) -> str:
    """One simulated card that falls off the bus 10 s after start. Its fan controller then loses the
    temperature and goes to failsafe: GpuMissing and GpuFanFailsafe fire for the same GPU."""
    return daemon_config(workdir / "run-gone", '[simulate]\nenabled = true\ngpus = 1\ntime_scale = 1.0\n'
                                               '[simulate.faults]\ndisappear_after_s = 10.0\n')


def junction_c(instance: str) -> float | None:
    gpu = next(g for g in get_json(f"http://{instance}/status")["gpus"] if g["gpu_id"] == GPU)
    value: float | None = gpu["temperatures"]["junction"]["temp_c"]
    return value


def alerts_in(delivery: Delivery) -> list[dict[str, Any]]:
    alerts: list[dict[str, Any]] = delivery.body["alerts"]
    return alerts


def webhook(sink: NotificationSink, instance: str, alertname: str, status: str) -> Delivery | None:
    """The first webhook delivery carrying ``alertname`` of ``instance`` with ``status``."""
    return next((d for d in sink.deliveries() if d.route == "/webhook" for a in alerts_in(d)
                 if a["labels"]["instance"] == instance and a["labels"]["alertname"] == alertname
                 and a["status"] == status), None)


def delivered(sink: NotificationSink, instance: str) -> set[str]:
    return {a["labels"]["alertname"] for d in sink.deliveries() if d.route == "/webhook" for a in alerts_in(d)
            if a["labels"]["instance"] == instance}


def chat_text(sink: NotificationSink, instance: str, prefix: str = "") -> str | None:
    texts = [d.body["attachments"][0]["text"] for d in sink.deliveries() if d.route == "/chat"]
    return next((t for t in texts if instance in t and t.startswith(prefix)), None)


def suppressed(am: str, instance: str, alertname: str) -> dict[str, Any] | None:
    """Alertmanager's status of an alert it holds back (inhibited), else None."""
    filters = [f'instance="{instance}"', f'alertname="{alertname}"']
    alerts = get_json(f"{am}/api/v2/alerts?" + urllib.parse.urlencode({"filter": filters}, doseq=True))
    return next((a["status"] for a in alerts if a["status"]["state"] == "suppressed" and a["status"]["inhibitedBy"]),
                None)


@pytest.mark.timeout(240)  # bounded waits of 60 s each on a loaded machine; the run takes ~20-30 s
@pytest.mark.skipif(bool(missing("prometheus", "alertmanager")), reason=missing("prometheus", "alertmanager"))
def test_alerts_reach_every_receiver_resolve_and_inhibit(tmp_path: Path) -> None:
    with NotificationSink() as sink, Processes(tmp_path / "logs") as processes:
        (tmp_path / "hot.toml").write_text(hot_daemon(tmp_path))
        (tmp_path / "gone.toml").write_text(gone_daemon(tmp_path))
        daemon, hot = start_gpuwatch(processes, "gpuwatch-hot", tmp_path / "hot.toml")
        _, gone_instance = start_gpuwatch(processes, "gpuwatch-gone", tmp_path / "gone.toml")

        am_dir = tmp_path / "am"
        am_dir.mkdir()
        shutil.copy(TEMPLATES, am_dir)
        (am_dir / "alertmanager.yml").write_text(local_alertmanager(CONFIG.read_text(), sink.http_port, sink.smtp_port))
        alertmanager, am = start_alertmanager(processes, tmp_path, am_dir / "alertmanager.yml")

        prom_dir = tmp_path / "prom"
        prom_dir.mkdir()
        # keep_firing_for too: the cooled card's alert resolves within the test's waits
        (prom_dir / "alerts.yml").write_text(shorten_for(ALERTS.read_text(), "2s", PROVOKED, keep_firing_for="2s"))
        prometheus, prom = start_prometheus(processes, prom_dir, (
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files: [alerts.yml]\n"
            f"alerting:\n  alertmanagers:\n    - static_configs:\n        - targets: ['{am.removeprefix('http://')}']\n"
            f"scrape_configs:\n  - job_name: gpuwatch\n    static_configs:\n"
            f"      - targets: ['{hot}', '{gone_instance}']\n"))
        wait_up("prometheus to scrape both daemons", lambda: targets_up(prom) == {hot, gone_instance}, prometheus)
        wait_up("prometheus to find alertmanager",
                lambda: get_json(f"{prom}/api/v1/alertmanagers")["data"]["activeAlertmanagers"], prometheus)

        # 1. The hot card pages, on every receiver, in one line.
        wait_up("the junction to pass 105 °C", lambda: (junction_c(hot) or 0) >= NEAR_CRIT_C, daemon)
        fired = wait_up("the firing webhook", lambda: webhook(sink, hot, "GpuJunctionNearCrit", "firing"), alertmanager)
        alert = next(a for a in alerts_in(fired) if a["labels"]["alertname"] == "GpuJunctionNearCrit")
        assert alert["labels"] == {"alertname": "GpuJunctionNearCrit", "severity": "critical", "job": "gpuwatch",
                                   "instance": hot, "gpu": GPU, "sensor": "junction"}
        assert fired.body["groupLabels"] == {"instance": hot, "gpu": GPU}
        headline = r"junction 1\d\d °C, within 5 °C of crit, trainer yolo (running|pausing|paused)"
        assert re.fullmatch(headline, alert["annotations"]["headline"]), alert["annotations"]
        line = rf"gpu {GPU} on {re.escape(hot)}: {headline} - check the fan, airflow and dust"
        chat = wait_up("the chat message", lambda: chat_text(sink, hot), alertmanager)
        assert re.match(line, chat), chat
        mail = wait_up("the mail", lambda: next((d for d in sink.deliveries() if d.kind == "smtp"
                                                 and f"on {hot}" in d.subject()), None), alertmanager)
        assert mail.subject() == f"gpuwatch [FIRING:1] gpu {GPU} on {hot}: GpuJunctionNearCrit"
        assert mail.recipients == ("gpu-oncall@example.org",)
        assert re.match(line, mail.mail_text()) and "The hotspot of GPU" in mail.mail_text(), mail.mail_text()
        ntfy = wait_up("the ntfy webhook", lambda: next((d for d in sink.deliveries() if d.route == "/ntfy"), None))
        ntfy_query = urllib.parse.parse_qs(urllib.parse.urlsplit(ntfy.path).query)
        assert ntfy_query["tpl"] == ["1"] and "{{range .alerts}}" in ntfy_query["m"][0], ntfy_query

        # 2. Inhibition, synthetic: each rule of inhibit_rules holds back what it covers.
        now = datetime.now(UTC)
        synthetic = [("box8:9840", "GpuMissing", "0000:99:00.0"), ("box8:9840", "GpuFanStalled", "0000:99:00.0"),
                     ("box9:9840", "GpuwatchDown", None), ("box9:9840", "TrainerFailed", None)]
        assert post_json(f"{am}/api/v2/alerts", [
            {"labels": {"job": "gpuwatch", "instance": instance, "alertname": name, "severity": "critical",
                        **({"gpu": gpu} if gpu else {})},
             "annotations": {"headline": f"{name} (synthetic)"},
             "startsAt": now.isoformat(), "endsAt": (now + timedelta(minutes=5)).isoformat()}
            for instance, name, gpu in synthetic]) == 200
        wait_up("the synthetic sources delivered", lambda: webhook(sink, "box8:9840", "GpuMissing", "firing")
                and webhook(sink, "box9:9840", "GpuwatchDown", "firing"), alertmanager)
        assert suppressed(am, "box8:9840", "GpuFanStalled") and suppressed(am, "box9:9840", "TrainerFailed")

        # 3. Inhibition for real: the card that fell off the bus pages once; its failsafe fan is held back.
        wait_up("GpuMissing from the gone card", lambda: webhook(sink, gone_instance, "GpuMissing", "firing"),
                alertmanager)
        wait_up("GpuFanFailsafe inhibited", lambda: suppressed(am, gone_instance, "GpuFanFailsafe"), alertmanager)

        # 4. The card cools when its trainer is paused, and the alert resolves everywhere.
        paused = subprocess.run([*GPUWATCH, "pause", "yolo", "-c", str(tmp_path / "hot.toml")],
                                capture_output=True, text=True, timeout=30)
        assert paused.returncode == 0, paused.stdout + paused.stderr
        wait_up("the junction to fall below 105 °C", lambda: (junction_c(hot) or 999) < NEAR_CRIT_C, daemon)
        wait_up("the resolved webhook", lambda: webhook(sink, hot, "GpuJunctionNearCrit", "resolved"), alertmanager)
        resolved = wait_up("the resolved chat message", lambda: chat_text(sink, hot, "RESOLVED"), alertmanager)
        assert re.match(rf"RESOLVED gpu {GPU} on {re.escape(hot)}: GpuJunctionNearCrit, was: junction 1\d\d °C",
                        resolved), resolved

        # 5. Nobody was told anything else (many group intervals have passed since steps 2 and 3).
        assert delivered(sink, hot) == {"GpuJunctionNearCrit"}
        assert delivered(sink, gone_instance) == {"GpuMissing"}
        assert delivered(sink, "box8:9840") == {"GpuMissing"} and delivered(sink, "box9:9840") == {"GpuwatchDown"}
        assert query(prom, 'ALERTS{alertname="GpuFanFailsafe",alertstate="firing"}'), "failsafe never fired"
    assert daemon.process.returncode == 0, daemon.tail()

