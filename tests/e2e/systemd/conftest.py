"""One real systemd per session (booted from the cached root, gpuwatch installed by scripts/install.sh)
and the unit handle each test resets; skipped with the reason where the machine cannot boot it."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from types import FrameType

import pytest

from tests.support.debian_root import cached_root, find_mirror
from tests.support.nspawn import Container, cleanup_stale, why_not_here
from tests.support.paths import REPO
from tests.support.unit_rig import Unit, install, prepare, stage

_REPORT = pytest.StashKey[list[str]]()


def _interrupted(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")  # the finalizer below still tears the container down


@pytest.fixture(scope="session")
def booted(request: pytest.FixtureRequest) -> Iterator[Container]:
    reason = why_not_here()
    mirror = find_mirror() if reason is None else None
    if reason is None and mirror is None:
        reason = "no apt source for this release's main component to build the root from"
    if reason is not None or mirror is None:
        pytest.skip(f"systemd container: {reason}")
    report = request.config.stash.setdefault(_REPORT, [])
    report += [f"removed a killed run's leftovers: {name}" for name in cleanup_stale()]
    previous = signal.signal(signal.SIGTERM, _interrupted)
    box = None
    try:
        started = time.monotonic()
        box = Container(cached_root(*mirror, report))
        stage(box, REPO, report)
        state = box.boot()
        report.append(f"booted {box.sh('systemctl', '--version').stdout.splitlines()[0]} ({state})")
        install(box)
        prepare(box)
        report.append(f"installed and ready after {time.monotonic() - started:.0f} s")
        yield box
    finally:
        problems = box.close() if box is not None else []
        signal.signal(signal.SIGTERM, previous)
    assert not problems, problems


@pytest.fixture
def unit(booted: Container) -> Iterator[Unit]:
    """The unit; each test starts with ``unit.reset(...)`` (its config and drop-ins)."""
    handle = Unit(booted)
    yield handle
    print("journal of the unit (last 40 lines):\n" + "\n".join(handle.journal().splitlines()[-40:]))
    handle.systemctl("stop", "gpuwatch", timeout=240)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    """One line in the test log saying whether the container cases ran, and how the session went."""
    counts = {
        outcome: sum(1 for r in terminalreporter.stats.get(outcome, [])
                     if "tests/e2e/systemd/" in getattr(r, "nodeid", ""))
        for outcome in ("passed", "failed", "error", "skipped")
    }
    if any(counts.values()):
        ran = ", ".join(f"{n} {outcome}" for outcome, n in counts.items() if n)
        report: list[str] = config.stash.get(_REPORT, [])
        terminalreporter.write_line("; ".join([f"systemd container cases: {ran}", *report]))
