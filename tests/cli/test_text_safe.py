"""Issue 46 item 6: a user's string made safe for a terminal (cli/text.safe), and the renderers that use it."""

from __future__ import annotations

from typing import Any

import pytest

from gpuwatch.cli.text import safe, safe_strings


@pytest.mark.parametrize("text, shown", [
    ("train", "train"),
    ("日本 naïve", "日本 naïve"),
    ("\x1b]0;owned\x07", "\\x1b]0;owned\\x07"),
    ("\x1b[2J", "\\x1b[2J"),
    ("\ud800", "\\ud800"),
    ("a\nb\r", "a\\nb\\r"),
    ("\x9b31m", "\\x9b31m"),
    (5, "5"),
])
def test_safe(text: object, shown: str) -> None:
    assert safe(text) == shown
    assert safe(text).encode("utf-8")  # never a UnicodeEncodeError


def test_safe_strings_reaches_every_string_of_a_document() -> None:
    doc = {"trainers": [{"name": "x", "reason": "\x1b[2J", "job_id": "\ud800", "pid": 5, "\x07": None}]}
    assert safe_strings(doc) == {"trainers": [{"name": "x", "reason": "\\x1b[2J", "job_id": "\\ud800", "pid": 5,
                                               "\\x07": None}]}


def test_status_prints_a_runs_escapes_and_surrogates_escaped() -> None:
    """What root's `gpuwatch status` prints of a run a user named: no raw escape, nothing a UTF-8 stdout refuses
    (a document written by an older daemon, or read from a state file, may still hold them)."""
    from gpuwatch.cli.status import render

    doc: Any = {"taken_unix": 1.0, "gpus": [], "trainers": [
        {"name": "x\x1b]0;owned\x07", "phase": "running", "origin": "attached", "user": "eve", "job_id": "\ud800",
         "reason": "\x1b[2J", "pid": 5}]}
    text = render(doc, now=2.0)
    assert "\x1b" not in text and "\x07" not in text and text.encode("utf-8")
    assert "trainer x\\x1b]0;owned\\x07: running  [attached, eve, job \\ud800]" in text and "(\\x1b[2J)" in text
