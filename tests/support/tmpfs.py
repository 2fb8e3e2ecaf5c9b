"""A real tmpfs mount for a test (a full file system, not a symlink to /dev/full): mounted in a block, unmounted
after it whatever happened; skipped, with the reason, where mounting is not permitted (not root, a container).
The one home for a test's mounts: ``read_only`` puts a read-only bind mount over one, ``fill`` leaves it full."""

from __future__ import annotations

import errno
import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

# More than any test stacks over one directory (a tmpfs and a read-only bind mount over it).
_MOUNTS_MAX = 8


def _mount(args: list[str]) -> None:
    done = subprocess.run(["mount", *args], capture_output=True, text=True, timeout=30)
    if done.returncode:
        pytest.skip(f"mount {' '.join(args)} is not permitted here: {done.stderr.strip() or done.returncode}")


@contextmanager
def tmpfs(path: Path, size: str = "1m", mode: str = "0755") -> Iterator[Path]:
    path.mkdir(parents=True, exist_ok=True)
    _mount(["-t", "tmpfs", "-o", f"size={size},mode={mode}", "tmpfs", str(path)])
    try:
        yield path
    finally:
        # Every mount stacked over it too (``read_only``'s): lazily, so a file a process still holds open there
        # (a stopped daemon's) does not keep the test's directory mounted.
        for _ in range(_MOUNTS_MAX):
            if not os.path.ismount(path):
                break
            subprocess.run(["umount", "-l", str(path)], capture_output=True, timeout=30)


def read_only(path: Path) -> None:
    """Every new open of a file under ``path`` (a ``tmpfs``) read-only from now on: a read-only bind mount over it
    (a remount of the tmpfs itself is refused while a file is open for writing there: a daemon's lock). It goes
    with the tmpfs at the end of ``tmpfs``'s block."""
    _mount(["--bind", str(path), str(path)])
    _mount(["-o", "remount,bind,ro", str(path)])


def fill(directory: Path) -> None:
    """Write until the file system has no block left (unbuffered: nothing is left to flush at the close)."""
    with (directory / "filler").open("wb", buffering=0) as filler:
        try:
            while True:
                filler.write(b"\0" * 4096)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC, exc
