"""A trainer's status lines fitted to the terminal's width (cli/trainer_rows.py, text.fit): the least important
fields go first, those that fit again come back, what is still too wide is cut with "…"; colour codes take no
column; a pipe gets whole lines. First contact (issue 50 item 15): trainer lines were 137+ columns."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import struct
import termios
from pathlib import Path
from typing import Any

import pytest

from gpuwatch.cli.status import render
from gpuwatch.cli.text import Field, fit, painter, terminal_width
from gpuwatch.publish.document import to_document
from tests.support.published import NOW_UNIX, example_state

ANSI = re.compile(r"\x1b\[[0-9;]*m")
LOG = "/run/user/1000/gpuwatch/runs/4242-abcdefgh/output.log"


@pytest.fixture
def doc(tmp_path: Path) -> dict[str, Any]:
    document: dict[str, Any] = to_document(example_state(tmp_path / "sys"), "daemon")
    document["trainers"][0].update(origin="attached", user="alice", job_id="4242", last_exit_code=-15,
                                   reason="hot: junction 99 C over 95 C", log_path=LOG)
    return document


def _trainer_lines(doc: dict[str, Any], width: int | None, color: bool = False) -> list[str]:
    lines = render(doc, NOW_UNIX, color=color, width=width).splitlines()
    start = next(index for index, line in enumerate(lines) if line.startswith("trainer "))
    return lines[start:]


@pytest.mark.parametrize(("width", "expected"), [
    (None, [
        "trainer resnet: running  [attached, alice, job 4242]  pid 4242  up 1h00m  restarts 2  last exit SIGTERM (143)"
        "  4.50 steps/s  last step 0s ago  energy 0.500 kWh  4.5 steps/kJ  2 ranks (job: 4)"
        "  (hot: junction 99 C over 95 C)",
        "  on 0000:03:00.0: vram 12 MiB  gtt 20 MiB  drm engine 0%  rocm vram 6.0 GiB  kfd cu 75%  (2 processes)",
        f"  log    {LOG}  (gpuwatch logs resnet)",
        "trainer bert: paused  restarts 0  2/2 ranks held  (junction over limit)",
        "  heartbeat unreadable 2 times (not a regular file of at most 64 KiB: a FIFO, a link, too large); its "
        "progress is not seen",
        "trainer vit: backoff  restarts 1  last exit 1",
    ]),
    (120, [
        "trainer resnet: running  pid 4242  4.50 steps/s  last step 0s ago  2 ranks (job: 4)"
        "  (hot: junction 99 C over 95 C)",
        "  on 0000:03:00.0: vram 12 MiB  gtt 20 MiB  drm engine 0%  rocm vram 6.0 GiB  kfd cu 75%  (2 processes)",
        f"  log    {LOG}  (gpuwatch logs resnet)",
        "trainer bert: paused  restarts 0  2/2 ranks held  (junction over limit)",
        "  heartbeat unreadable 2 times; its progress is not seen",
        "trainer vit: backoff  restarts 1  last exit 1",
    ]),
    (80, [
        "trainer resnet: running  2 ranks (job: 4)  (hot: junction 99 C over 95 C)",
        "  on 0000:03:00.0: vram 12 MiB  drm engine 0%  rocm vram 6.0 GiB  kfd cu 75%",
        f"  log    {LOG}",
        "trainer bert: paused  restarts 0  2/2 ranks held  (junction over limit)",
        "  heartbeat unreadable 2 times; its progress is not seen",
        "trainer vit: backoff  restarts 1  last exit 1",
    ]),
])
def test_the_trainer_lines_at_a_width(doc: dict[str, Any], width: int | None, expected: list[str]) -> None:
    assert _trainer_lines(doc, width) == expected


@pytest.mark.parametrize("width", [80, 120])
def test_in_colour_every_line_fits_as_it_does_plain(doc: dict[str, Any], width: int) -> None:
    doc["trainers"][1]["stuck_pids"] = [31337, 31338]
    coloured = _trainer_lines(doc, width, color=True)
    assert any(ANSI.search(line) for line in coloured)
    assert [ANSI.sub("", line) for line in coloured] == _trainer_lines(doc, width)
    assert all(len(ANSI.sub("", line)) <= width for line in coloured)


def test_a_name_wider_than_the_terminal_is_cut() -> None:
    line = fit([Field("trainer " + "n" * 90 + ": "), Field("running"), Field("  pid 1", 1)], 80, painter(False))
    assert line == "trainer " + "n" * 71 + "…"


@pytest.mark.parametrize(("width", "expected"), [
    (None, "a  bb  ccc  dddd"),
    (16, "a  bb  ccc  dddd"),
    (15, "a  ccc  dddd"),  # bb (3) goes first; then none is over
    (12, "a  ccc  dddd"),
    (11, "a  bb  ccc"),  # dddd goes too; bb fits again
    (10, "a  bb  ccc"),
    (9, "a  ccc"),
    (5, "a  bb"),
    (3, "a"),  # all but the first, which never goes
])
def test_fields_go_by_rank_and_come_back_when_they_fit(width: int | None, expected: str,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("gpuwatch.cli.text.MIN_WIDTH", 1)
    fields = [Field("a"), Field("  bb", 3), Field("  ccc", 1), Field("  dddd", 2)]
    assert fit(fields, width, painter(False)) == expected


@pytest.mark.parametrize(("columns", "terminal", "expected"), [
    (None, True, 120),  # the terminal's own width
    (None, False, None),  # a pipe: whole lines, as systemctl and ps give them
    ("100", True, 100),  # on a terminal COLUMNS wins, as shutil reads it
    ("100", False, None),  # not in a pipe: readline exports COLUMNS to the children of every interactive Python
    ("wide", True, 120),
    ("0", True, 120),
])
def test_the_width_is_the_terminals_or_none_for_a_pipe(columns: str | None, terminal: bool,
                                                        expected: int | None) -> None:
    environ = {} if columns is None else {"COLUMNS": columns}
    if terminal:
        reader, writer = pty.openpty()
        fcntl.ioctl(writer, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 120, 0, 0))
    else:
        reader, writer = os.pipe()
    try:
        assert terminal_width(environ, writer) == expected
    finally:
        os.close(reader)
        os.close(writer)
