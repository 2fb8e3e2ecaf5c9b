"""The health checks as one table (``publish.health_codes.CHECKS``, issue 48): docs/cluster.md's table, the verdict's
predicates and ``[health] off`` all follow it (the NPD conditions follow its classes: tests/cluster/test_kubernetes.py);
the deprecated booleans of before ``off`` are still read, into it."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest
from pydantic import ValidationError

from gpuwatch.config.sections import HealthConfig
from gpuwatch.publish.health_codes import CHECKS, CLASSES, DAEMON_CODES, NAMES, OFF_BY_DEFAULT
from gpuwatch.publish.verdict import PREDICATES
from tests.support.cli import gpuwatch
from tests.support.paths import REPO

ROW = re.compile(r"^\| (G\d{3}) \| (?:`(\w+)` \((on|\*\*off\*\*)\)|- \(never off\))")


def test_the_cluster_doc_lists_every_check_as_the_table_does() -> None:
    documented = [match.groups() for line in (REPO / "docs" / "cluster.md").read_text().splitlines()
                  if (match := ROW.match(line))]
    assert sorted(documented) == sorted((code, name, None if name is None else "on" if on else "**off**")
                                        for code, name, _, on, _ in CHECKS)


def test_every_gpu_check_has_its_predicate_and_the_daemons_have_none() -> None:
    """The daemon's own checks are found by the state's reader (cli/health.py), the others by ``verdict.judge``."""
    assert list(PREDICATES) == [code for codes in CLASSES.values() for code in codes]
    assert not set(PREDICATES) & set(DAEMON_CODES)


def test_a_check_added_after_off_has_no_deprecated_boolean() -> None:
    with pytest.raises(ValidationError):
        HealthConfig.model_validate({"aer_nonfatal": True})


def test_the_checks_that_guard_the_verdict_itself_are_never_off() -> None:
    never_off = {code for code, name, _, _, _ in CHECKS if name is None}
    assert never_off == {"G001", "G014", "G015"} and "daemon_down" in NAMES
    with pytest.raises(ValidationError):
        HealthConfig(off=["stale"])


def test_off_defaults_to_the_table_and_refuses_what_is_not_a_check() -> None:
    assert HealthConfig().off == list(OFF_BY_DEFAULT) == ["pcie_speed", "aer_nonfatal"]
    assert HealthConfig(off=["fan_stalled", "fan_stalled"]).off == ["fan_stalled"]
    assert not HealthConfig(off=["fan_stalled"]).on("fan_stalled") and HealthConfig(off=[]).on("pcie_speed")
    with pytest.raises(ValidationError, match="not a health check: fan_stall "):
        HealthConfig(off=["fan_stall"])


@pytest.mark.parametrize(("given", "off"), [
    ({"fan_stalled": False}, ["pcie_speed", "aer_nonfatal", "fan_stalled"]),
    ({"pcie_speed": True}, ["aer_nonfatal"]),
    ({"pcie_speed": False, "daemon_down": True}, ["pcie_speed", "aer_nonfatal"]),
    ({"aer_fatal": False, "daemon_down": False}, ["pcie_speed", "aer_nonfatal", "aer_fatal", "daemon_down"]),
    ({"off": ["fan_stalled"], "fan_stalled": False, "pcie_speed": True}, ["fan_stalled"]),  # both, agreeing
])
def test_a_deprecated_boolean_is_read_into_off_with_one_warning(given: dict[str, object], off: list[str],
                                                                 caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="gpuwatch.config.sections"):
        assert HealthConfig.model_validate(given).off == off
    (warning,) = caplog.messages
    assert "deprecated" in warning and "\n" not in warning


def test_no_warning_without_a_deprecated_boolean(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        HealthConfig.model_validate({"off": ["gpu_down"], "over_crit_s": 5})
    assert caplog.messages == []


@pytest.mark.parametrize("given", [{"off": [], "fan_stalled": False}, {"off": ["pcie_speed"], "pcie_speed": True},
                                   {"fan_stalled": "no"}])
def test_a_boolean_that_contradicts_off_is_refused(given: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        HealthConfig.model_validate(given)


def test_an_unknown_name_in_off_is_one_line_and_exit_2(tmp_path: Path) -> None:
    path = tmp_path / "gpuwatch.toml"
    path.write_text('[health]\noff = ["pcie_speed", "fan_stall"]\n')
    result = gpuwatch("check-config", "-c", str(path))
    assert (result.returncode, result.stdout) == (2, "")
    (problem,) = result.stderr.splitlines()[1:]
    assert problem.startswith("  health.off = ['pcie_speed', 'fan_stall']: not a health check: fan_stall (checks: ")


def test_a_deprecated_boolean_warns_in_one_line_and_loads(tmp_path: Path) -> None:
    path = tmp_path / "gpuwatch.toml"
    path.write_text("[health]\nfan_stalled = false\n")
    result = gpuwatch("check-config", "-c", str(path))
    assert result.returncode == 0
    assert 'off = [\n    "pcie_speed",\n    "aer_nonfatal",\n    "fan_stalled",\n]' in result.stdout
    assert result.stderr == ('[health] fan_stalled: deprecated, read as off = ["pcie_speed", "aer_nonfatal", '
                             '"fan_stalled"]; write that instead (docs/cluster.md)\n')
