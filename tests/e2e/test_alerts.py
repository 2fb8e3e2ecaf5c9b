"""config/alerts.yml and config/prometheus.yml through the real promtool: syntax, and a unit test per alert."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support.paths import REPO
from tests.support.stack import PROMTOOL, missing

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
