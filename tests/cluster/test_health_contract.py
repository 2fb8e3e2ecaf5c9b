"""`gpuwatch health`'s formats (cli/health/render.py): exit codes, one line, at most 80 characters, the prefix."""

from __future__ import annotations

import json
import re

import pytest

from gpuwatch.cli.health.render import Answer, from_document, no_daemon, render, summary

SLOT = "0000:03:00.0"
FAILSAFE = f"gpuwatch:G006 {SLOT} junction 108C>105C fan failsafe"
LONG = f"gpuwatch:G005 {SLOT} fan uncontrolled: " + "pwm1 write failed again and again " * 4
LINE = re.compile(r"^gpuwatch:G\d{3}( \S+)? .+")

HEALTHY = Answer(lines=())
WARN = Answer(lines=(), notes=(f"{SLOT} power capped", "trainer resnet paused"))
FAULT = Answer(lines=(FAILSAFE, f"gpuwatch:G009 {SLOT} reset, 1 stuck process(es) 7"))
TOO_LONG = Answer(lines=(LONG,))
STALE = Answer(lines=("gpuwatch:G001 daemon state 42s old",))
DOWN = no_daemon((), (), True, 2, 2)
DOWN_AND_HOT = no_daemon((FAILSAFE,), (), True, 2, 2)

# (answer, format, exit code, first line of the output)
TABLE = [
    (HEALTHY, "nhc", 0, "gpuwatch: healthy"),
    (HEALTHY, "npd", 0, "gpuwatch: healthy"),
    (HEALTHY, "nagios", 0, "GPUWATCH OK - gpuwatch: healthy"),
    (WARN, "nhc", 0, f"gpuwatch: healthy ({SLOT} power capped; trainer resnet paused)"),
    (WARN, "npd", 0, f"gpuwatch: healthy ({SLOT} power capped; trainer resnet paused)"),
    (WARN, "nagios", 1, f"GPUWATCH WARNING - gpuwatch: healthy ({SLOT} power capped; trainer resnet paused)"),
    (FAULT, "nhc", 1, FAILSAFE + " (+1 more)"),
    (FAULT, "npd", 1, FAILSAFE + " (+1 more)"),
    (FAULT, "nagios", 2, f"GPUWATCH CRITICAL - {FAILSAFE} (+1 more)"),
    (TOO_LONG, "npd", 1, LONG[:77] + "..."),
    (STALE, "nhc", 1, "gpuwatch:G001 daemon state 42s old"),
    (STALE, "npd", 2, "gpuwatch:G001 daemon state 42s old"),
    (STALE, "nagios", 3, "GPUWATCH UNKNOWN - gpuwatch:G001 daemon state 42s old"),
    (DOWN, "npd", 2, "gpuwatch:G002 daemon not running"),
    (DOWN, "nagios", 3, "GPUWATCH UNKNOWN - gpuwatch:G002 daemon not running"),
    (DOWN_AND_HOT, "npd", 1, "gpuwatch:G002 daemon not running (+1 more)"),
    (DOWN_AND_HOT, "nagios", 2, "GPUWATCH CRITICAL - gpuwatch:G002 daemon not running (+1 more)"),
]


@pytest.mark.parametrize(("answer", "fmt", "code", "first"), TABLE)
def test_the_contract_of_each_format(answer: Answer, fmt: str, code: int, first: str) -> None:
    got_code, text = render(answer, fmt)  # type: ignore[arg-type]
    assert (got_code, text.splitlines()[0]) == (code, first)
    if fmt in ("nhc", "npd"):
        assert "\n" not in text and len(text) <= 80  # NPD's max_output_length; NHC's one line
    if answer.lines:
        assert LINE.match(text.removeprefix(f"GPUWATCH {text.split()[1]} - ") if fmt == "nagios" else text)


def test_nagios_lists_every_fault_after_the_first_line() -> None:
    _, text = render(FAULT, "nagios")
    assert text.splitlines()[1:] == [FAULT.lines[1]]


def test_json_carries_every_fault_and_exits_as_nhc() -> None:
    code, text = render(FAULT, "json")
    doc = json.loads(text)
    assert code == 1 and doc["status"] == "unhealthy" and doc["faults"] == list(FAULT.lines)
    assert json.loads(render(STALE, "json")[1])["status"] == "unknown"


def test_a_fresh_document_gives_the_daemons_verdict_a_stale_one_g001() -> None:
    doc = {"schema": 1, "taken_unix": 1000.0, "daemon": {"pid": 1, "started_unix": 900.0, "interval_s": 1.0},
           "health": {"healthy": False, "faults": [{"line": FAILSAFE}], "notes": [], "drain_after_checks": 3,
                      "resume_after_checks": 4}}
    fresh = from_document(doc, 1001.0)
    assert (fresh.lines, fresh.drain_after_checks, fresh.resume_after_checks) == ((FAILSAFE,), 3, 4)
    stale = from_document(doc, 1100.0)
    assert stale.status == "unknown" and stale.lines == ("gpuwatch:G001 daemon state 100s old",)
    older = from_document({**doc, "health": None}, 1001.0)  # a daemon from before the verdict
    assert older.lines == ("gpuwatch:G001 daemon publishes no verdict",)


def test_the_summary_never_passes_the_limit() -> None:
    many = Answer(lines=tuple(f"gpuwatch:G004 0000:{i:02x}:00.0 gone" for i in range(12)))
    assert len(summary(many)) <= 80 and summary(many).endswith("(+11 more)")


def test_every_gpu_code_is_in_exactly_one_class() -> None:
    from gpuwatch.publish.health_codes import CLASSES, CODES, DAEMON_CODES

    classed = [code for codes in CLASSES.values() for code in codes]
    assert sorted(classed) == sorted(set(CODES) - set(DAEMON_CODES))


def test_one_class_keeps_its_faults_and_the_daemons() -> None:
    from gpuwatch.cli.health.render import only

    fan = only(FAULT, "fan")
    assert fan.lines == (FAILSAFE,) and render(fan, "npd") == (1, FAILSAFE)
    assert render(only(FAULT, "pcie"), "npd") == (0, "gpuwatch: healthy")
    assert render(only(WARN, "fan"), "nagios")[0] == 0  # a class's check has no notes
    assert render(only(DOWN_AND_HOT, "pcie"), "npd") == (2, "gpuwatch:G002 daemon not running")
