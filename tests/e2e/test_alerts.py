"""config/alerts.yml and config/prometheus.yml through the real promtool: syntax, and a unit test per alert."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.paths import REPO
from tests.support.stack import PROMTOOL, duration_s, missing

ALERTS = REPO / "config" / "alerts.yml"
ALERT_TESTS = REPO / "tests" / "promtool" / "alerts_test.yml"

pytestmark = [pytest.mark.prometheus, pytest.mark.skipif(bool(missing("promtool")), reason=missing("promtool"))]


def promtool(*args: str | Path) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL is not None
    return subprocess.run([PROMTOOL, *map(str, args)], capture_output=True, text=True, timeout=60)


def test_rules_are_valid() -> None:
    done = promtool("check", "rules", ALERTS)
    assert done.returncode == 0, done.stdout + done.stderr


def test_rule_unit_tests_pass() -> None:
    done = promtool("test", "rules", ALERT_TESTS)
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_alert_has_a_unit_test_and_a_description() -> None:
    text = ALERTS.read_text()
    alerts = re.findall(r"^\s+- alert: (\w+)", text, re.M)
    tested = set(re.findall(r"alertname: (\w+)", ALERT_TESTS.read_text()))
    assert alerts and set(alerts) <= tested, f"alerts without a promtool test: {set(alerts) - tested}"
    assert text.count("description:") == len(alerts)


def test_every_alert_has_a_one_line_headline_and_action() -> None:
    # The notification template prints "gpu <gpu> on <host>: <headline> - <action>" (config/alerts.yml's
    # header): both must exist, each on one line (a quoted scalar, not a folded block).
    blocks = re.split(r"^\s+- alert: ", ALERTS.read_text(), flags=re.M)[1:]
    assert blocks
    for block in blocks:
        name = block.split("\n", 1)[0]
        for key in ("headline", "action"):
            assert re.search(rf"^\s+{key}: '[^\n]+'$", block, re.M), f"{name}: no one-line {key} annotation"


def test_example_scrape_config_is_valid(tmp_path: Path) -> None:
    # promtool resolves rule_files relative to the config, as Prometheus does: check the two together.
    shutil.copy(REPO / "config" / "prometheus.yml", tmp_path)
    shutil.copy(ALERTS, tmp_path)
    done = promtool("check", "config", tmp_path / "prometheus.yml")
    assert done.returncode == 0, done.stdout + done.stderr
    targets = json.loads((REPO / "config" / "targets.example.json").read_text())
    assert all(t["targets"] for t in targets)


# A literal duration in a headline or summary goes stale when a `for:` or a window is tuned (issue 39):
# durations there come from the data ($value, ALERTS_FOR_STATE) or are said in words.
_LITERAL_DURATION = re.compile(r"\b\d+\s*(?:ms|s|m|h|d|w|secs?|seconds?|mins?|minutes?|hours?|days?|weeks?)\b"
                               r"|\b(?:an?|one) (?:second|minute|hour|day|week)\b", re.I)


def _rules() -> list[dict[str, Any]]:
    groups = yaml.safe_load(ALERTS.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"]]


def _text_outside_templates(text: str) -> str:
    """The words a reader sees, without ``{{ ... }}`` actions (their PromQL has windows like [2m])."""
    return re.sub(r"\{\{.*?\}\}", " ", text)


def test_headlines_and_summaries_have_no_literal_duration() -> None:
    for rule in _rules():
        for key in ("headline", "summary"):
            text = _text_outside_templates(rule["annotations"][key])
            found = _LITERAL_DURATION.search(text)
            assert not found, f"{rule['alert']}: {key} says {found.group(0)!r}: render it or say it in words"


def test_the_literal_duration_check_catches_the_old_texts() -> None:
    for old in ("gpuwatch not scraped for 2 minutes (down or unreachable)", "trainer bert paused for 15 minutes",
                "121 failed reads in 10 minutes", "12 correctable PCIe errors in an hour", "held for 5m"):
        assert _LITERAL_DURATION.search(old), old
    for fine in ("junction 104 °C, within 5 °C of crit", "fan in failsafe, 100 %", "restarted 4 times"):
        assert not _LITERAL_DURATION.search(fine), fine


def test_every_summary_names_the_machine_and_the_gpu() -> None:
    for rule in _rules():
        summary = rule["annotations"]["summary"]
        assert "$labels.instance" in summary, f"{rule['alert']}: summary does not name the machine: {summary!r}"
        mentions_gpu = any("$labels.gpu" in rule["annotations"][k] for k in ("headline", "description"))
        assert not mentions_gpu or "$labels.gpu" in summary, f"{rule['alert']}: summary lacks the GPU: {summary!r}"


def test_nothing_resolves_because_the_daemon_died_timing_budget() -> None:
    # config/alerts.yml's header: every alert on the daemon's series keeps firing longer than GpuwatchDown
    # takes to fire after a kill, and an inhibiting alert outlives what it holds back by a group interval.
    rules = {rule["alert"]: rule for rule in _rules()}
    prometheus = yaml.safe_load((REPO / "config" / "prometheus.yml").read_text())
    alertmanager = yaml.safe_load((REPO / "config" / "alertmanager.yml").read_text())
    evaluation_s = duration_s(prometheus["global"]["evaluation_interval"])
    job = next(j for j in prometheus["scrape_configs"] if j["job_name"] == "gpuwatch")
    scrape_s = duration_s(job.get("scrape_interval", prometheus["global"]["scrape_interval"]))
    group_interval_s = duration_s(alertmanager["route"]["group_interval"])

    down = rules.pop("GpuwatchDown")
    assert "keep_firing_for" not in down, "GpuwatchDown is on `up`, Prometheus' own series: it needs none"
    down_fires_s = scrape_s + evaluation_s + duration_s(down["for"]) + evaluation_s
    for name, rule in rules.items():
        assert "keep_firing_for" in rule, f"{name}: its series vanish with the daemon; it needs keep_firing_for"
        # last true at the evaluation before the first failed scrape, at worst one evaluation before the kill
        kept_until_s = -evaluation_s + duration_s(rule["keep_firing_for"])
        assert kept_until_s > down_fires_s + 30, f"{name}: resolves {kept_until_s}s after a kill, GpuwatchDown " \
                                                 f"fires only after {down_fires_s}s"
    for inhibit in alertmanager["inhibit_rules"]:
        sources = re.fullmatch(r'alertname=~?"([\w|]+)"', inhibit["source_matchers"][0])
        assert sources, inhibit
        targets_re = re.fullmatch(r'alertname(=~|!~|=)"([\w|]+)"', inhibit["target_matchers"][0])
        assert targets_re, inhibit
        op, pattern = targets_re.groups()
        targets = [n for n in rules if (re.fullmatch(pattern, n) is not None) == (op != "!~")]
        for source in sources.group(1).split("|"):
            if source == "GpuwatchDown":
                continue  # on `up`: it resolves when the daemon is back, and its targets from fresh data
            for target in targets:
                margin_s = duration_s(rules[source]["keep_firing_for"]) - duration_s(rules[target]["keep_firing_for"])
                assert margin_s > group_interval_s + 2 * evaluation_s, \
                    f"{source} must outlive {target} by a group_interval (+2 evaluations): {margin_s}s"
