"""Issue 50 item 4: docs/security.md states the control socket's rules once ("The control socket: who may act,
and what other users see"), from the code's constants, and no other page says otherwise."""

from __future__ import annotations

import re

import pytest

from gpuwatch.cli.control import control_exit
from gpuwatch.daemon.control import ADMIN_SOCKET_MODE, SOCKET_MODE
from gpuwatch.supervise.access import NOT_PERMITTED
from tests.support.paths import REPO

SECURITY = REPO / "docs/security.md"
ANCHOR = "security.md#the-control-socket-who-may-act-and-what-other-users-see"
PAGES = sorted((REPO / "docs").glob("*.md")) + [REPO / "README.md"]


def section() -> str:
    text = SECURITY.read_text()
    start = text.index("### The control socket: who may act, and what other users see")
    return text[start:text.index("\n### ", start + 4)]


def table(text: str, header: str) -> dict[str, str]:
    """First cell -> the rest of the row, of the table whose header row starts with ``header``."""
    lines = text[text.index(header):].splitlines()
    rows = {}
    for line in lines[2:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        rows[cells[0].strip("`")] = " | ".join(cells[1:])
    return rows


def test_the_socket_modes_are_the_codes() -> None:
    sockets = table(section(), "| socket | mode |")
    assert sockets["control.sock"].startswith(f"{SOCKET_MODE:04o} |")
    assert sockets["control-admin.sock"].startswith(f"{ADMIN_SOCKET_MODE:04o},")


@pytest.mark.parametrize("ok, message, described", [
    (True, "pause requested for t; t is already paused by hand: nothing changes", "is already paused by hand"),
    (False, f"{NOT_PERMITTED}: run train belongs to alice", f"refused: `{NOT_PERMITTED}: ...`"),
    (None, "the daemon is not running (no control socket at /run/gpuwatch/control.sock)", "the daemon is not running"),
    (False, "no trainer or run named 'x' (trainers and runs: none)", "an unknown NAME or pid"),
    (False, "run quick has already ended (finished): nothing to pause", "a run that has already ended"),
    (False, "run t was attached: its wrapper restarts it (gpuwatch train --restart), the daemon cannot",
     "`restart` of an attached run"),
])
def test_the_exit_code_table_is_the_codes(ok: bool | None, message: str, described: str) -> None:
    """The row that describes each answer (in the daemon's words) has the exit code the CLI returns for it."""
    codes = table(section(), "| exit | when |")
    assert sorted(codes) == ["0", "1", "2"]
    rows = [code for code, when in codes.items() if described in when]
    assert rows == [str(control_exit(ok, message))], (message, codes)


def test_no_other_page_gives_the_socket_another_mode_or_exit_code() -> None:
    """A sentence that names the control socket and a mode says 0666 (or 0660 with the admin socket); no
    paragraph that quotes a refusal says exit 2; the pages that speak of who may act link to the one place."""
    wrong = []
    for page in PAGES:
        text = page.read_text()
        for sentence in re.split(r"(?<=[.|])\s", text.replace("\n", " ")):
            if "control" not in sentence or "sock" not in sentence:
                continue
            modes = set(re.findall(r"mode (0[0-7]{3})", sentence))
            allowed = {f"{SOCKET_MODE:04o}"} | ({f"{ADMIN_SOCKET_MODE:04o}"} if "control-admin" in sentence else set())
            if modes - allowed:
                wrong.append(f"{page.name}: {sentence[:160]}")
        for paragraph in text.split("\n\n"):  # a refusal's exit code said near it
            if NOT_PERMITTED in paragraph and re.search(r"exits? 2\b", paragraph):
                wrong.append(f"{page.name}: {paragraph[:160]}")
    assert not wrong, wrong
    for name in ("attached-runs.md", "systemd.md", "supervisor.md", "robustness.md"):
        assert ANCHOR.split("#")[1] in (REPO / "docs" / name).read_text(), name
