"""Real unprivileged users for the hostile-user tests: made with ``useradd`` by the test, removed after.

``with unprivileged_user() as user:`` yields a fresh user's name (its own group, no home, no shell); the user
and its group are removed when the block ends, whatever happened in it. ``run_as(user, argv)`` runs a command
as that user (groups, gid, uid dropped before exec), so a test acts as the hostile local user would.
Tests that use them skip where the suite does not run as root (``needs_root``).
"""

from __future__ import annotations

import itertools
import os
import pwd
import subprocess
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import pytest

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="creating an unprivileged user needs root")
_serial = itertools.count()


@contextmanager
def unprivileged_user(prefix: str = "gwu", groups: Sequence[str] = ()) -> Iterator[str]:
    """A new user for the block: unique per process and call (xdist workers run side by side)."""
    name = f"{prefix}{os.getpid() % 100000}x{next(_serial)}"[:32]
    extra = ["-G", ",".join(groups)] if groups else []
    subprocess.run(["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", *extra, name], check=True,
                   capture_output=True)
    try:
        yield name
    finally:
        subprocess.run(["pkill", "-KILL", "-u", name], capture_output=True)
        subprocess.run(["userdel", name], capture_output=True)


def demote(user: str) -> Any:
    """A preexec_fn: become USER (its own groups only) before exec."""
    entry = pwd.getpwnam(user)

    def become() -> None:
        os.initgroups(entry.pw_name, entry.pw_gid)
        os.setgid(entry.pw_gid)
        os.setuid(entry.pw_uid)

    return become


def run_as(user: str, argv: Sequence[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    """Run ARGV as USER, output captured as text."""
    kwargs.setdefault("capture_output", True)
    kwargs.setdefault("text", True)
    return subprocess.run(list(argv), preexec_fn=demote(user), **kwargs)  # noqa: PLW1509
